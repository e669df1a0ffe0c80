import type { FastifyRequest } from 'fastify'
import { isPromise } from '../awaitable.js'
import { identityKeys, watchedScope } from '../stores/key-names.js'
import type { Decidable, Verdict } from '../stores/store.js'
import type { Given } from './identify.js'
import { costing } from './limits.js'
import type { Plan } from './plan.js'
import type { RequestState, Step } from './state.js'
import { report } from './report.js'
import { SHADOW } from './respond.js'

// Stage 6, watch: the route's watched limits (`mode: 'shadow'` per limit) on a request its enforced ones
// allowed, decided on a budget of their own, not waited for (the request goes on at once), and what they
// would have refused reported as shadow mode does. They never refuse and never write a strike, a ban or an
// over-limit wait.

/** The watch stage: on a request its enforced limits allowed, when the route watches some. */
export function watch ({ plan, request, given, decided }: RequestState): Step {
  if (plan.watched !== null && decided!.verdict.status === 'allowed') watchLimits(plan, request, given, decided!.input)
  return undefined
}

function watchLimits (plan: Plan, request: FastifyRequest, key: Given, input: Decidable): void {
  const { budget, route } = plan
  const keys = identityKeys(plan.nameSpace, watchedScope(budget.scope), String(key), route.algorithm)
  const decidable = costing<Decidable>({ ...plan.watched!, keys }, input.cost)
  const seen = (verdict: Verdict): void => {
    if (verdict.status !== 'limited') return
    report(plan, 'shadow-limited', key, verdict, decidable, budget.watchedHeaders)
    route.onExceeded?.(request, key as string, SHADOW)
  }
  try {
    const verdict = plan.decider.decide(decidable, request.log)
    if (isPromise(verdict)) {
      verdict.then(seen).catch((err: unknown) => { request.log.error({ err }, 'rate-guard: a watched limit could not be reported') })
    } else seen(verdict)
  } catch (err) {
    request.log.error({ err }, 'rate-guard: a watched limit could not be reported')
  }
}
