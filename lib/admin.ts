import { ALGORITHMS } from './algorithms/index.js'
import type { Algorithm } from './algorithms/index.js'
import { InvalidOptionError } from './errors.js'
import type { RouteBudget } from './hook.js'
import { identityKeys } from './keys.js'
import { deadline } from './limiter.js'
import { checkDuration, checkMax } from './options.js'
import type { ResolvedOptions } from './options.js'
import type { Store } from './stores/store.js'

/**
 * `fastify.rateGuard`: what an operator does to one client. It acts on the shared store, so with Redis a ban
 * or reset holds on every instance at once. Keys are the ones the key generator makes (`ip:1.2.3.4`,
 * `user:42`, `apikey:…`).
 */

export interface PeekOptions {
  /** Which budget: a route as `'GET /search'`, or a group id. Default: the plugin-wide budget. */
  route?: string
  groupId?: string
  /** Needed when that budget's `max` / `timeWindow` are functions of the request. */
  max?: number
  timeWindow?: number | string
}

export interface PeekResult {
  key: string
  /** What the next request would get: allowed, limited (429) or banned (403). */
  status: 'allowed' | 'limited' | 'banned'
  max: number
  /** Requests counted in the window now. */
  count: number
  remaining: number
  /** Milliseconds until the oldest counted request leaves the window. */
  resetMs: number
  /** Milliseconds until a request would be allowed (the remaining ban when banned; 0 when allowed). */
  retryMs: number
}

export interface RateGuardDecorator {
  /** Bans `key` on every route of this registration for `duration` (ms or `'10 minutes'`). */
  ban (key: string, duration: number | string): Promise<void>
  /** Lifts a ban and forgets the denials counted toward the next one. */
  unban (key: string): Promise<void>
  /** Forgets every request counted for `key` on every budget (by any algorithm), and its denials; a ban stays (see `unban`). */
  reset (key: string): Promise<void>
  /** What the limiter knows about `key`, without counting a request. */
  peek (key: string, options?: PeekOptions): Promise<PeekResult>
}

/** Budgets by name: `default`, `GET /search`, `group:<id>`. */
export type Budgets = ReadonlyMap<string, RouteBudget>

/** Operator calls wait for Redis at least this long (or the decision deadline, when longer), then reject. */
export const ADMIN_MIN_DEADLINE = 1000

export function createAdmin (inner: Store, opts: ResolvedOptions, budgets: Budgets): RateGuardDecorator {
  const { nameSpace, canonicalKey } = opts
  const ms = Math.max(opts.timeout, ADMIN_MIN_DEADLINE)
  const store = {
    decide: async (input: Parameters<Store['decide']>[0]) => await deadline(inner.decide(input), ms),
    setBan: async (key: string, banMs: number) => await deadline(inner.setBan(key, banMs), ms),
    delete: async (keys: readonly string[]) => await deadline(inner.delete(keys), ms)
  }
  const keysOf = (key: string, scope = '', algorithm?: Algorithm): ReturnType<typeof identityKeys> => {
    if (typeof key !== 'string') throw new InvalidOptionError('key', `expected a string, got ${typeof key}`)
    return identityKeys(nameSpace, scope, canonicalKey(key), algorithm)
  }
  return Object.freeze({
    async ban (key: string, duration: number | string) {
      await store.setBan(keysOf(key).banned, checkDuration(duration, 'duration'))
    },
    async unban (key: string) {
      const keys = keysOf(key)
      await store.delete([keys.banned, keys.strikes])
    },
    async reset (key: string) {
      // Every algorithm's state on every budget: a budget whose algorithm changed in a deploy starts over too.
      const scopes = new Set([...budgets.values()].map(budget => budget.scope))
      const logs = [...scopes].flatMap(scope => ALGORITHMS.map(algorithm => keysOf(key, scope, algorithm).log))
      await store.delete([...logs, keysOf(key).strikes])
    },
    async peek (key: string, options: PeekOptions = {}) {
      const name = options.route ?? (options.groupId !== undefined ? `group:${options.groupId}` : 'default')
      const budget = budgets.get(name)
      if (budget === undefined) throw new InvalidOptionError('peek', `no budget named ${JSON.stringify(name)}`)
      const { route } = budget
      const max = options.max !== undefined ? checkMax(options.max) : route.max
      const windowMs = options.timeWindow !== undefined ? checkDuration(options.timeWindow, 'timeWindow') : route.windowMs
      if (typeof max !== 'number' || typeof windowMs !== 'number') {
        throw new InvalidOptionError('peek', `budget ${JSON.stringify(name)} computes max or timeWindow per request: pass them`)
      }
      const { algorithm } = route
      const decision = await store.decide({ keys: keysOf(key, budget.scope, algorithm), max, windowMs, banThreshold: 0, banMs: 0, peek: true, algorithm })
      const remaining = decision.status === 'banned' ? 0 : Math.max(0, max - decision.count)
      return { key, status: decision.status, max, count: decision.count, remaining, resetMs: decision.resetMs, retryMs: decision.retryMs }
    }
  })
}
