import type { OverrideOptions, PeekOptions, PeekResult, RateGuardAdmin } from './admin-api.js'
import type { BudgetOptions } from './budgets.js'
import { budgetName } from './budgets.js'
import { InvalidOptionError } from './errors.js'
import { combined } from './stats.js'
import type { LimiterDecorators, RateGuardBudget } from './limiters.js'
import type { RouteRateLimitOptions } from './types.js'

// `fastify.rateGuard` across registrations. Fastify decorators are inherited: a registration inside a context
// that an outer registration already decorated cannot decorate it again. So the outer registration's
// `rateGuard` takes the inner one in, and reaches both:
// - `ban`, `unban` and `reset` act on every registration (a client banned is banned everywhere);
// - `peek`, `setOverride` and `clearOverride` act on the registration that has the budget named (a route, a
//   group; `default` when several registrations have one is ambiguous, and refused with a coded error);
// - `of(nameSpace)` is one registration's own: its calls, `rateLimit` and `createRateLimit` (those two
//   decorators, inherited too, are the outer registration's).

/** One registration: its operator calls, its budgets' names and its limiters. */
export interface Registration extends RateGuardAdmin, LimiterDecorators {
  readonly nameSpace: string
  /** It counts in Redis (keys under its nameSpace), not in a store of its own. */
  readonly remote: boolean
}

export interface RateGuardDecorator extends RateGuardAdmin {
  /** A budget the app spends by hand (the one registration's; with several, `of(nameSpace).budget()`). */
  budget (options?: RouteRateLimitOptions): RateGuardBudget
  /** The registration made with `nameSpace`: its own calls, and its `rateLimit` / `createRateLimit`. */
  of (nameSpace: string): Registration
}

export interface Registrations {
  readonly decorator: RateGuardDecorator
  /**
   * Refuses a registration counting in Redis inside another counting in Redis with its `nameSpace`: both would
   * count each request on the same keys. (Each in-process store is a registration's own.)
   */
  check (nameSpace: string, remote: boolean): void
  add (registration: Registration): void
}

/** The registrations' nameSpaces, for a message. */
const nameSpacesOf = (registrations: readonly Registration[]): string => registrations.map(r => JSON.stringify(r.nameSpace)).join(', ')

export function createRegistrations (): Registrations {
  const all: Registration[] = []
  const withBudget = (options: BudgetOptions | undefined, call: string): Registration => {
    if (all.length === 1) return all[0]!
    const name = budgetName(options)
    const found = all.filter(registration => registration.has(name))
    if (found.length === 1) return found[0]!
    throw new InvalidOptionError(call, found.length === 0
      ? `no budget named ${JSON.stringify(name)}`
      : `budget ${JSON.stringify(name)} is in ${found.length} registrations (nameSpaces ${nameSpacesOf(found)}): ` +
        'choose one with fastify.rateGuard.of(nameSpace)')
  }
  const decorator: RateGuardDecorator = Object.freeze({
    async ban (key: string, duration: number | string) { await Promise.all(all.map(async r => await r.ban(key, duration))) },
    async unban (key: string | { keyHash: string }) { await Promise.all(all.map(async r => await r.unban(key))) },
    async bans (options?: { limit?: number }) {
      const bans = (await Promise.all(all.map(async r => await r.bans(options)))).flat()
      return bans.sort((a, b) => b.retryMs - a.retryMs).slice(0, options?.limit ?? 100)
    },
    async reset (key: string) { await Promise.all(all.map(async r => await r.reset(key))) },
    async peek (key: string, options?: PeekOptions): Promise<PeekResult> { return await withBudget(options, 'peek').peek(key, options) },
    async setOverride (key: string, options: OverrideOptions) { await withBudget(options, 'setOverride').setOverride(key, options) },
    async clearOverride (key: string, options?: BudgetOptions) { await withBudget(options, 'clearOverride').clearOverride(key, options) },
    has: (name: string) => all.some(r => r.has(name)),
    budget (options?: object) {
      if (all.length === 1) return all[0]!.budget(options)
      throw new InvalidOptionError('budget', `${all.length} registrations here (nameSpaces ${nameSpacesOf(all)}): ` +
        'choose one with fastify.rateGuard.of(nameSpace).budget()')
    },
    stats: () => combined(all.map(r => r.stats())),
    of (nameSpace: string): Registration {
      const found = all.filter(r => r.nameSpace === nameSpace)
      if (found.length === 1) return found[0]!
      throw new InvalidOptionError('of', found.length === 0
        ? `no registration with nameSpace ${JSON.stringify(nameSpace)} here (registered: ${nameSpacesOf(all)})`
        : `${found.length} registrations have nameSpace ${JSON.stringify(nameSpace)}: give each a nameSpace of its own to reach it`)
    }
  })
  return {
    decorator,
    check (nameSpace: string, remote: boolean) {
      if (remote && all.some(r => r.remote && r.nameSpace === nameSpace)) {
        throw new InvalidOptionError('nameSpace', `${JSON.stringify(nameSpace)} is the nameSpace of the registration this one is ` +
          'inside: the routes of both would be counted twice on the same keys; give this one a nameSpace of its own')
      }
    },
    add: registration => { all.push(Object.freeze(registration)) }
  }
}
