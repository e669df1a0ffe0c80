import type { FastifyBaseLogger } from 'fastify'
import { andThen, andThenWith } from '../awaitable.js'
import type { Decidable, Verdict } from '../stores/store.js'
import type { Given } from './identify.js'
import { costing } from './limits.js'
import type { Plan } from './plan.js'
import { REFUSED } from './state.js'
import type { RequestState, Step } from './state.js'

// Stage 4, decide: the verdict on the client's own budget, then, when it allowed and the route has one, on the
// budget its clients share. What each allowed is taken (./state.ts); when the shared budget refuses, the
// request is refused, and the pipeline gives the client's count back, so a refused request costs neither
// budget; the answer is then the shared budget's.

/** The verdict on a request: the stores', or the app's store's (under its key, theirs: with the group id after it). */
export function ask (plan: Plan, input: Decidable, given: Given, log: FastifyBaseLogger): Verdict | Promise<Verdict> {
  const { appStore, decider, route } = plan
  if (appStore !== undefined) {
    return appStore.decide(input, route.groupId === undefined ? given : `${given}${route.groupId}`, log)
  }
  return input.peek ? decider.peek(input, log) : decider.decide(input, log)
}

export function decide (state: RequestState): Step | PromiseLike<Step> {
  return andThenWith(state, ask(state.plan, state.input!, state.given, state.request.log), decidedOwn)
}

function decidedOwn (state: RequestState, own: Verdict): Step | PromiseLike<Step> {
  const { plan } = state
  const { budget, shared } = plan
  const input = state.input!
  if (own.status !== 'allowed' || shared === null) {
    // The app's own store cannot settle: a request it counted holds nothing.
    if (own.status === 'allowed' && plan.appStore === undefined) state.take(input, own)
    state.decided = { verdict: own, input, headers: budget.headers }
    return undefined
  }
  state.take(input, own)
  const whole = costing(shared, input.cost)
  return andThen(plan.decider.decide(whole, state.request.log), verdict => {
    if (verdict.status !== 'limited' && verdict.status !== 'unavailable') {
      // Allowed: the request holds both counts. Not decided, and let through (failMode): the client's alone.
      if (verdict.status === 'allowed') state.take(whole, verdict)
      state.decided = { verdict: own, input, headers: budget.headers }
      return undefined
    }
    state.decided = { verdict, input: whole, headers: budget.sharedHeaders }
    return REFUSED
  })
}
