import type { FastifyRequest } from 'fastify'
import { andThenWith } from '../awaitable.js'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'
import { LISTED } from './state.js'
import type { RequestState, Step } from './state.js'

// Stage 2, allow: whether the route's allow list lets the client by uncounted. A list is matched on the key
// as the stores key it; a function is the app's, given the key as its generator returned it, and one that
// fails allows nothing (lib/callbacks.ts). A client it lets by is `LISTED`: no stage counts it.

export function allow (state: RequestState): Step | PromiseLike<Step> {
  return andThenWith(state, isAllowListed(state.plan, state.request, state.key, state.given), listed)
}

function listed (_state: RequestState, listed: boolean): Step {
  return listed ? LISTED : undefined
}

function isAllowListed (plan: Plan, request: FastifyRequest, key: string, given: Given): boolean | PromiseLike<boolean> {
  const { allowList } = plan.route
  if (allowList === null) return false
  if (typeof allowList !== 'function') return allowList.has(key)
  return plan.callbacks.run('allowList', () => allowList(request, given as string), () => false, request.log)
}
