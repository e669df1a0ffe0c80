import { STATUS_CODES } from 'node:http'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import type { Limit } from './algorithms/index.js'
import { isPromise, then } from './awaitable.js'
import { formatDuration } from './duration.js'
import { BannedError, InvalidOptionError, TooCostlyError, TooManyRequestsError, UnavailableError } from './errors.js'
import { retryAfterSeconds, writeHeaders } from './headers.js'
import type { HeaderStyle } from './headers.js'
import { identityKeys, keyHashOf, sharedKeys, watchedScope } from './stores/key-names.js'
import type { Decidable, Verdict } from './stores/store.js'
import type { Decider } from './decider.js'
import { TheirBudget } from './stores/app-store.js'
import { costOf, fallbacksOf, limitsOf } from './computed.js'
import type { KeyGenerator, TheirStore } from './types.js'
import type { ResolvedLimit, ResolvedOptions, ResolvedRoute } from './options/resolved.js'
import type { Callbacks } from './callbacks.js'
import { decisionChannel, keyKindOf } from './channels.js'
import type { DecisionMessage, Outcome as ChannelOutcome } from './channels.js'
import type { Decision } from './stores/store.js'
import { charge, settlesItself } from './charge.js'
import { banPerWindow } from './options/bans.js'

/**
 * The request hook: key → allow list → limits → one decision (then the route's shared budget, when it has
 * one) → headers, and an error on refusal, handed to Fastify so the app's error handler shapes the answer.
 *
 * Every step runs at once when its answer is at hand (a static allow list and limits, a ban held in process,
 * the in-process store) and waits only for what must be waited for (Redis, an async key generator): a client
 * refused in process costs no promise. Refusals are passed to `done`, never thrown: a throw inside an async
 * function costs V8 several microseconds, more than the rest of the refusal.
 */

export interface RouteBudget {
  readonly route: ResolvedRoute
  /** Which budget: the plugin-wide one, a route's own, or a group's. */
  readonly scope: string
  /** Its name (`default`, `GET /search`, `group:<id>`, `decider 1`), as fastify.rateGuard's calls take it. */
  readonly name: string
  readonly headers: HeaderStyle
  /** The headers of the budget shared by the route's clients, when it has one. */
  readonly sharedHeaders: HeaderStyle
  /** The names of the limits the route watches (`mode: 'shadow'` per limit), as the channel reports them. */
  readonly watchedHeaders: HeaderStyle
}

/** The header that says a request went through because Redis could not decide (`failMode: 'open'`). */
export const UNENFORCED_HEADER = 'x-ratelimit-enforced'

/** What a request comes to: go on (`undefined`), an error to refuse it with, or an answer sent here (503). */
export type Outcome = Error | undefined | typeof SENT
export const SENT = Symbol('sent')

type Done = (err?: Error) => void

/** The hook in Fastify's callback style: `done` once, with the refusal if any; not at all when it answered itself. */
export type RequestHook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

/** A request's key and what its decision takes: `input` is null when the allow list lets it through. */
export interface Prepared {
  /** Who the client is, as the stores key it. */
  readonly key: string
  /** The key as the app's key generator returned it (a number stays a number): what the app's callbacks are given. */
  readonly given: Given
  readonly input: Decidable | null
}

/** A key as a key generator returns it. */
export type Given = string | number

/** One budget applied to requests: as Fastify's hook, as a function giving the outcome, and its first steps alone. */
export interface BudgetHooks {
  readonly hook: RequestHook
  /** What the hook does, as a value: the refusal to throw, `SENT`, or nothing. */
  run (request: FastifyRequest, reply: FastifyReply): Outcome | PromiseLike<Outcome>
  /** The verdict on a prepared request (a read with `peek`), from the store that counts this budget. */
  ask (input: Decidable, given: Given, log: FastifyBaseLogger): Verdict | Promise<Verdict>
  /** Key → allow list → limits: what a decision of this budget takes for `request`. */
  prepare (request: FastifyRequest): Prepared | PromiseLike<Prepared>
  /** The app's store (`@fastify/rate-limit`'s `store`) counts this budget, with their meaning of its count. */
  readonly theirStore: boolean
  /**
   * For requests no route matched (`request.is404`): refuses a client known to be banned (held in process,
   * or in the in-process store), asking Redis nothing and counting nothing; lets every other request by.
   */
  readonly notFound: RequestHook
}

/**
 * `undoneScopes`: the scopes of budgets some route gives counts back to (it has a shared budget); complete
 * once the app is ready. `ran`: the request decoration saying one of the registration's hooks has limited it.
 */
export function createHooks (decider: Decider, opts: ResolvedOptions, budget: RouteBudget, undoneScopes: ReadonlySet<string>, ran: symbol, their?: TheirStore): BudgetHooks {
  const { nameSpace, timeout, callbackTimeout, callbacks } = opts
  const { route, scope } = budget
  const { allowList, algorithm, failMode, overLimit, cost, mode } = route
  // In shadow mode denials strike toward bans only when the route says so.
  const strikes = mode !== 'shadow' || route.shadow.ban
  // A shadow decision counts, strikes and bans on keys of its own, which no enforcing decision reads: a shadow
  // route in an enforced route's group (or an instance in shadow beside enforcing ones) takes nothing from it.
  const family = mode === 'shadow' ? 'shadow' : 'enforce'
  const ban = strikes ? route.ban : null
  // `ban: N` over a window the app computes per request: a ban of that request's window (see banPerWindow).
  const banEach = strikes && route.ban === null ? route.banDenials : null
  const theirs = their === undefined ? undefined : new TheirBudget(their, route, callbackTimeout, decider.failed)
  /** The verdict on a request: the stores', or the app's store's (under its key, theirs: with the group id after it). */
  const ask = (input: Decidable, given: Given, log: FastifyBaseLogger): Verdict | Promise<Verdict> => {
    if (theirs !== undefined) return theirs.decide(input, route.groupId === undefined ? given : `${given}${route.groupId}`, log)
    return input.peek ? decider.peek(input, log) : decider.decide(input, log)
  }
  // The app's key generator falls back to the default hierarchy when it fails (see lib/callbacks.ts).
  const keyOf = route.defaultKey ? route.keyGenerator as Keyed : controlledKeyGenerator(route.keyGenerator, opts.keyGeneratorFor(route.ipv6Subnet), callbacks)
  const fixedLimits = staticLimits(route.limits)
  // A limit function that fails gives a static limit, never none (lib/computed.ts): failMode is Redis's.
  const fallbacks = fixedLimits === null ? fallbacksOf(route.limits, opts.route.limits) : []
  // Only time can change a denial when it counts no strike, no request's limits or cost differ, a denial sets
  // no over-limit wait and the route gives nothing back after its responses (see HeldAnswers); a shared
  // budget's denials, too: nothing is ever given back to it. (A handler that settles lower says so: lib/charge.ts.)
  const holdable = ban === null && fixedLimits !== null && overLimit === undefined && typeof cost === 'number' && !settlesItself(route)
  // Limits watched, not enforced: a budget of their own beside the route's, decided after the route's allowed.
  // They write only their state, under a scope no enforcing budget has (`~`), and never a strike, a ban or an
  // over-limit wait: nothing an enforcing decision reads. They read the identity's bans as enforcing routes do.
  const watched = route.watched === null ? null : { limits: staticLimits(route.watched)!, ban: null, peek: false, algorithm, holdDenials: true, failMode }
  const shared: Decidable | null = route.shared === null
    ? null
    : { keys: sharedKeys(nameSpace, scope, algorithm, family), limits: staticLimits(route.shared)!, ban: null, peek: false, algorithm, holdDenials: true, failMode }
  // 503 answers say when to try again: one deadline from now, in whole seconds. They are sent, not thrown:
  // Fastify logs every thrown 5xx as an error, which during an outage would be one log line per request.
  const unavailableAfter = retryAfterSeconds(timeout)
  const unavailable = unavailableError(timeout)
  const unavailableBody = JSON.stringify({ statusCode: 503, code: unavailable.code, error: 'Service Unavailable', message: unavailable.message })

  function prepare (request: FastifyRequest, given: Given | PromiseLike<Given>): Prepared | PromiseLike<Prepared> {
    if (isPromise(given)) return given.then(known => prepare(request, known))
    const key = String(given)
    if (allowList === null) return withLimits(request, key, given)
    const allowed = typeof allowList === 'function'
      ? callbacks.run('allowList', () => allowList(request, given as string), () => false, request.log)
      : allowList.has(key)
    return then(allowed, yes => yes ? { key, given, input: null } : withLimits(request, key, given))
  }

  function withLimits (request: FastifyRequest, key: string, given: Given): Prepared | PromiseLike<Prepared> {
    // A cost function that fails costs 1 (lib/computed.ts): never nothing, never unenforced.
    if (typeof cost !== 'number') return then(costOf(cost, request, given as string, callbacks), units => withCost(request, key, given, units))
    return withCost(request, key, given, cost)
  }

  function withCost (request: FastifyRequest, key: string, given: Given, units: number): Prepared | PromiseLike<Prepared> {
    if (fixedLimits !== null) return prepared(key, given, fixedLimits, units)
    return limitsOf(route.limits, fallbacks, algorithm, request, given as string, callbacks).then(limits => prepared(key, given, limits, units))
  }

  function prepared (key: string, given: Given, limits: readonly Limit[], units: number): Prepared {
    const holdDenials = holdable && !undoneScopes.has(scope)
    const banFor = banEach === null ? ban : banPerWindow(banEach, limits.map(limit => limit.windowMs))
    let input: Decidable = { keys: identityKeys(nameSpace, scope, key, algorithm, family), limits, ban: banFor, peek: false, algorithm, holdDenials, failMode }
    if (overLimit !== undefined) input = { ...input, overLimit }
    // A request of one unit says nothing: the common path sends what it always did.
    if (units !== 1) input = { ...input, cost: units }
    return { key, given, input }
  }

  function decide (request: FastifyRequest, reply: FastifyReply, { given, input }: Prepared): Outcome | PromiseLike<Outcome> {
    if (input === null) return undefined
    return then(ask(input, given, request.log), own => {
      if (own.status !== 'allowed' || shared === null) {
        // What the request holds until it settles (not with the app's own store, which cannot settle).
        if (own.status === 'allowed' && theirs === undefined) charge(request, decider, [{ input, decision: own }])
        return answer(request, reply, given, own, budget.headers, input)
      }
      // The shared budget is asked only for a request the client's own allowed; when it refuses, the client's
      // count is given back, so a refused request costs neither budget.
      const wholeInput = costing(shared, input.cost)
      return then(decider.decide(wholeInput, request.log), whole => {
        if (whole.status !== 'limited' && whole.status !== 'unavailable') {
          charge(request, decider, whole.status === 'allowed' ? [{ input, decision: own }, { input: wholeInput, decision: whole }] : [{ input, decision: own }])
          return answer(request, reply, given, own, budget.headers, input)
        }
        const undo = { keys: input.keys, limits: input.limits, algorithm, member: own.member, at: own.at, final: 0 }
        decider.settle(costing(undo, input.cost), request.log)
        return answer(request, reply, given, whole, budget.sharedHeaders, wholeInput)
      })
    })
  }

  /** A decision on `input` (the budget's own or its shared one's): counted, and told to the diagnostics channel if anyone listens. */
  function note (outcome: ChannelOutcome, key: Given, verdict: Verdict, input: Decidable, headers: HeaderStyle): void {
    decider.stats.count(outcome)
    if (!decisionChannel.hasSubscribers) return
    decisionChannel.publish({
      outcome,
      nameSpace,
      budget: budget.name,
      algorithm,
      limit: 'limits' in verdict ? bindingName(verdict, headers) : undefined,
      cost: input.cost ?? 1,
      redisMs: 'redisMs' in verdict ? verdict.redisMs : undefined,
      batchSize: 'batchSize' in verdict ? verdict.batchSize : undefined,
      keyHash: hashOf(input),
      keyKind: keyKindOf(key),
      mode
    } satisfies DecisionMessage)
  }

  /**
   * The route's watched limits on a request its enforced ones allowed: decided on a budget of their own, not
   * waited for (the request goes on at once), and what they would have refused reported as shadow mode does.
   */
  function watch (request: FastifyRequest, key: Given, input: Decidable): void {
    const decidable = costing<Decidable>({ ...watched!, keys: identityKeys(nameSpace, watchedScope(scope), String(key), algorithm) }, input.cost)
    const seen = (verdict: Verdict): void => {
      if (verdict.status !== 'limited') return
      note('shadow-limited', key, verdict, decidable, budget.watchedHeaders)
      route.onExceeded?.(request, key as string, SHADOW)
    }
    try {
      const verdict = decider.decide(decidable, request.log)
      if (isPromise(verdict)) verdict.then(seen).catch((err: unknown) => { request.log.error({ err }, 'rate-guard: a watched limit could not be reported') })
      else seen(verdict)
    } catch (err) {
      request.log.error({ err }, 'rate-guard: a watched limit could not be reported')
    }
  }

  function answer (request: FastifyRequest, reply: FastifyReply, key: Given, verdict: Verdict, headers: HeaderStyle, input: Decidable): Outcome {
    switch (verdict.status) {
      case 'allowed':
        note('allowed', key, verdict, input, headers)
        if (watched !== null) watch(request, key, input)
        writeHeaders(reply, headers, verdict)
        route.onExceeding?.(request, key as string)
        return undefined
      case 'unenforced':
        note('unenforced', key, verdict, input, headers)
        reply.header(UNENFORCED_HEADER, 'false')
        return undefined
      case 'unavailable':
        note('unavailable', key, verdict, input, headers)
        reply.code(503).header('retry-after', unavailableAfter).type('application/json; charset=utf-8').send(unavailableBody)
        return SENT
    }

    const banned = verdict.status === 'banned'
    // A limited request with no wait costs more than a limit holds: it never passes.
    const never = !banned && verdict.retryMs === 0
    const outcome: ChannelOutcome = banned ? (verdict.banStarted ? 'ban-started' : 'banned') : never ? 'too-costly' : 'limited'
    if (mode === 'shadow') {
      // Decided as enforce would, and let through: the client sees an allowed request's headers.
      note(banned ? (verdict.banStarted ? 'shadow-ban-started' : 'shadow-banned') : 'shadow-limited', key, verdict, input, headers)
      writeHeaders(reply, headers, { ...verdict, status: 'allowed' })
      route.onExceeded?.(request, key as string, SHADOW)
      if (verdict.banStarted) route.onBanReach?.(request, key as string, { durationMs: verdict.retryMs, offence: verdict.offence, shadow: true })
      return undefined
    }
    note(outcome, key, verdict, input, headers)
    if (mode === 'report') request.log.info({ rateGuard: { outcome, budget: budget.name, keyHash: hashOf(input) } }, 'rate-guard: refused')

    writeHeaders(reply, headers, verdict)
    route.onExceeded?.(request, key as string, ENFORCED)
    if (verdict.banStarted) route.onBanReach?.(request, key as string, { durationMs: verdict.retryMs, offence: verdict.offence, shadow: false })

    const waitMs = never ? 0 : retryAfterSeconds(verdict.retryMs) * 1000
    const after = never ? 'never' : formatDuration(waitMs)
    if (route.errorResponseBuilder === undefined) return refusal(request, banned ? new BannedError(after) : never ? new TooCostlyError() : new TooManyRequestsError(after))
    const statusCode = banned ? 403 : 429
    const error: unknown = route.errorResponseBuilder(request, { statusCode, ban: banned, max: verdict.limit, ttl: verdict.retryMs, after })
    if (typeof error !== 'object' || error === null) {
      return new InvalidOptionError('errorResponseBuilder', `expected it to return an object, got ${error === null ? 'null' : typeof error}`)
    }
    (error as { statusCode?: number }).statusCode ??= statusCode
    return error as Error
  }

  function run (request: FastifyRequest, reply: FastifyReply): Outcome | PromiseLike<Outcome> {
    // Limited once: a route's own hook and a decider the app put on it too count the request once, the first.
    const marked = request as unknown as Record<symbol, boolean>
    if (marked[ran]) return undefined
    marked[ran] = true
    return then(prepare(request, keyOf(request)), ready => decide(request, reply, ready))
  }

  /** A request no route matched: refused only when its client is known to be banned here. */
  function refuseIfBanned (request: FastifyRequest, reply: FastifyReply): Outcome | PromiseLike<Outcome> {
    return then(prepare(request, keyOf(request)), ({ given, input }) => {
      if (input === null) return undefined
      const ban = decider.knownBan(input)
      return ban === undefined ? undefined : answer(request, reply, given, ban, budget.headers, input)
    })
  }

  return {
    hook: (request, reply, done) => { asHook(run, request, reply, done) },
    run,
    ask,
    prepare: (request) => prepare(request, keyOf(request)),
    theirStore: theirs !== undefined,
    notFound (request, reply, done) {
      if (request.is404) asHook(refuseIfBanned, request, reply, done)
      else done()
    }
  }
}

/** What `onExceeded` is told: whether the request was let through all the same (shadow mode). */
const SHADOW = Object.freeze({ shadow: true })
const ENFORCED = Object.freeze({ shadow: false })

/** `input` charged the request's `cost` too (as it is when the request costs one unit, and says nothing). */
function costing<T extends object> (input: T, cost: number | undefined): T {
  return cost === undefined ? input : { ...input, cost }
}

/** The client's hash in a decision's keys; none for a shared budget. */
function hashOf (input: Decidable): string | undefined {
  return keyHashOf(input.keys.log)
}

/** The name of a decision's binding limit, as the IETF fields name it. */
function bindingName (decision: Decision, headers: HeaderStyle): string {
  const i = Math.max(0, decision.limits.findIndex(l => l.limit === decision.limit && l.windowMs === decision.windowMs && l.count === decision.count && l.resetMs === decision.resetMs))
  return headers.policies[i] ?? `${headers.policies[0]!}-${i + 1}`
}

/** What a budget that cannot decide answers (`failMode: 'closed'`): try again one deadline from now, in whole seconds. */
export function unavailableError (timeout: number): Error & { code: string } {
  return new UnavailableError(formatDuration(retryAfterSeconds(timeout) * 1000))
}

/** Runs `step` as Fastify's callback-style hook: `done` once, with its refusal, whether it answers at once, later, or throws. */
function asHook (step: (request: FastifyRequest, reply: FastifyReply) => Outcome | PromiseLike<Outcome>, request: FastifyRequest, reply: FastifyReply, done: Done): void {
  let outcome: Outcome | PromiseLike<Outcome>
  try {
    outcome = step(request, reply)
  } catch (err) {
    done(err as Error)
    return
  }
  if (isPromise(outcome)) outcome.then(result => finish(result, done), done)
  else finish(outcome, done)
}

function finish (outcome: Outcome, done: Done): void {
  if (outcome !== SENT) done(outcome)
}

/** The limits once, at register, when none is a function of the request (checked by checkSizes). */
export function staticLimits (limits: readonly ResolvedLimit[]): readonly Limit[] | null {
  if (!limits.every(limit => typeof limit.max === 'number' && typeof limit.windowMs === 'number')) return null
  return Object.freeze(limits.map(({ max, windowMs, burst }) => ({ max: max as number, windowMs: windowMs as number, burst: burst ?? max as number })))
}

/** The app's key generator, checked, with the default hierarchy in its place when it fails. */
function controlledKeyGenerator (keyGenerator: KeyGenerator, fallback: KeyGenerator, callbacks: Callbacks): Keyed {
  return request => callbacks.run<Given>('keyGenerator', () => then(keyGenerator(request), checkKey), () => fallback(request) as ReturnType<Keyed>, request.log)
}

/** A key generator whose keys are checked (the default one's, or the app's). */
type Keyed = (request: FastifyRequest) => Given | PromiseLike<Given>

function checkKey (key: unknown): Given {
  if (typeof key === 'string') return key
  if (typeof key === 'number' && Number.isFinite(key)) return key
  throw new InvalidOptionError('keyGenerator', `expected it to return a string or a number, got ${typeof key}`)
}

/**
 * Where a refusal made here is kept on its request, for `stripCode`: Fastify's default error handler writes an
 * error's `code` into the body, and `@fastify/rate-limit`'s bodies are `{ statusCode, error, message }`.
 */
export const REFUSAL = Symbol('rate-guard.refusal')

function refusal (request: FastifyRequest, error: Error): Error {
  (request as unknown as Record<symbol, Error | null>)[REFUSAL] = error
  return error
}

/**
 * An `onSend` hook: the body Fastify's default error handler made of a refusal of this plugin, without its
 * `code`, so it is byte for byte `@fastify/rate-limit`'s; the code stays on the error an app's error handler
 * gets (`err.code`). Any other payload (an app's error handler's own) goes out untouched.
 */
export function stripCode (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void): void {
  const error = (request as unknown as Record<symbol, (Error & { statusCode: number, code: string }) | null>)[REFUSAL]
  if (error == null || typeof payload !== 'string') return done(null, payload)
  // Strings joined, not objects stringified: this runs on every refusal (a hot key's flood is nothing else).
  const { statusCode, code, message } = error
  const head = `{"statusCode":${statusCode}`
  const tail = `,"error":${JSON.stringify(STATUS_CODES[statusCode])},"message":${JSON.stringify(message)}}`
  done(null, payload === `${head},"code":${JSON.stringify(code)}${tail}` ? head + tail : payload)
}
