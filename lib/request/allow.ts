import type { FastifyRequest } from 'fastify'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'

// Stage 2, allow: whether the route's allow list lets the client by uncounted. A list is matched on the key
// as the stores key it; a function is the app's, given the key as its generator returned it, and one that
// fails allows nothing (lib/callbacks.ts).

export function isAllowListed (plan: Plan, request: FastifyRequest, key: string, given: Given): boolean | PromiseLike<boolean> {
  const { allowList } = plan.route
  if (allowList === null) return false
  if (typeof allowList !== 'function') return allowList.has(key)
  return plan.callbacks.run('allowList', () => allowList(request, given as string), () => false, request.log)
}
