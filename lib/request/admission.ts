import type { FastifyRequest } from 'fastify'
import { policyName, remainingOf } from '../headers.js'
import type { ResolvedLimit } from '../options/resolved.js'
import { keyHash } from '../stores/key-names.js'
import type { Decision } from '../stores/store.js'
import { UNCOUNTED, chargeOf } from './charge.js'
import type { RequestCharge } from './charge.js'
import type { Decided, RequestState, Step } from './state.js'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'

// `request.rateGuard`: the request's charge (./charge.ts) and the decision that let it in, as a handler reads
// it (express-rate-limit's `req.rateLimit`). The pipeline records the decision it wrote the headers from, as
// it is (`admit`: one small object a request); the numbers are worked out only when the app reads them, from
// that decision alone, so they are the headers' own, on either store, with no further call.

/**
 * Why `request.rateGuard` says `limited: false`: `'off'`, no budget of this plugin limited the request (the
 * route is off, or outside `global: false`, or its hook has not run yet); `'allow-listed'`, the allow list let
 * it through; `'shadow'`, the budget is in shadow mode (its numbers are what enforce would have said);
 * `'unenforced'`, Redis did not answer in time and `failMode: 'open'` let it through. `'local'` is the one reason
 * given with `limited: true`: Redis did not answer in time and `failMode: 'local'` decided in process, on this
 * instance's counts.
 */
export type QuotaReason = 'off' | 'allow-listed' | 'shadow' | 'unenforced' | 'local'

/** One limit of the decision on a request, as `request.rateGuard.limits` gives it: the numbers its headers say. */
export interface QuotaLimit {
  /** Its name in the IETF `RateLimit` fields: the limit's `name`, else the budget's (`default`, `default-2`…). */
  readonly name: string
  /** Units it lets through (its `max`; the token bucket's `burst`). */
  readonly limit: number
  /** Units counted on it, this request's among them (tokens in use, for the token bucket). */
  readonly used: number
  /** Units left: 0 while banned, never below 0. */
  readonly remaining: number
  /** Ms until one more unit is free (`X-RateLimit-Reset`, in ms); a full calendar quota: until its period ends. */
  readonly resetMs: number
  /** When that is, as a `Date` (express-rate-limit's `resetTime`), from when the store decided (Redis's `TIME`). */
  readonly resetTime: Date
  /** Its window, ms; a calendar quota's: its current period's length. */
  readonly windowMs: number
  /** A calendar quota's period and time zone; undefined for a limit per `timeWindow`. */
  readonly per: 'day' | 'week' | 'month' | undefined
  readonly timeZone: string | undefined
}

/** Under `concurrency`: the units of the client's requests in flight on the budget, this one's among them. */
export interface QuotaConcurrency {
  readonly max: number
  readonly inFlight: number
  /** Units more that may start now (0 when full). */
  readonly remaining: number
}

/**
 * What `request.rateGuard` says of the decision that let the request in (express-rate-limit's `req.rateLimit`),
 * read lazily from the decision its headers were written from: the top-level numbers are those of the binding
 * limit (the one whose `X-RateLimit-*` headers are sent), `limits` has each. No decision (`limited: false` with
 * `'off'`, `'allow-listed'` or `'unenforced'`): the numbers are undefined and `limits` is empty.
 */
export interface RequestQuota {
  /** Whether the request was held to its limits (a refusal would have been enforced). */
  readonly limited: boolean
  /** Why it was not, or `'local'` (see `QuotaReason`); undefined when Redis (or the in-process store) decided. */
  readonly reason: QuotaReason | undefined
  /**
   * The client's key: the app's `keyGenerator`'s, as it returned it (a number stays a number); the default
   * hierarchy's as operator calls take it (`user:42`, `203.0.113.7`), except a verified API key, never shown:
   * `'apikey:*'` (its `keyHash` names it). Undefined when no budget limited the request (`'off'`).
   */
  readonly key: string | number | undefined
  /** The key's hash: how `bans()`, `unban({ keyHash })`, the decision channel and the report log name the client. */
  readonly keyHash: string | undefined
  /** The binding limit's: its `max`, the units counted, the units left, ms until one more is free, and when. */
  readonly limit: number | undefined
  readonly used: number | undefined
  readonly remaining: number | undefined
  readonly resetMs: number | undefined
  readonly resetTime: Date | undefined
  /** Every limit of the decision, in the order of the `RateLimit` fields (an override's, when one is set). */
  readonly limits: readonly QuotaLimit[]
  /** The in-flight slots under `concurrency`; null without it, or when they were not taken (`failMode: 'open'`). */
  readonly concurrency: QuotaConcurrency | null
}

/** `request.rateGuard`: what the request is charged, and the quota its decision left its client. */
export interface RequestRateGuard extends RequestCharge, RequestQuota {}

/** Where the pipeline records a request's decision (the getter `request.rateGuard` reads it). */
export const ADMISSION = Symbol('rate-guard.admission')

/** A request's decision as recorded: `decided` null when the allow list let it through. */
interface Admission {
  readonly plan: Plan
  readonly given: Given
  readonly decided: Decided | null
  /** The view `request.rateGuard` gives, made at its first read. */
  view: RequestRateGuard | undefined
}

type Slot = Record<symbol, Admission | null>
const slot = (request: FastifyRequest): Slot => request as unknown as Slot

/** The admit stage: records the decision on the request (null: allow-listed); the last budget to decide it is the one read. */
export function admit ({ request, plan, given, decided }: RequestState): Step {
  slot(request)[ADMISSION] = { plan, given, decided, view: undefined }
  return undefined
}

/** `request.rateGuard`: one view per request, the same at every read. */
export function rateGuardOf (request: FastifyRequest): RequestRateGuard {
  const admission = slot(request)[ADMISSION]
  if (admission == null) return OFF
  admission.view ??= new Admitted(request, admission)
  return admission.view
}

/** The charge's part, from ./charge.ts, as it stands at each read. */
class Charged {
  readonly #request: FastifyRequest

  constructor (request: FastifyRequest) {
    this.#request = request
  }

  get charged (): number { return chargeOf(this.#request).charged }
  get settled (): boolean { return chargeOf(this.#request).settled }
  async settle (amount: number): Promise<void> { await chargeOf(this.#request).settle(amount) }
  hold (): () => void { return chargeOf(this.#request).hold() }
}

const NO_LIMITS: readonly QuotaLimit[] = Object.freeze([])

/** A request no budget of this plugin limited (yet): nothing counted it, so it has the uncounted charge. */
const OFF: RequestRateGuard = Object.freeze({
  limited: false,
  reason: 'off',
  key: undefined,
  keyHash: undefined,
  limit: undefined,
  used: undefined,
  remaining: undefined,
  resetMs: undefined,
  resetTime: undefined,
  limits: NO_LIMITS,
  concurrency: null,
  charged: UNCOUNTED.charged,
  settled: UNCOUNTED.settled,
  settle: UNCOUNTED.settle,
  hold: UNCOUNTED.hold
})

class Admitted extends Charged implements RequestRateGuard {
  readonly limited: boolean
  readonly reason: QuotaReason | undefined
  readonly key: string | number
  readonly #admission: Admission
  readonly #decision: Decision | undefined
  #limits: readonly QuotaLimit[] | undefined

  constructor (request: FastifyRequest, admission: Admission) {
    super(request)
    const { plan, given, decided } = admission
    this.#admission = admission
    const verdict = decided?.verdict
    this.#decision = verdict === undefined || !('limit' in verdict) ? undefined : verdict
    this.reason = reasonOf(plan, decided)
    this.limited = this.reason === undefined || this.reason === 'local'
    // A verified API key of the default hierarchy is a secret: its hash names it instead (see `keyHash`).
    this.key = plan.route.defaultKey && typeof given === 'string' && given.startsWith('apikey:') ? 'apikey:*' : given
  }

  get keyHash (): string { return keyHash(this.#admission.given) }
  get limit (): number | undefined { return this.#decision?.limit }
  get used (): number | undefined { return this.#decision?.count }
  get remaining (): number | undefined {
    const decision = this.#decision
    return decision === undefined ? undefined : remainingOf(decision.limit, decision.count, this.#banned)
  }

  get resetMs (): number | undefined {
    const decision = this.#decision
    return decision === undefined ? undefined : resetOf(decision, decision.resetMs, this.#banned)
  }

  get resetTime (): Date | undefined {
    const resetMs = this.resetMs
    return resetMs === undefined ? undefined : new Date(decidedAt(this.#decision!) + resetMs)
  }

  get limits (): readonly QuotaLimit[] {
    this.#limits ??= this.#decision === undefined ? NO_LIMITS : limitsOf(this.#admission, this.#decision, this.#banned)
    return this.#limits
  }

  /** What `JSON.stringify(request.rateGuard)` (a log line, a reply) shows: the quota's fields and the charge. */
  toJSON (): Omit<RequestRateGuard, 'settle' | 'hold'> {
    const { limited, reason, key, keyHash, limit, used, remaining, resetMs, resetTime } = this
    const { limits, concurrency, charged, settled } = this
    return {
      limited, reason, key, keyHash, limit, used, remaining, resetMs, resetTime, limits, concurrency, charged, settled
    }
  }

  /** Read as banned as the headers were written: shadow mode writes an allowed request's (./respond.ts). */
  get #banned (): boolean {
    return this.#decision?.status === 'banned' && this.reason !== 'shadow'
  }

  get concurrency (): QuotaConcurrency | null {
    const { plan: { concurrency }, decided } = this.#admission
    const slots = decided?.slots
    if (concurrency === null || slots === undefined || !('count' in slots)) return null
    const { max } = concurrency
    return Object.freeze({ max, inFlight: slots.count, remaining: Math.max(0, max - slots.count) })
  }
}

/** Why a decided request was not held to its limits (undefined: it was, by the budget's store). */
function reasonOf ({ route, decider, appStore }: Plan, decided: Decided | null): QuotaReason | undefined {
  if (decided === null) return 'allow-listed'
  if (decided.verdict.status === 'unenforced') return 'unenforced'
  if (route.mode === 'shadow') return 'shadow'
  // Redis decides this budget, yet the in-process twin answered: failMode 'local' (it names no member).
  const { verdict } = decided
  const local = decider.remote && appStore === undefined && verdict.status === 'allowed' && verdict.member === ''
  return local ? 'local' : undefined
}

/** A ban resets when it ends (as the headers say it: lib/headers.ts). */
function resetOf (decision: Decision, resetMs: number, banned: boolean): number {
  return banned ? decision.retryMs : resetMs
}

/**
 * When the store decided: its time (a request that waited was counted at its wait's end, `at`); a decision that
 * gives none (a ban or denial held in process, the app's store) is read as of now.
 */
function decidedAt (decision: Decision): number {
  return decision.at === 0 ? Date.now() : decision.at - (decision.waitMs ?? 0)
}

/** Each limit of the decision, named as the `RateLimit` fields name it; its calendar quotas last, as the budget's. */
function limitsOf ({ plan, decided }: Admission, decision: Decision, banned: boolean): readonly QuotaLimit[] {
  const headers = decided!.headers
  const at = decidedAt(decision)
  // An override may change how many limits the algorithm counts, never the quotas: they are the last ones.
  // Only the client's own budget has quotas (a shared budget's refusal, or its slots', has none).
  const quotas: readonly ResolvedLimit[] = headers === plan.budget.headers
    ? plan.route.limits.filter(limit => limit.calendar !== undefined)
    : []
  const firstQuota = decision.limits.length - quotas.length
  return Object.freeze(decision.limits.map((state, i) => {
    const calendar = i >= firstQuota ? quotas[i - firstQuota]!.calendar : undefined
    const resetMs = resetOf(decision, state.resetMs, banned)
    return Object.freeze({
      name: policyName(headers, i),
      limit: state.limit,
      used: state.count,
      remaining: remainingOf(state.limit, state.count, banned),
      resetMs,
      resetTime: new Date(at + resetMs),
      windowMs: state.windowMs,
      per: calendar?.per,
      timeZone: calendar?.timeZone
    })
  }))
}
