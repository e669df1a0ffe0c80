import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { andThen } from '../awaitable.js'
import type { Callbacks } from '../callbacks.js'
import { AbandonedError, AlreadySettledError, InvalidSettleError } from '../errors.js'
import type { Decider } from '../decider.js'
import type { Decision, SettleInput } from '../stores/store.js'
import type { ResolvedRoute } from '../options/resolved.js'
import type { RequestState, Step, Taken } from './state.js'
import { holdWork } from './work.js'
import { warn } from '../warnings.js'

// What a request was charged, and how it settles: reserve, then settle. A request the decider allowed holds
// its cost on every budget it was counted on (its own, and the route's shared one) until it settles, once, at
// its final amount: more (an LLM answer's tokens), less, or 0 (a response that does not count, an aborted
// request). From the handler (`request.rateGuard.settle(amount)`) or after the response, by the route's
// `settle`, `countWhen`, `skipSuccessfulRequests`, `skipFailedRequests` or `refundAborted`.
//
// Until a request settles, it counts at its cost: requests in flight count, whatever their outcome will be.
// That reservation lasts as long as the request (its response, or its abort before its handler started), and
// is never more than its cost.

/** `request.rateGuard`: the request's charge, when a budget of this plugin counted it. */
export interface RequestCharge {
  /** What the request is charged now, in units: its cost until it settles, then its final amount; 0 when nothing counted it. */
  readonly charged: number
  /** Whether it has settled (it can settle once). */
  readonly settled: boolean
  /**
   * Makes `amount` (a whole number of units, 0 or more) the request's final charge, on every budget that
   * counted it, atomically on each: at most what the largest limit of each holds (more is charged as that,
   * with a warning). Once per request: a second call rejects. Redis trouble is logged, never thrown: the
   * request keeps its first charge then.
   */
  settle: (amount: number) => Promise<void>
  /**
   * Under `concurrency`, keeps the request's slots past its handler and its response, for the app's own work
   * after them (a `setImmediate` job, a hijacked socket it keeps writing): they are held until `done` is called
   * (once; later calls do nothing), and at most one lease past the response's end. Several holds may be taken;
   * a request holding no slot (or whose slots were already let go) gets a `done` that does nothing.
   */
  hold: () => () => void
}

/** Where a request's charge is kept (the getter `request.rateGuard` reads it). */
export const CHARGE = Symbol('rate-guard.charge')

/**
 * Where the request is, as `refundAborted` sees it: `waiting` for its handler; `working`, its handler started
 * (the charge stands whatever the client does then); `abandoned`, its client left before the handler started
 * (the charge was given back, so the handler must not run). Moved only by `begin` and `abandon`.
 */
type Phase = 'waiting' | 'working' | 'abandoned'

class Charge implements RequestCharge {
  readonly #request: FastifyRequest
  readonly #decider: Decider
  readonly #counted: readonly Taken[]
  readonly #log: FastifyBaseLogger
  #charged: number
  #settled = false
  #phase: Phase = 'waiting'

  constructor (request: FastifyRequest, decider: Decider, counted: readonly Taken[]) {
    this.#request = request
    this.#decider = decider
    this.#counted = counted
    this.#log = request.log
    this.#charged = counted[0]!.input.cost ?? 1
  }

  get charged (): number {
    return this.#charged
  }

  get settled (): boolean {
    return this.#settled
  }

  hold (): () => void {
    return holdWork(this.#request)
  }

  /** The handler starts now: false when the client left before, and its charge was given back. */
  begin (): boolean {
    if (this.#phase === 'abandoned') return false
    this.#phase = 'working'
    return true
  }

  /** The client left: the charge is given back when the handler has not started (nor the request settled). */
  async abandon (): Promise<void> {
    if (this.#phase !== 'waiting' || this.#settled) return
    this.#phase = 'abandoned'
    await this.settle(0)
  }

  async settle (amount: number): Promise<void> {
    checkAmount(amount)
    if (this.#settled) throw new AlreadySettledError()
    this.#settled = true
    const cost = this.#charged
    // Past what the largest limit of a budget holds, a request is charged that (see `capacity`).
    const finals = this.#counted.map(({ decision }) => Math.min(amount, capacity(decision)))
    this.#charged = finals[0]!
    if (finals.some(final => final < amount)) {
      const fields = { amount, charged: this.#charged }
      warn(this.#log, 'SETTLED_PAST_LIMITS',
        'rate-guard: a request settled at more than its limits hold: charged what the largest holds', fields)
    }
    await Promise.all(this.#counted.map(async ({ input, decision }, i) => {
      const final = finals[i]!
      if (final === cost) return
      const settling: SettleInput = {
        keys: input.keys, limits: input.limits, algorithm: input.algorithm, member: decision.member, at: decision.at, cost, final
      }
      const settled = this.#decider.settle(settling, this.#log)
      // Units given back on a budget whose denials are held until they end: no instance may hold them now.
      await (final < cost && input.holdDenials ? this.#decider.givenBack(input.keys.log, settled, this.#log) : settled)
    }))
  }
}

/**
 * The most a request is charged on a budget: what the largest of the limits it was decided under holds (an
 * override's when one was set). A client charged that has nothing left on any limit; more would only push
 * counts toward 2^53, where the arithmetic stops being exact (the scripts bound what they keep all the same:
 * see lua/prelude.lua).
 */
function capacity (decision: Decision): number {
  let most = 0
  for (const limit of decision.limits) most = Math.max(most, limit.limit)
  return most
}

/**
 * A settlement of what one decision counted, apart from any request's charge: a budget spent by hand
 * (./spend.ts) settles each spend so, by the same rule as a request (at most each budget's largest limit; once).
 */
export function settlementOf (request: FastifyRequest, decider: Decider, counted: readonly Taken[]): Pick<RequestCharge, 'settle'> {
  const charge = new Charge(request, decider, counted)
  return { settle: async amount => await charge.settle(amount) }
}

/** The charge of a request nothing counted (let through by the allow list, by failMode, on a route off): settling it changes nothing. */
export const UNCOUNTED: RequestCharge = Object.freeze({
  charged: 0,
  settled: false,
  settle: async (amount: number): Promise<void> => { checkAmount(amount) },
  hold: () => () => {}
})

/** Where a request keeps its charge (null: nothing counted it). */
const slot = (request: FastifyRequest): Record<symbol, Charge | null> => request as unknown as Record<symbol, Charge | null>

/**
 * The charge stage: what the stages counted of a request let through (its own budget first) is handed over to
 * its charge, for the handler and the response hooks; the pipeline gives nothing back from here on.
 */
export function charge (state: RequestState): Step {
  const counted = state.handOver()
  if (counted.length > 0) slot(state.request)[CHARGE] = new Charge(state.request, state.plan.decider, counted)
  return undefined
}

/** The request's charge, as `request.rateGuard` gives it. */
export function chargeOf (request: FastifyRequest): RequestCharge {
  return slot(request)[CHARGE] ?? UNCOUNTED
}

/** The charge the request still holds at its cost: none when nothing counted it, or it has settled already. */
function unsettled (request: FastifyRequest): Charge | undefined {
  const held = slot(request)[CHARGE]
  return held == null || held.settled ? undefined : held
}

/**
 * The route's `onResponse` hook: a response that does not count (`countWhen` false) gives the request's
 * charge back; otherwise `settle` names its final amount. A request the handler settled is left as it is. A
 * callback that fails leaves the charge as it was, and is logged (see lib/callbacks.ts).
 */
export function settleOnResponse (
  route: ResolvedRoute, callbacks: Callbacks
): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  const { countWhen, settle } = route
  return async (request, reply) => {
    const held = unsettled(request)
    if (held === undefined) return
    const counts = countWhen === undefined
      ? true
      : await callbacks.run<boolean>('countWhen', () => andThen(countWhen(request, reply), checkCounts), () => true, request.log)
    if (!counts) return await held.settle(0)
    if (settle === undefined) return
    const amount = await callbacks.run<number | null>('settle', () => andThen(settle(request, reply), checkAmount), () => null, request.log)
    if (amount !== null) await held.settle(amount)
  }
}

/**
 * `refundAborted`, on routes that ask for it: a refund only for work not done. The route's `onRequestAbort`
 * hook gives the charge back when the client left before the handler started; once it started, the charge
 * stands (the work is done, or being done) and the handler may still settle it. The route's last `preHandler`
 * says the handler starts; a request given back before it does not reach its handler (Fastify would run it
 * all the same after a slow preHandler: work for nothing counted).
 */
export async function refundAborted (request: FastifyRequest): Promise<void> {
  await slot(request)[CHARGE]?.abandon()
}

/** The `preHandler` appended last under `refundAborted` (see above): callback style, no promise per request. */
export function handlerStarts (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void {
  if (slot(request)[CHARGE]?.begin() === false) done(new AbandonedError())
  else done()
}

function checkCounts (value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(`countWhen must return a boolean, got ${typeof value}`)
  return value
}

/** A final amount: a whole number of units, 0 or more. */
function checkAmount (value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new InvalidSettleError(String(value))
  return value
}
