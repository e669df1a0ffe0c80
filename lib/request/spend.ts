import type { FastifyReply } from 'fastify'
import { longest } from '../algorithms/index.js'
import type { Outcome } from '../channels.js'
import { andThen } from '../awaitable.js'
import { InvalidOptionError } from '../errors.js'
import { remainingOf, retryAfterSeconds, writeHeaders } from '../headers.js'
import type { Decidable, Verdict } from '../stores/store.js'
import { settlementOf, UNCOUNTED } from './charge.js'
import type { Plan } from './plan.js'
import { hashOf, report } from './report.js'
import { SHADOW } from './respond.js'
import type { RequestState, Step } from './state.js'

// A budget spent by hand: what a protocol that is not one HTTP request per unit counts (a GraphQL operation
// and its cost, a WebSocket message, a connection held open), through the budget's own stages (./pipeline.ts's
// SPEND: identify → allow → narrow → limits → price → decide → wait, the two here), and answered as a value
// the app (or this package's adapters, lib/adapters/) acts on: nothing is sent, nothing thrown. Shadow mode,
// bans, failMode and the decision channel meet it as they meet a route's request; what it counted settles once
// (`settle`: to the actual cost, 0 giving it back), by the request's rule.

/** What a spend asks: `cost` units (default 1), for the request's client or, with `key`, a key under it. */
export interface SpendOptions {
  /** A positive whole number of units. */
  cost?: number
  /**
   * A key under the client's (a connection, an operation): counted apart from the client's other keys on this
   * budget. Anything a client can make anew (a connection) gets it a fresh count there: keep a budget over the
   * client's own key beside it.
   */
  key?: string
}

/** The answer on a spend. `ok`: go on (allowed; let through by shadow mode, failMode 'open' or the allow list). */
export interface Spent {
  readonly ok: boolean
  readonly outcome: Outcome | 'allow-listed'
  /** The binding limit: its capacity, what is left of it, and ms until one more unit is free. */
  readonly limit: number
  readonly remaining: number
  readonly resetMs: number
  /** Ms until a refused spend would pass (0: never, it costs more than a limit holds; or not refused). */
  readonly retryMs: number
  /** Units counted now (0 when nothing counted it). */
  readonly charged: number
  /** Writes the budget's headers of this decision on `reply` (and `Retry-After` on a refusal). */
  writeHeaders (reply: FastifyReply): void
  /** Makes `amount` units the spend's final charge (once); a spend that counted nothing settles to nothing. */
  settle (amount: number): Promise<void>
}

/** The answer on slots taken by hand: `release` gives them back (once; later calls do nothing), null when none are held. */
export interface HeldSlots {
  readonly ok: boolean
  readonly outcome: 'allowed' | 'in-flight' | 'banned' | 'ban-started' | 'unenforced' | 'unavailable' | 'allow-listed'
    | 'shadow-in-flight'
  /** The budget's `concurrency.max`, and the units in flight after this ask (when known). */
  readonly limit: number
  readonly inFlight: number | undefined
  readonly release: () => void
}

/** The longest key a spend takes under the client's (a key is hashed into the stores' names; this bounds the work). */
const KEY_MAX = 512

/**
 * The stage that puts the key the app asked for under the client's: `client|key`. The client's own `%` and `|`
 * are written `%25` and `%7C`, with a key under it or without, so that one client's keys never meet another's:
 * `a|b` under `c` is not `a` under `b|c`, and a client whose key is `a|b` is not `a` under `b`.
 */
export function narrow (state: RequestState): Step {
  const under = state.spending!.key
  const client = state.key.replace(/[%|]/g, escaped)
  state.key = under === undefined ? client : `${client}|${under}`
  return undefined
}

const escaped = (c: string): string => c === '%' ? '%25' : '%7C'

/** The units the app asked for, on the decision: its denials are held in process only at the budget's own cost. */
export function price (state: RequestState): Step {
  const { cost } = state.spending!
  const input = state.input!
  if (cost === (input.cost ?? 1)) return undefined
  const { cost: _, ...rest } = input
  state.input = cost === 1 ? rest : { ...rest, cost, holdDenials: false }
  return undefined
}

/** The app's spend options, checked (a coded error for a bad one). */
export function checkSpend (options: SpendOptions | undefined): { key: string | undefined, cost: number } {
  const { cost = 1, key } = options ?? {}
  if (!Number.isSafeInteger(cost) || cost < 1) {
    throw new InvalidOptionError('cost', `expected a positive whole number of units, got ${String(cost)}`)
  }
  if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > KEY_MAX)) {
    throw new InvalidOptionError('key', `expected a string of 1 to ${KEY_MAX} characters`)
  }
  return { key, cost }
}

/**
 * The stage that takes the spend's slots (its `cost` in units) among its key's in flight on the budget, under its
 * `concurrency` (lib/leases.ts), held until `release`: a WebSocket connection, a subscription. The answer is
 * `state.slots`.
 */
export function slots (state: RequestState): Step | PromiseLike<Step> {
  const { plan } = state
  const input = state.input!
  const { concurrency } = plan
  const asked = plan.leases.acquire({
    keys: input.keys,
    algorithm: input.algorithm,
    units: input.cost ?? 1,
    max: concurrency!.max,
    leaseMs: concurrency!.leaseMs,
    ban: input.ban,
    strikeWindowMs: longest(input.limits),
    failMode: input.failMode,
    failed: false
  }, state.request.log)
  return andThen(asked, held => {
    state.slots = held
    return undefined
  })
}

/** The slots a hold's stages took, as the app is answered (the allow list's client: none taken). */
export function heldOf (state: RequestState): HeldSlots {
  if (state.slots === null) return SLOTS_LISTED
  const { plan } = state
  const { verdict, release } = state.slots
  const limit = plan.concurrency!.max
  const inFlight = 'count' in verdict ? verdict.count : undefined
  const shadow = plan.route.mode === 'shadow'
  const outcome: HeldSlots['outcome'] = verdict.status === 'allowed'
    ? 'allowed'
    : verdict.status === 'limited'
      ? shadow ? 'shadow-in-flight' : 'in-flight'
      : verdict.status === 'banned' ? (verdict.banStarted ? 'ban-started' : 'banned') : verdict.status
  const reported = outcome === 'shadow-in-flight' ? 'shadow-limited' : outcome
  report(plan, reported as Outcome, state.given, verdict, state.input!, plan.inFlightHeaders, inFlight)
  const ok = outcome === 'allowed' || outcome === 'unenforced' || (shadow && outcome !== 'unavailable')
  return { ok, outcome, limit, inFlight, release: release ?? NOTHING }
}

const NOTHING = (): void => {}

/** Slots of a client the allow list let by: none taken. */
const SLOTS_LISTED: HeldSlots = Object.freeze({
  ok: true, outcome: 'allow-listed', limit: 0, inFlight: undefined, release: NOTHING
})

/** What a spend's stages came to, as the app is answered. */
export function spentOf (state: RequestState): Spent {
  const { plan, request } = state
  const decided = state.decided
  if (decided === null) return ALLOW_LISTED
  const { verdict, input, headers } = decided
  const taken = state.handOver()
  // A spend that counted nothing (refused, not decided) settles as a request nothing counted: to nothing.
  const charged = taken.length === 0 ? 0 : input.cost ?? 1
  const settle = taken.length === 0 ? UNCOUNTED.settle : settlementOf(request, plan.decider, taken).settle
  if (!('limits' in verdict)) return unsettledAnswer(plan, state, verdict, input, settle)
  const banStarted = verdict.status === 'banned' ? verdict.banStarted : false
  const outcome = outcomeOf(plan, verdict.status, banStarted, verdict.retryMs, decided.roomFull === true)
  report(plan, outcome, state.given, verdict, input, headers)
  const refused = verdict.status !== 'allowed'
  // The app's callbacks, as a route's request tells them (./respond.ts).
  if (refused) told(plan, state, verdict.retryMs, verdict.banStarted, verdict.offence)
  else plan.route.onExceeding?.(request, state.given as string)
  const shadow = plan.route.mode === 'shadow'
  return {
    ok: !refused || shadow,
    outcome,
    limit: verdict.limit,
    remaining: remainingOf(verdict.limit, verdict.count, verdict.status === 'banned'),
    resetMs: verdict.resetMs,
    retryMs: refused && !shadow ? verdict.retryMs : 0,
    charged,
    writeHeaders: reply => { writeHeaders(reply, headers, refused && shadow ? { ...verdict, status: 'allowed' } : verdict) },
    settle
  }
}

/** What a decision came to, as the decision channel names it (shadow mode's own names for what it let through). */
function outcomeOf (
  plan: Plan, status: 'allowed' | 'limited' | 'banned', banStarted: boolean, retryMs: number, roomFull: boolean
): Outcome {
  if (status === 'allowed') return 'allowed'
  const shadow = plan.route.mode === 'shadow'
  if (status === 'banned') return shadow ? (banStarted ? 'shadow-ban-started' : 'shadow-banned') : banStarted ? 'ban-started' : 'banned'
  if (shadow) return 'shadow-limited'
  // It would have waited (`maxWait`), but the registration's `maxWaiting` places were taken (./wait.ts).
  if (roomFull) return 'waiting-full'
  return retryMs === 0 ? 'too-costly' : 'limited'
}

/** A refusal told to the budget's callbacks (`onExceeded`, `onBanReach`), and logged under `mode: 'report'`. */
function told (plan: Plan, state: RequestState, retryMs: number, banStarted: boolean, offence: number): void {
  const { route } = plan
  const shadow = route.mode === 'shadow'
  const info = shadow ? SHADOW : { shadow: false }
  route.onExceeded?.(state.request, state.given as string, info)
  if (banStarted) route.onBanReach?.(state.request, state.given as string, { durationMs: retryMs, offence, shadow })
  if (route.mode === 'report') {
    state.request.log.info({ rateGuard: { budget: plan.budget.name, keyHash: hashOf(state.input!) } }, 'rate-guard: refused')
  }
}

/** Redis could not decide: failMode let the spend through unenforced (`open`), or refuses it (`closed`). */
function unsettledAnswer (
  plan: Plan, state: RequestState, verdict: Verdict, input: Decidable, settle: Spent['settle']
): Spent {
  const open = verdict.status === 'unenforced'
  report(plan, open ? 'unenforced' : 'unavailable', state.given, verdict, input, plan.budget.headers)
  const limit = input.limits.reduce((most, l) => Math.max(most, l.max), 0)
  const retryMs = open ? 0 : plan.unavailable.after * 1000
  return {
    ok: open,
    outcome: open ? 'unenforced' : 'unavailable',
    limit,
    remaining: limit,
    resetMs: open ? 0 : longest(input.limits),
    retryMs,
    charged: 0,
    writeHeaders: reply => {
      if (open) reply.header('x-ratelimit-enforced', 'false')
      else reply.header('retry-after', retryAfterSeconds(retryMs))
    },
    settle
  }
}

/** The allow list let the client by: nothing counted, nothing to settle. */
const ALLOW_LISTED: Spent = Object.freeze({
  ok: true,
  outcome: 'allow-listed',
  limit: 0,
  remaining: 0,
  resetMs: 0,
  retryMs: 0,
  charged: 0,
  writeHeaders: NOTHING,
  settle: UNCOUNTED.settle
})
