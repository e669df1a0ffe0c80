import type {
  ContextConfigDefault, FastifyInstance, FastifyPluginAsync, FastifyRequest, FastifySchema, RouteGenericInterface,
  preHandlerAsyncHookHandler
} from 'fastify'
import fp from 'fastify-plugin'
import { createAdmin } from './admin.js'
import { Budgets } from './budgets.js'
import { createRegistrations } from './registrations.js'
import type { RateGuardDecorator, Registrations } from './registrations.js'
import type { RouteBudget } from './budgets.js'
import { CHARGE } from './request/charge.js'
import { ADMISSION, rateGuardOf } from './request/admission.js'
import type { RequestRateGuard } from './request/admission.js'
import { createHooks } from './request/pipeline.js'
import { WORK } from './request/work.js'
import type { BudgetHooks } from './request/pipeline.js'
import { WaitingRoom } from './request/waiting-room.js'
import { REFUSAL, stripCode } from './request/refusal.js'
import { shedRequests } from './request/shed.js'
import { openDecider } from './connect.js'
import { Leases } from './leases.js'
import { createLimiters } from './limiters.js'
import { limitRoutes } from './routes.js'
import type { LimiterDecorators, RateLimitCheck } from './limiters.js'
import { InvalidOptionError } from './errors.js'
import * as errors from './errors.js'
import { normalizeIP, trustsEveryAddress } from './ip.js'
import { CHANNELS } from './channels.js'
import { keyHash } from './stores/key-names.js'
import { resolveOptions } from './options/plugin.js'
import { resolveLimiterOptions } from './options/route.js'
import type { FastifyRateLimitStoreCtor, RateGuardOptions, RouteRateLimitOptions, TheirStore } from './types.js'
import type { Priority } from './shed-types.js'
import { theirParams } from './options/stores.js'
import { startupWarnings } from './warnings.js'
import type { Warn } from './warnings.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This route's limits over the plugin's, or `false` to leave the route unlimited. */
    rateLimit?: RouteRateLimitOptions | false
    /** This route's class for the load shedder (`shed`): beats `shed.classify` and the default rule. */
    priority?: Priority
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
    >(options?: RouteRateLimitOptions): preHandlerAsyncHookHandler<
      RawServer, RawRequest, RawReply, RouteGeneric, ContextConfig, SchemaCompiler, TypeProvider, Logger
    >
    /** A check to call by hand: counts the request (or, with `increment: false`, only reads) and answers its state. */
    createRateLimit (options?: RouteRateLimitOptions): RateLimitCheck
  }
  interface FastifyRequest {
    /**
     * The decision that let this request in (its client's key, `limit`, `remaining`, `resetMs`, every limit,
     * its in-flight slots: express-rate-limit's `req.rateLimit`), what it was charged, `settle(amount)` to make
     * its final charge another (once), and `hold()` to keep its slots for work after it.
     */
    rateGuard: RequestRateGuard
  }
}

/** Where the registrations behind `fastify.rateGuard` are kept, for a registration inside another to join. */
const REGISTRATIONS = Symbol.for('fastify-rate-guard.registrations')

/** Nothing but `@fastify/rate-limit`'s plugin name, registered where this plugin is. */
const THEIR_NAME = fp(async () => {}, { fastify: '5.x', name: '@fastify/rate-limit' })

async function rateGuardPlugin (fastify: FastifyInstance, options: RateGuardOptions): Promise<void> {
  const warn = startupWarnings(fastify.log)
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
    warn('TRUSTS_EVERY_PROXY', 'rate-guard: trustProxy trusts every address, so request.ip is the left-most X-Forwarded-For entry, ' +
      'which any client can forge to get a fresh budget: give trustProxy the addresses of your proxies instead ' +
      '(on a Unix socket, (address, hop) => hop === 0 trusts the proxy alone)')
  }
  const decider = await openDecider(fastify, opts, warn)
  fastify.addHook('onClose', async () => await decider.close())
  // The load shedder first: ahead of every limit, a request it sheds costs no budget and no Redis call.
  if (opts.shed !== null) {
    const shedder = shedRequests(fastify, opts, opts.shed, decider)
    decider.stats.shedding(() => shedder.snapshot())
  }
  const leases = new Leases(decider, fastify.log)
  fastify.addHook('onClose', async () => { leases.close() })

  // Every budget's waiting requests (`maxWait`) in one room of `maxWaiting` places: what waits is this process's.
  const room = new WaitingRoom(opts.maxWaiting)
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
    return createHooks(decider, leases, room, opts, made, undoneScopes, ran, store)
  }
  const pluginHooks = hooks(budgets.plugin(opts.route))

  // Limiters made with options each count on a budget of their own (or their group's).
  const decorators = createLimiters(opts.timeout, (options, call) =>
    options === undefined ? pluginHooks : hooks(budgets.limiter(resolveLimiterOptions(options, opts, call, warn)), {}, options as object))
  const registrations = outer ?? decorateApp(fastify, decorators, warn)
  if (outer !== undefined) {
    warn('NESTED_REGISTRATION', 'rate-guard: registered inside another registration: fastify.rateGuard reaches both, ' +
      'fastify.rateLimit and createRateLimit are the outer one\'s; this one\'s are fastify.rateGuard.of(nameSpace)',
    { nameSpace: opts.nameSpace })
  }
  registrations.add({
    ...createAdmin(decider.store, opts, budgets, decider.forget, decider.stats), ...decorators, nameSpace: opts.nameSpace, remote
  })
  decorateRequests(fastify)
  limitRoutes(fastify, opts, pluginHooks, (made, routeOptions, config) => hooks(made, routeOptions, config), budgets, warn)
}

/**
 * The first registration's decorators: `fastify.rateGuard` over its registrations, and `fastify.rateLimit` /
 * `createRateLimit` where no other plugin took them. An outer registration's are inherited by those inside it
 * and cannot be replaced: its rateGuard takes them in (see lib/registrations.ts), and says so.
 */
function decorateApp (fastify: FastifyInstance, decorators: LimiterDecorators, warn: Warn): Registrations {
  const made = createRegistrations()
  fastify.decorate('rateGuard', made.decorator)
  fastify.decorate(REGISTRATIONS, { getter: () => made })
  for (const name of ['rateLimit', 'createRateLimit'] as const) {
    if (fastify.hasDecorator(name)) {
      warn('DECORATOR_TAKEN',
        `rate-guard: fastify.${name} is another plugin's; this registration's is fastify.rateGuard.of(nameSpace).${name}`)
    } else fastify.decorate(name, decorators[name] as never)
  }
  return made
}

/** Refusals' bodies as @fastify/rate-limit's (see stripCode), and each request's charge; once per app, whatever the registrations. */
function decorateRequests (fastify: FastifyInstance): void {
  if (fastify.hasRequestDecorator(REFUSAL)) return
  fastify.decorateRequest(REFUSAL, null)
  fastify.addHook('onSend', stripCode)
  fastify.decorateRequest(CHARGE, null)
  fastify.decorateRequest(WORK, null)
  fastify.decorateRequest(ADMISSION, null)
  fastify.decorateRequest('rateGuard', { getter (this: FastifyRequest) { return rateGuardOf(this) } })
}

/** The registrations of an outer registration, which this one joins; undefined when it is the first here. */
function outerRegistrations (fastify: FastifyInstance): Registrations | undefined {
  if (!fastify.hasDecorator('rateGuard')) return undefined
  const registrations = (fastify as unknown as Record<symbol, Registrations | undefined>)[REGISTRATIONS]
  if (registrations === undefined) throw new InvalidOptionError('rateGuard', 'expected no other plugin to decorate fastify.rateGuard')
  return registrations
}

/** Whether the app was made with `trustProxy: true` (Fastify keeps its options under an unexported symbol). */
function trustsEveryProxy (fastify: FastifyInstance): boolean {
  for (let o: object | null = fastify; o !== null; o = Object.getPrototypeOf(o) as object | null) {
    const symbol = Object.getOwnPropertySymbols(o).find(s => s.description === 'fastify.options')
    if (symbol !== undefined) return trustsEveryAddress((o as Record<symbol, { trustProxy?: unknown }>)[symbol]?.trustProxy)
  }
  return false
}

export const rateGuard: FastifyPluginAsync<RateGuardOptions> = fp(rateGuardPlugin, {
  fastify: '5.x',
  name: 'fastify-rate-guard'
})
export default rateGuard
/** `@fastify/rate-limit`'s name for the plugin, so `import { fastifyRateLimit } from …` only changes the package. */
export { rateGuard as fastifyRateLimit }
export { normalizeIP, keyHash }
export { errors }

// CommonJS: `require('fastify-rate-guard')` (Node >= 20.19 loads this module for it) returns the plugin itself,
// as `require('@fastify/rate-limit')` does, carrying every named export too. Exported under its own name so
// its declared type says so: `import rateGuard = require(…)` in a `.cts` then types `rateGuard.CHANNELS`.
const required = Object.assign(rateGuard, {
  default: rateGuard, rateGuard, fastifyRateLimit: rateGuard, normalizeIP, keyHash, errors, CHANNELS
})
export { required as 'module.exports' }
export type { RateGuardDecorator, Registration } from './registrations.js'
export type { BudgetOptions } from './budgets.js'
export type { RateGuardAdmin, PeekOptions, PeekResult, PeekLimit, OverrideOptions, BanEntry } from './admin-api.js'
export type {
  RateGuardOptions, BreakerOptions, RouteRateLimitOptions, BanOptions, BanCommon, LimitOptions, WindowLimitOptions,
  CalendarLimitOptions, SharedOptions, ErrorResponseContext, ErrorResponseBuilder, KeyGenerator, MaxFunction,
  TimeWindowFunction, AllowListFunction, KeyCallback, ExceededCallback, ExceededInfo, Mode, BanCallback, BanInfo,
  HookName, FailMode, ErrorFormat, Addressless, CostFunction, CountWhenFunction, SettleFunction
} from './types.js'
export type { Priority, ShedReason, ShedOptions, AdaptiveInFlightOptions } from './shed-types.js'
export type { RequestCharge } from './request/charge.js'
export type { RequestRateGuard, RequestQuota, QuotaLimit, QuotaConcurrency, QuotaReason } from './request/admission.js'
export type { StatsSnapshot } from './stats.js'
export type { ShedSnapshot, Readings as ShedReadings } from './shed/shedder.js'
export { CHANNELS }
export type { DecisionMessage, BreakerMessage, TroubleMessage, TroubleReason, RedisCallContext, Outcome } from './channels.js'
/** `createRateLimit`'s options: a route's (`store`, typed as theirs, is the plugin's alone and refused here). */
export type CreateRateLimitOptions = RouteRateLimitOptions & { store?: FastifyRateLimitStoreCtor }
export type { FastifyRateLimitOptions, FastifyRateLimitStore, FastifyRateLimitStoreCtor, RedisLike } from './types.js'
export type { RateLimitCheck, RateLimitResult, RateGuardBudget } from './limiters.js'
export type { SpendOptions, Spent, HeldSlots } from './request/spend.js'
export type { Algorithm } from './algorithms/index.js'
// @fastify/rate-limit's names for the same types, so an app's type imports only change the package.
export type {
  RateGuardOptions as RateLimitPluginOptions, RouteRateLimitOptions as RateLimitOptions,
  ErrorResponseContext as errorResponseBuilderContext, HookName as RateLimitHook
} from './types.js'
