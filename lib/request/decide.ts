import type { FastifyBaseLogger } from 'fastify'
import { andThen } from '../awaitable.js'
import type { HeaderStyle } from '../headers.js'
import type { Decidable, Verdict } from '../stores/store.js'
import type { ChargedBudget } from './charge.js'
import type { Given } from './identify.js'
import { costing } from './limits.js'
import type { Plan } from './plan.js'

// Stage 4, decide: the verdict on the client's own budget, then, when it allowed and the route has one, on the
// budget its clients share. When the shared budget refuses, the client's count is given back, so a refused
// request costs neither budget; the answer is then the shared budget's.

/** A decision on a request: the verdict answered, on which budget (`input`, `headers`), and what it is charged on. */
export interface Decided {
  readonly verdict: Verdict
  readonly input: Decidable
  readonly headers: HeaderStyle
  /** The budgets that counted the request, which it holds until it settles (./charge.ts); none when refused. */
  readonly charged: readonly ChargedBudget[]
  /** Refused because its client's requests in flight fill its budget's `concurrency` (./hold.ts). */
  readonly inFlight?: true
  /** Refused because `maxWaiting` requests wait in its registration, where it would have waited (./wait.ts). */
  readonly roomFull?: true
  /** Under `concurrency`, the answer on its slots (./hold.ts): units in flight in its `count`. */
  readonly slots?: Verdict
}

const NOTHING: readonly ChargedBudget[] = Object.freeze([])

/** The verdict on a request: the stores', or the app's store's (under its key, theirs: with the group id after it). */
export function ask (plan: Plan, input: Decidable, given: Given, log: FastifyBaseLogger): Verdict | Promise<Verdict> {
  const { appStore, decider, route } = plan
  if (appStore !== undefined) return appStore.decide(input, route.groupId === undefined ? given : `${given}${route.groupId}`, log)
  return input.peek ? decider.peek(input, log) : decider.decide(input, log)
}

/**
 * Gives back what a budget counted of a request refused after all (by the shared budget, or its client's
 * requests in flight): no instance holds a denial for its client past it (see `Decider.givenBack`).
 */
export function giveBack (plan: Plan, { input, decision }: ChargedBudget, log: FastifyBaseLogger): void {
  const settled = plan.decider.settle(costing({ keys: input.keys, limits: input.limits, algorithm: input.algorithm, member: decision.member, at: decision.at, final: 0 }, input.cost), log)
  if (input.holdDenials) plan.decider.givenBack(input.keys.log, settled, log).catch(() => {})
}

export function decide (plan: Plan, input: Decidable, given: Given, log: FastifyBaseLogger): Decided | PromiseLike<Decided> {
  const { budget, shared } = plan
  return andThen(ask(plan, input, given, log), own => {
    if (own.status !== 'allowed' || shared === null) {
      // The app's own store cannot settle: a request it counted holds nothing.
      const charged = own.status === 'allowed' && plan.appStore === undefined ? [{ input, decision: own }] : NOTHING
      return { verdict: own, input, headers: budget.headers, charged }
    }
    const whole = costing(shared, input.cost)
    return andThen(plan.decider.decide(whole, log), verdict => {
      if (verdict.status !== 'limited' && verdict.status !== 'unavailable') {
        // Allowed: the request holds both counts. Not decided, and let through (failMode): the client's alone.
        const charged = verdict.status === 'allowed' ? [{ input, decision: own }, { input: whole, decision: verdict }] : [{ input, decision: own }]
        return { verdict: own, input, headers: budget.headers, charged }
      }
      giveBack(plan, { input, decision: own }, log)
      return { verdict, input: whole, headers: budget.sharedHeaders, charged: NOTHING }
    })
  })
}
