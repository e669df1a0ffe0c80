import { decisionChannel, keyKindOf } from '../channels.js'
import type { DecisionMessage, Outcome } from '../channels.js'
import { policyName } from '../headers.js'
import type { HeaderStyle } from '../headers.js'
import { keyHashOf } from '../stores/key-names.js'
import type { Decidable, Decision, Verdict } from '../stores/store.js'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'

// What the stages tell the world of a decision: the registration's counts (`stats()`), and the diagnostics
// channel when anyone listens.

/** A decision on `input` (the budget's own, its shared one's or its watched one's): counted, and published. */
export function report (
  plan: Plan, outcome: Outcome, key: Given, verdict: Verdict, input: Decidable, headers: HeaderStyle, inFlight?: number
): void {
  plan.decider.stats.count(outcome)
  if (!decisionChannel.hasSubscribers) return
  decisionChannel.publish({
    outcome,
    nameSpace: plan.nameSpace,
    budget: plan.budget.name,
    algorithm: plan.route.algorithm,
    limit: 'limits' in verdict ? bindingName(verdict, headers) : undefined,
    cost: input.cost ?? 1,
    redisMs: 'redisMs' in verdict ? verdict.redisMs : undefined,
    batchSize: 'batchSize' in verdict ? verdict.batchSize : undefined,
    keyHash: hashOf(input),
    keyKind: keyKindOf(key),
    mode: plan.route.mode,
    inFlight,
    waitedMs: 'waitMs' in verdict ? verdict.waitMs : undefined
  } satisfies DecisionMessage)
}

/** The client's hash in a decision's keys; none for a shared budget. */
export function hashOf (input: Decidable): string | undefined {
  return keyHashOf(input.keys.log)
}

/** The name of a decision's binding limit, as the IETF fields name it. */
function bindingName (decision: Decision, headers: HeaderStyle): string {
  const i = Math.max(0, decision.limits.findIndex(l =>
    l.limit === decision.limit && l.windowMs === decision.windowMs && l.count === decision.count && l.resetMs === decision.resetMs))
  return policyName(headers, i)
}
