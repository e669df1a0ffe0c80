import type {
  ContextConfigDefault, FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, FastifySchema, RouteGenericInterface, RouteOptions,
  preHandlerAsyncHookHandler
} from 'fastify'
import fp from 'fastify-plugin'
import { createAdmin } from './admin.js'
import { Budgets } from './budgets.js'
import { createRegistrations } from './registrations.js'
import type { RateGuardDecorator, Registrations } from './registrations.js'
import { CHARGE, chargeOf, handlerStarts, refundAborted, settleOnResponse, settlesItself } from './charge.js'
import type { RequestCharge } from './charge.js'
import { REFUSAL, createHooks, stripCode } from './hook.js'
import type { BudgetHooks, RequestHook, RouteBudget } from './hook.js'
import { createLimiters } from './limiters.js'
import type { RateLimitCheck } from './limiters.js'
import { HeldAnswers } from './held-answers.js'
import { announceChanges, listenForChanges } from './changes.js'
import { Breaker } from './breaker.js'
import { InvalidOptionError, RedisNotReadyError, RedisRefusedError } from './errors.js'
import * as errors from './errors.js'
import { identityKeys } from './stores/key-names.js'
import { normalizeIP, trustsEveryAddress } from './ip.js'
import { deadline } from './deadline.js'
import { CHANNELS } from './channels.js'
import { Decider, TROUBLE_LOG_INTERVAL } from './decider.js'
import { isPermanent } from './trouble.js'
import { resolveOptions } from './options/plugin.js'
import { resolveLimiterOptions, resolveRouteConfig } from './options/route.js'
import type { ResolvedOptions, ResolvedRoute } from './options/resolved.js'
import type { FastifyRateLimitStoreCtor, HookName, RateGuardOptions, RedisLike, RouteRateLimitOptions, TheirStore } from './types.js'
import { MemoryStore } from './stores/memory.js'
import { theirParams } from './stores/app-store.js'
import { RedisStore, createClient, evictionPolicy, queueingOptions, whenReady } from './stores/redis.js'
import { onSilence } from './stores/stalled.js'
import type { DecideInput } from './stores/store.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This route's limits over the plugin's, or `false` to leave the route unlimited. */
    rateLimit?: RouteRateLimitOptions | false
  }
  // Declared as @fastify/rate-limit declares them (methods, the instance's type parameters), so an app typed
  // against theirs compiles unchanged, and a program holding both type packages merges them.
  interface FastifyInstance<RawServer, RawRequest, RawReply, Logger, TypeProvider> {
    rateGuard: RateGuardDecorator
    /** A hook limiting the requests it runs for (`@fastify/rate-limit`'s): the plugin-wide budget, or `options` over it. */
    rateLimit<
      RouteGeneric extends RouteGenericInterface = RouteGenericInterface,
      ContextConfig = ContextConfigDefault,
      SchemaCompiler extends FastifySchema = FastifySchema
    >(options?: RouteRateLimitOptions): preHandlerAsyncHookHandler<RawServer, RawRequest, RawReply, RouteGeneric, ContextConfig, SchemaCompiler, TypeProvider, Logger>
    /** A check to call by hand: counts the request (or, with `increment: false`, only reads) and answers its state. */
    createRateLimit (options?: RouteRateLimitOptions): RateLimitCheck
  }
  interface FastifyRequest {
    /** What this request was charged, and `settle(amount)` to make its final charge another (once). */
    rateGuard: RequestCharge
  }
}

/** Where the registrations behind `fastify.rateGuard` are kept, for a registration inside another to join. */
const REGISTRATIONS = Symbol.for('fastify-rate-guard.registrations')

/** Nothing but `@fastify/rate-limit`'s plugin name, registered where this plugin is. */
const THEIR_NAME = fp(async () => {}, { fastify: '5.x', name: '@fastify/rate-limit' })

/** How long registration waits for Redis to be ready before starting degraded (it keeps reconnecting). */
const READY_WAIT = 2000

async function rateGuardPlugin (fastify: FastifyInstance, options: RateGuardOptions): Promise<void> {
  // Each replaced value said once: a GET route's HEAD twin is declared with the same config.
  const said = new Set<string>()
  const warn = (message: string): void => {
    if (said.has(message)) return
    said.add(message)
    fastify.log.warn(message)
  }
  const opts = resolveOptions(options, warn)
  const outer = outerRegistrations(fastify)
  // Answers to @fastify/rate-limit's name too: a plugin of the app's that says `dependencies:
  // ['@fastify/rate-limit']` (to use fastify.rateLimit()), or asks hasPlugin('@fastify/rate-limit'), finds it.
  if (outer === undefined) await fastify.register(THEIR_NAME)
  // Where requests are counted: the app's store when given, else Redis when given (as theirs, never
  // fastify.redis unasked: an app's cache is not its limiter's store), else in process.
  const remote = opts.redis !== undefined
  outer?.check(opts.nameSpace, remote)
  if (opts.route.defaultKey) fastify.log.info(`rate-guard: clients are keyed by ${opts.keyTiers}`)
  if (trustsEveryProxy(fastify)) {
    fastify.log.warn('rate-guard: trustProxy trusts every address, so request.ip is the left-most X-Forwarded-For entry, which any client can forge to get a fresh budget: give trustProxy the addresses of your proxies instead (on a Unix socket, (address, hop) => hop === 0 trusts the proxy alone)')
  }
  const decider = await openDecider(fastify, opts)
  fastify.addHook('onClose', async () => await decider.close())

  const budgets = new Budgets()
  const undoneScopes = new Set<string>()
  // A request is limited once per registration: by its route's hook, or by the first limiter the app applies.
  const ran = Symbol('rate-guard.ran')
  fastify.decorateRequest(ran, false)
  // A store of the app's own (`@fastify/rate-limit`'s `store`): one instance for the plugin, a child per
  // route or limiter with options, as theirs makes them.
  const Store = opts.store
  const theirs = Store === undefined ? undefined : new Store(theirParams(opts.route)) as unknown as TheirStore
  const hooks = (made: RouteBudget, routeInfo?: object, config?: object): BudgetHooks => {
    if (made.route.shared !== null) undoneScopes.add(made.scope)
    const store = routeInfo === undefined ? theirs : theirs?.child({ ...config, ...theirParams(made.route), routeInfo })
    return createHooks(decider, opts, made, undoneScopes, ran, store)
  }
  const pluginHooks = hooks(budgets.plugin(opts.route))

  // Limiters made with options each count on a budget of their own (or their group's).
  const decorators = createLimiters(opts.timeout, (options, call) =>
    options === undefined ? pluginHooks : hooks(budgets.limiter(resolveLimiterOptions(options, opts, call, warn)), {}, options as object))
  // An outer registration's decorators are inherited here and cannot be replaced: its rateGuard takes this
  // registration in (see lib/registrations.ts), and says so.
  let registrations = outer
  if (registrations === undefined) {
    const made = registrations = createRegistrations()
    fastify.decorate('rateGuard', made.decorator)
    fastify.decorate(REGISTRATIONS, { getter: () => made })
    for (const name of ['rateLimit', 'createRateLimit'] as const) {
      if (fastify.hasDecorator(name)) fastify.log.warn(`rate-guard: fastify.${name} is another plugin's; this registration's is fastify.rateGuard.of(nameSpace).${name}`)
      else fastify.decorate(name, decorators[name] as never)
    }
  } else {
    fastify.log.warn({ nameSpace: opts.nameSpace }, 'rate-guard: registered inside another registration: fastify.rateGuard reaches both, fastify.rateLimit and createRateLimit are the outer one\'s; this one\'s are fastify.rateGuard.of(nameSpace)')
  }
  registrations.add({ ...createAdmin(decider.store, opts, budgets, decider.forget, decider.stats), ...decorators, nameSpace: opts.nameSpace, remote })

  // Refusals' bodies as @fastify/rate-limit's (see stripCode), and each request's charge; once per app,
  // whatever the registrations.
  if (!fastify.hasRequestDecorator(REFUSAL)) {
    fastify.decorateRequest(REFUSAL, null)
    fastify.addHook('onSend', stripCode)
    fastify.decorateRequest(CHARGE, null)
    fastify.decorateRequest('rateGuard', { getter (this: FastifyRequest) { return chargeOf(this) } })
  }
  // A route that settles by itself (countWhen, settle, refundAborted) gets the hooks that do it; others none.
  const settling = (routeOptions: RouteOptions, route: ResolvedRoute): void => {
    if (!settlesItself(route)) return
    if (route.countWhen !== undefined || route.settle !== undefined) appendHook(routeOptions, 'onResponse', settleOnResponse(route, opts.callbacks))
    if (route.refundAborted) {
      // After every other preHandler, the rate limiter's own included: the handler starts when it runs.
      appendHook(routeOptions, 'preHandler', handlerStarts)
      appendHook(routeOptions, 'onRequestAbort', refundAborted)
    }
  }

  // Unmatched URLs: a client known to be banned is refused there too, at no Redis call (a banned scanner
  // would otherwise probe them for free); to count them as well, the app puts fastify.rateLimit() on its
  // not-found handler.
  if (opts.global) fastify.addHook('onRequest', pluginHooks.notFound)

  fastify.addHook('onRoute', (routeOptions) => {
    const config = routeOptions.config?.rateLimit
    // null, as in @fastify/rate-limit, is no configuration: the plugin's budget.
    if (config === undefined || config === null) {
      if (opts.global) {
        addHook(routeOptions, opts.route.hook, pluginHooks.hook)
        settling(routeOptions, opts.route)
      }
      return
    }
    const route = resolveRouteConfig(config, opts, warn)
    if (route === false) return
    const made = budgets.route(routeOptions, route)
    addHook(routeOptions, route.hook, hooks(made, routeOptions, config as object).hook)
    settling(routeOptions, route)
  })
}

/** The registrations of an outer registration, which this one joins; undefined when it is the first here. */
function outerRegistrations (fastify: FastifyInstance): Registrations | undefined {
  if (!fastify.hasDecorator('rateGuard')) return undefined
  const registrations = (fastify as unknown as Record<symbol, Registrations | undefined>)[REGISTRATIONS]
  if (registrations === undefined) throw new InvalidOptionError('rateGuard', 'expected no other plugin to decorate fastify.rateGuard')
  return registrations
}

/**
 * Appends to the route's own hook list, so routes that opt out pay nothing. A `preParsing` hook is given the
 * payload before its callback.
 */
function addHook (routeOptions: RouteOptions, hook: HookName, rateGuard: RequestHook): void {
  const fn = hook === 'preParsing'
    ? (request: FastifyRequest, reply: FastifyReply, _payload: unknown, done: (err?: Error) => void): void => rateGuard(request, reply, done)
    : rateGuard
  appendHook(routeOptions, hook, fn)
}

/** `fn` after the route's own hooks of that name. */
function appendHook (routeOptions: RouteOptions, hook: HookName | 'onResponse' | 'onRequestAbort', fn: unknown): void {
  const existing = routeOptions[hook] as unknown
  routeOptions[hook] = (existing === undefined ? [fn] : [existing, fn].flat()) as never
}

async function openDecider (fastify: FastifyInstance, opts: ResolvedOptions): Promise<Decider> {
  const { timeout, cache, redis: given } = opts
  const local = (): MemoryStore => new MemoryStore({
    cache,
    onFull: () => fastify.log.warn({ cache }, 'rate-guard: the in-process store is full of clients at their limits: newcomers share budgets (64 per budget) until room is made; raise cache if this is ordinary traffic')
  })
  if (given === undefined) {
    // With a store of the app's own, the in-process store decides only for failMode: 'local'.
    if (opts.store === undefined) {
      const hint = fastifyRedisClient(fastify) === undefined ? '' : ' (to count in the Redis @fastify/redis decorates, give redis: fastify.redis)'
      fastify.log.warn(`rate-guard: no Redis configured, so limits are kept in this process only: each instance of the app counts on its own${hint}`)
    }
    return new Decider({ store: local(), remote: false, timeout, local, breaker: undefined })
  }

  const owned = typeof given === 'string' || Array.isArray(given)
  const client = owned ? await createClient(given as string | readonly string[], timeout) : given as RedisLike
  const held = opts.banCache ? new HeldAnswers(cache) : undefined
  let stopListening = (): void => {}
  try {
    // A client made just now has no commands of ours or anyone's: only a lent one can make this throw.
    const store = new RedisStore(client, owned, opts.nameSpace)
    if (held !== undefined) {
      stopListening = listenForChanges(client, opts.nameSpace, held, fastify.log)
      fastify.addHook('onClose', async () => stopListening())
    }
    const breaker = opts.breaker === null ? undefined : new Breaker(opts.breaker.threshold, opts.breaker.coolDownMs, Date.now, opts.nameSpace)
    if (breaker !== undefined) {
      const connected = (): void => breaker.connected()
      client.on('ready', connected)
      fastify.addHook('onClose', async () => { client.off('ready', connected) })
    }
    const decider = new Decider({
      held,
      announce: announceChanges(client, opts.nameSpace, held),
      store,
      remote: true,
      timeout,
      local,
      breaker,
      nameSpace: opts.nameSpace,
      silent: onSilence(client, owned, fastify.log, TROUBLE_LOG_INTERVAL),
      log: fastify.log
    })
    if (owned) {
      client.on('error', (err: Error) => decider.report(err, fastify.log))
    } else {
      for (const option of queueingOptions(client)) {
        fastify.log.warn({ option }, 'rate-guard: the Redis client lent to rate-guard queues commands while disconnected; the decision deadline still holds, but queued commands may spend quota after the request was answered. Set enableOfflineQueue: false')
      }
    }
    await checkStartup(fastify, opts, store)
    return decider
  } catch (err) {
    stopListening()
    if (owned) client.disconnect()
    throw err
  }
}

/** What an identity no client can have looks like to the script: a read-only decision proves EVALSHA works. */
const PROBE: Omit<DecideInput, 'keys'> = { limits: [{ max: 1, windowMs: 1, burst: 1 }], ban: null, peek: true }

/**
 * Waits (boundedly) for Redis, then runs the script once read-only: a Redis that refuses it (an ACL user
 * without EVALSHA) fails registration. A Redis that is down or hung fails it only with `strict`; otherwise
 * the plugin starts degraded, `failMode` deciding until Redis answers.
 */
async function checkStartup (fastify: FastifyInstance, opts: ResolvedOptions, store: RedisStore): Promise<void> {
  let outcome = await whenReady(store.client, READY_WAIT)
  if (outcome === true) {
    try {
      await deadline(store.decide({ ...PROBE, keys: identityKeys(opts.nameSpace, 'probe', 'rate-guard:probe') }), READY_WAIT)
    } catch (err) {
      outcome = err as Error
    }
  }
  if (outcome === true) return await checkEvictionPolicy(fastify, store.client)
  if (isPermanent(outcome)) throw new RedisRefusedError(outcome.message)
  if (opts.strict) throw new RedisNotReadyError(outcome.message)
  fastify.log.warn({ err: outcome, failMode: opts.route.failMode }, 'rate-guard: Redis is not ready; starting anyway, failMode decides until it answers')
}

async function checkEvictionPolicy (fastify: FastifyInstance, client: RedisLike): Promise<void> {
  let policy: unknown
  try {
    policy = await deadline(evictionPolicy(client), READY_WAIT)
  } catch (err) {
    // Managed Redis often forbids CONFIG: nothing to warn about then.
    fastify.log.debug({ err }, 'rate-guard: could not read maxmemory-policy')
  }
  if (typeof policy === 'string' && policy !== 'noeviction') {
    fastify.log.warn({ policy }, 'rate-guard: Redis maxmemory-policy is not noeviction: under memory pressure Redis may delete bans and counters')
  }
}

/** Whether the app was made with `trustProxy: true` (Fastify keeps its options under an unexported symbol). */
function trustsEveryProxy (fastify: FastifyInstance): boolean {
  for (let o: object | null = fastify; o !== null; o = Object.getPrototypeOf(o) as object | null) {
    const symbol = Object.getOwnPropertySymbols(o).find(s => s.description === 'fastify.options')
    if (symbol !== undefined) return trustsEveryAddress((o as Record<symbol, { trustProxy?: unknown }>)[symbol]?.trustProxy)
  }
  return false
}

/** `fastify.redis` from `@fastify/redis`, when it is registered: named in the in-process warning, never taken unasked. */
function fastifyRedisClient (fastify: FastifyInstance): RedisLike | undefined {
  if (!fastify.hasDecorator('redis')) return undefined
  const redis = (fastify as unknown as { redis?: Partial<RedisLike> }).redis
  return typeof redis?.defineCommand === 'function' ? redis as RedisLike : undefined
}

export const rateGuard: FastifyPluginAsync<RateGuardOptions> = fp(rateGuardPlugin, {
  fastify: '5.x',
  name: 'fastify-rate-guard'
})
export default rateGuard
/** `@fastify/rate-limit`'s name for the plugin, so `import { fastifyRateLimit } from …` only changes the package. */
export { rateGuard as fastifyRateLimit }
export { normalizeIP }
export { errors }

// CommonJS: `require('fastify-rate-guard')` (Node >= 20.19 loads this module for it) returns the plugin itself,
// as `require('@fastify/rate-limit')` does, carrying every named export too.
Object.assign(rateGuard, { default: rateGuard, rateGuard, fastifyRateLimit: rateGuard, normalizeIP, errors, CHANNELS })
export { rateGuard as 'module.exports' }
export type { RateGuardDecorator, Registration } from './registrations.js'
export type { BudgetOptions } from './budgets.js'
export type { RateGuardAdmin, PeekOptions, PeekResult, PeekLimit, OverrideOptions, BanEntry } from './admin.js'
export type {
  RateGuardOptions, BreakerOptions, RouteRateLimitOptions, BanOptions, BanCommon, LimitOptions, SharedOptions, ErrorResponseContext,
  ErrorResponseBuilder, KeyGenerator, MaxFunction, TimeWindowFunction, AllowListFunction, KeyCallback, ExceededCallback, ExceededInfo, Mode, BanCallback, BanInfo,
  HookName, FailMode, Addressless, CostFunction, CountWhenFunction, SettleFunction
} from './types.js'
export type { RequestCharge } from './charge.js'
export type { StatsSnapshot } from './stats.js'
export { CHANNELS }
export type { DecisionMessage, BreakerMessage, TroubleMessage, TroubleReason, RedisCallContext, Outcome } from './channels.js'
/** `createRateLimit`'s options: a route's (`store`, typed as theirs, is the plugin's alone and refused here). */
export type CreateRateLimitOptions = RouteRateLimitOptions & { store?: FastifyRateLimitStoreCtor }
export type { FastifyRateLimitOptions, FastifyRateLimitStore, FastifyRateLimitStoreCtor, RedisLike } from './types.js'
export type { RateLimitCheck, RateLimitResult } from './limiters.js'
export type { Algorithm } from './algorithms/index.js'
// @fastify/rate-limit's names for the same types, so an app's type imports only change the package.
export type {
  RateGuardOptions as RateLimitPluginOptions, RouteRateLimitOptions as RateLimitOptions,
  ErrorResponseContext as errorResponseBuilderContext, HookName as RateLimitHook
} from './types.js'
