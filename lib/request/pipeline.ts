import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { andThen, andThenWith, isPromise } from '../awaitable.js'
import type { RouteBudget } from '../budgets.js'
import type { Decider } from '../decider.js'
import type { Decidable, Verdict } from '../stores/store.js'
import type { ResolvedOptions } from '../options/resolved.js'
import type { TheirStore } from '../types.js'
import { AbandonedError } from '../errors.js'
import type { Leases } from '../leases.js'
import { admit } from './admission.js'
import { allow } from './allow.js'
import { charge } from './charge.js'
import { ask, decide } from './decide.js'
import { hold } from './hold.js'
import type { Given } from './identify.js'
import { costing, limits } from './limits.js'
import { planBudget } from './plan.js'
import type { Plan } from './plan.js'
import { respond } from './respond.js'
import { checkSpend, heldOf, narrow, price, slots, spentOf } from './spend.js'
import type { HeldSlots, SpendOptions, Spent } from './spend.js'
import { END, LEFT, LISTED, REFUSED, RequestState, SENT } from './state.js'
import type { HookResult, Stage, Step } from './state.js'
import { wait } from './wait.js'
import type { WaitingRoom } from './waiting-room.js'
import { watch } from './watch.js'

// A request, as one budget limits it, in named stages over one small state a request (./state.ts):
//   identify → allow → limits and cost → decide → wait → hold → charge → admit → respond → watch
// each reading the budget's plan, worked out once at onRoute (./plan.ts). Every stage runs at once when its
// answer is at hand (a static allow list and limits, a ban held in process, the in-process store) and waits
// only for what must be waited for (Redis, an async key generator): a client refused in process costs no
// promise. A stage says what it came to (a `Step`), and the pipeline alone acts on it: it gives back what the
// request was counted (`refund`) when a later stage refuses it or its client leaves while it waits, once.

/** A request's key and what its decision takes: `input` is null when the allow list lets it through. */
export interface Prepared {
  /** Who the client is, as the stores key it. */
  readonly key: string
  /** The key as the app's key generator returned it: what the app's callbacks are given. */
  readonly given: Given
  readonly input: Decidable | null
}

type Done = (err?: Error) => void

/** A budget's limit on a request, as a value: the refusal to throw, `SENT`, or nothing. */
type Limiting = (request: FastifyRequest, reply: FastifyReply) => HookResult | PromiseLike<HookResult>

/** The hook in Fastify's callback style: `done` once, with the refusal if any; not at all when it answered itself. */
export type RequestHook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

/** One budget applied to requests: as Fastify's hook, as a function giving the result, and its first stages alone. */
export interface BudgetHooks {
  readonly hook: RequestHook
  /** What the hook does, as a value: the refusal to throw, `SENT`, or nothing. */
  run (request: FastifyRequest, reply: FastifyReply): HookResult | PromiseLike<HookResult>
  /** The verdict on a prepared request (a read with `peek`), from the store that counts this budget. */
  ask (input: Decidable, given: Given, log: FastifyBaseLogger): Verdict | Promise<Verdict>
  /** Identify → allow → limits: what a decision of this budget takes for `request`. */
  prepare (request: FastifyRequest): Prepared | PromiseLike<Prepared>
  /** Spends the budget by hand for `request`'s client (./spend.ts): answered, never thrown or sent. */
  spend (request: FastifyRequest, options: SpendOptions | undefined): Promise<Spent>
  /** Takes slots of the budget's `concurrency` by hand for `request`'s client (./spend.ts), until released. */
  hold (request: FastifyRequest, options: SpendOptions | undefined): Promise<HeldSlots>
  /** The app's store (`@fastify/rate-limit`'s `store`) counts this budget, with their meaning of its count. */
  readonly theirStore: boolean
  /** The budget has `concurrency`: its requests may hold slots until their work is over (./work.ts). */
  readonly holds: boolean
  /**
   * For requests no route matched (`request.is404`): refuses a client known to be banned (held in process,
   * or in the in-process store), asking Redis nothing and counting nothing; lets every other request by.
   */
  readonly notFound: RequestHook
}

/** Stage 1, identify: the client's key (./identify.ts makes the route's key generator). */
function identify (state: RequestState): Step | PromiseLike<Step> {
  return andThenWith(state, state.plan.keyOf(state.request), identified)
}

function identified (state: RequestState, given: Given): Step {
  state.given = given
  state.key = String(given)
  return undefined
}

/** A request no route matched goes on only when its client is known to be banned here (counting nothing). */
function banned (state: RequestState): Step {
  const input = state.input!
  const verdict = state.plan.decider.knownBan(input)
  if (verdict === undefined) return END
  state.decided = { verdict, input, headers: state.plan.budget.headers }
  return undefined
}

/** A request's way through the budget. */
const PIPELINE: readonly Stage[] = [identify, allow, limits, decide, wait, hold, charge, admit, respond, watch]
/** A request no route matched (`notFound`). */
const NOT_FOUND: readonly Stage[] = [identify, allow, limits, banned, respond]
/** What a decision of the budget takes (`prepare`). */
const PREPARE: readonly Stage[] = [identify, allow, limits]
/** The budget spent by hand (`spend`): a key under the client's, and the units the app asked for. */
const SPEND: readonly Stage[] = [identify, allow, narrow, limits, price, decide, wait]
/** Slots held by hand (`hold`): the budget's `concurrency` for a key, until the app releases them. */
const SLOTS: readonly Stage[] = [identify, allow, narrow, limits, price, slots]

/** Runs `stages` from `at` over `state`, one after the other, at once as long as each answers at once. */
function run (stages: readonly Stage[], state: RequestState, at: number): HookResult | PromiseLike<HookResult> {
  for (let stage = at; stage < stages.length; stage++) {
    const step = stages[stage]!(state)
    if (isPromise(step)) return step.then(later => next(stages, state, stage, later))
    if (step !== undefined) return next(stages, state, stage, step)
  }
  return state.result
}

/** What comes after the stage at `stage` said `step`. */
function next (stages: readonly Stage[], state: RequestState, stage: number, step: Step): HookResult | PromiseLike<HookResult> {
  switch (step) {
    case undefined:
      return run(stages, state, stage + 1)
    case REFUSED:
      refund(state)
      return run(stages, state, stage + 1)
    case LEFT:
      // Its client left while it waited: its place is given back, and it is not handled.
      refund(state)
      return new AbandonedError()
    case LISTED:
      // Let by uncounted: on its way through the budget, recorded so (`request.rateGuard` says 'allow-listed').
      if (stages === PIPELINE) admit(state)
      return undefined
    case END:
      return state.result
  }
}

/**
 * Gives back, once, what the request's stages counted of it (./state.ts): it was refused after all (by the
 * shared budget, its client's requests in flight, a full waiting room), or its client left while it waited.
 * No instance holds a denial for its client past it (see `Decider.givenBack`).
 */
function refund (state: RequestState): void {
  const taken = state.handOver()
  const { decider } = state.plan
  const log = state.request.log
  for (const { input, decision } of taken) {
    const { keys, limits, algorithm } = input
    const { member, at } = decision
    const settled = decider.settle(costing({ keys, limits, algorithm, member, at, final: 0 }, input.cost), log)
    if (input.holdDenials) decider.givenBack(keys.log, settled, log).catch(() => {})
  }
}

/**
 * `room`: where the registration's requests wait (`maxWaiting`); `ran`: the request decoration saying one of the
 * registration's hooks has limited it.
 */
export function createHooks (
  decider: Decider, leases: Leases, room: WaitingRoom, opts: ResolvedOptions, budget: RouteBudget, undoneScopes: ReadonlySet<string>,
  ran: symbol, appStore?: TheirStore
): BudgetHooks {
  const plan = planBudget(decider, leases, room, opts, budget, undoneScopes, appStore)
  const limit: Limiting = (request, reply) => {
    // Limited once: a route's own hook and a limiter the app put on it too count the request once, the first.
    const marked = request as unknown as Record<symbol, boolean>
    if (marked[ran]) return undefined
    marked[ran] = true
    return run(PIPELINE, new RequestState(plan, request, reply), 0)
  }
  const notFound: Limiting = (request, reply) => run(NOT_FOUND, new RequestState(plan, request, reply), 0)
  return {
    hook: (request, reply, done) => { asHook(limit, request, reply, done) },
    run: limit,
    ask: (input, given, log) => ask(plan, input, given, log),
    prepare: request => {
      const state = new RequestState(plan, request, null)
      return andThen(run(PREPARE, state, 0), () => state)
    },
    spend: async (request, options) => spentOf(await byHand(plan, SPEND, request, options)),
    hold: async (request, options) => heldOf(await byHand(plan, SLOTS, request, options)),
    theirStore: plan.appStore !== undefined,
    holds: plan.concurrency !== null,
    notFound (request, reply, done) {
      if (request.is404) asHook(notFound, request, reply, done)
      else done()
    }
  }
}

/** A budget spent by hand (`spend`, `hold`): `stages` run over a request's state with the app's options, checked. */
async function byHand (plan: Plan, stages: readonly Stage[], request: FastifyRequest, options: SpendOptions | undefined): Promise<RequestState> {
  const state = new RequestState(plan, request, null)
  state.spending = checkSpend(options)
  await run(stages, state, 0)
  return state
}

/** Runs `step` as Fastify's callback-style hook: `done` once, with its refusal, whether it answers at once, later, or throws. */
function asHook (step: Limiting, request: FastifyRequest, reply: FastifyReply, done: Done): void {
  let result: HookResult | PromiseLike<HookResult>
  try {
    result = step(request, reply)
  } catch (err) {
    done(err as Error)
    return
  }
  if (isPromise(result)) result.then(value => finish(value, done), done)
  else finish(result, done)
}

function finish (result: HookResult, done: Done): void {
  if (result !== SENT) done(result)
}
