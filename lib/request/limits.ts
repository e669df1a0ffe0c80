import type { FastifyRequest } from 'fastify'
import type { Limit } from '../algorithms/index.js'
import { andThen, andThenWith } from '../awaitable.js'
import { banPerWindow } from '../options/bans.js'
import { costOf, limitsOf } from './computed.js'
import { identityKeys } from '../stores/key-names.js'
import type { Decidable } from '../stores/store.js'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'
import type { RequestState, Step } from './state.js'

// Stage 3, limits and cost: what the decision on the client's own budget takes. Static limits and cost were
// worked out at onRoute (see lib/request/plan.ts); functions of the request are called here, and one that
// fails gives a static value, never none (./computed.ts).

export function limits (state: RequestState): Step | PromiseLike<Step> {
  return andThenWith(state, decidableFor(state.plan, state.request, state.key, state.given), prepared)
}

function prepared (state: RequestState, input: Decidable): Step {
  state.input = input
  return undefined
}

function decidableFor (plan: Plan, request: FastifyRequest, key: string, given: Given): Decidable | PromiseLike<Decidable> {
  const { cost } = plan.route
  if (typeof cost === 'number') return withCost(plan, request, key, given, cost)
  // The app's functions are given the key as its generator returned it.
  return andThen(costOf(cost, request, given as string, plan.callbacks), units => withCost(plan, request, key, given, units))
}

function withCost (plan: Plan, request: FastifyRequest, key: string, given: Given, units: number): Decidable | PromiseLike<Decidable> {
  if (plan.fixedLimits !== null) return decidable(plan, key, plan.fixedLimits, units)
  const { route } = plan
  return limitsOf(route.limits, plan.fallbacks, route.algorithm, request, given as string, plan.callbacks)
    .then(limits => decidable(plan, key, limits, units))
}

function decidable (plan: Plan, key: string, limits: readonly Limit[], units: number): Decidable {
  const { route, budget } = plan
  const holdDenials = plan.holdable && !plan.undoneScopes.has(budget.scope)
  // `ban: N` over a window the app computes per request: a ban of that request's window (see banPerWindow).
  const ban = plan.banEach === null ? plan.ban : banPerWindow(plan.banEach, limits.map(limit => limit.windowMs))
  let input: Decidable = {
    keys: identityKeys(plan.nameSpace, budget.scope, key, route.algorithm, plan.family),
    limits,
    ban,
    peek: false,
    algorithm: route.algorithm,
    holdDenials,
    failMode: route.failMode
  }
  if (route.overLimit !== undefined) input = { ...input, overLimit: route.overLimit }
  if (plan.waitFor !== null) input = { ...input, wait: plan.waitFor(limits) }
  // A request of one unit says nothing: the common path sends what it always did.
  if (units !== 1) input = { ...input, cost: units }
  return input
}

/** `input` charged the request's `cost` too (as it is when the request costs one unit, and says nothing). */
export function costing<T extends object> (input: T, cost: number | undefined): T {
  return cost === undefined ? input : { ...input, cost }
}
