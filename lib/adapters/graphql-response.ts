// A GraphQL operation's answer from the Mercurius adapter (./mercurius.ts): Shopify's `extensions.cost`, and a
// refusal as Mercurius's ErrorWithProps with its `extensions.code`, the budget that refused, and the HTTP status
// the adapter's `statusCode` gives it.
import mercurius from 'mercurius'
import { isBan } from '../channels.js'
import type { Spent } from '../request/spend.js'
import type { CheckedCost } from './mercurius-options.js'

/** Shopify's `extensions.cost`. `currentlyAvailable` is null where the cost budget was not asked. */
export interface QueryCost {
  requestedQueryCost: number
  actualQueryCost: number | null
  throttleStatus: { maximumAvailable: number, currentlyAvailable: number | null, restoreRate: number }
}

/** A refusal's `extensions.code`. */
export type RefusalCode = 'THROTTLED' | 'BANNED' | 'MAX_COST_EXCEEDED' | 'SERVICE_UNAVAILABLE'

/** What is left of the cost bucket after `spent` counted `charged` and settled to `actual`. */
function available (cost: CheckedCost, spent: Spent | undefined, charged: number, actual: number): number | null {
  if (spent === undefined) return null
  return Math.min(cost.maximumAvailable, spent.remaining + charged - actual)
}

/** The HTTP status of a refusal, under `statusCode`. */
function statusOf (statusCode: 200 | 429, code: RefusalCode): number {
  if (statusCode === 200) return 200
  return code === 'BANNED' ? 403 : code === 'SERVICE_UNAVAILABLE' ? 503 : 429
}

const MESSAGES: Readonly<Record<RefusalCode, string>> = {
  THROTTLED: 'Throttled',
  BANNED: 'Banned',
  MAX_COST_EXCEEDED: 'Query cost exceeds the maximum',
  SERVICE_UNAVAILABLE: 'Rate limit unavailable'
}

/** A refusal in GraphQL's shape, for Mercurius to answer (the budget that refused named in `extensions.budget`). */
export function refusal (statusCode: 200 | 429, code: RefusalCode, budget: string, detail = ''): Error {
  return new mercurius.ErrorWithProps(`${MESSAGES[code]}${detail}`, { code, budget }, statusOf(statusCode, code))
}

/** A refused spend's or hold's code. */
export function codeOf (outcome: string): RefusalCode {
  if (outcome === 'unavailable') return 'SERVICE_UNAVAILABLE'
  return isBan(outcome) ? 'BANNED' : 'THROTTLED'
}

/** Shopify's `extensions.cost` of an operation. */
export function quoted (
  cost: CheckedCost, requested: number, actual: number | null, spent: Spent | undefined, charged: number, settled: number
): QueryCost {
  return {
    requestedQueryCost: requested,
    actualQueryCost: actual,
    throttleStatus: {
      maximumAvailable: cost.maximumAvailable,
      currentlyAvailable: available(cost, spent, charged, settled),
      restoreRate: cost.restoreRate
    }
  }
}
