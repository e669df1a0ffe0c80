import { checkKeys, checkMax, fail } from './checks.js'
import { LONGEST_TIMER_MS, toMilliseconds } from '../duration.js'

// `concurrency: { max, lease }`: at most `max` units of one client's requests in flight on the budget, across
// every instance, each holding a lease that ends `lease` after it was last renewed (lib/leases.ts renews it
// every third of a lease while the request runs). `false` (the default): no such limit.

/** A budget's concurrency, resolved: `null` when it has none. */
export interface ResolvedConcurrency {
  readonly max: number
  readonly leaseMs: number
}

/** Leases end 30 s after their last renewal unless the budget says. */
export const DEFAULT_LEASE_MS = 30_000
/** A lease renewed every third of itself: shorter than a second would renew more often than a busy event loop can keep. */
const SHORTEST_LEASE_MS = 1000

export function checkConcurrency (value: unknown, name: string): ResolvedConcurrency | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(name, value, "false, or { max, lease }: e.g. { max: 3, lease: '30 seconds' }")
  }
  checkKeys(value, new Set(['max', 'lease']), `${name}.`)
  const { max, lease } = value as { max?: unknown, lease?: unknown }
  const leaseMs = lease === undefined ? DEFAULT_LEASE_MS : toMilliseconds(lease)
  if (leaseMs === undefined || leaseMs < SHORTEST_LEASE_MS || leaseMs > LONGEST_TIMER_MS) {
    fail(`${name}.lease`, lease, `a duration from 1 second to ${LONGEST_TIMER_MS} ms, such as '30 seconds'`)
  }
  return Object.freeze({ max: checkMax(max, `${name}.max`), leaseMs })
}
