import { fail } from './checks.js'
import { InvalidOptionError } from '../errors.js'
import type { ResolvedRoute } from './resolved.js'
import { ENTRIES } from './table.js'
import type { Budget, Place } from './table.js'
import type { Warn } from '../warnings.js'

// The one pass over the options' conflicts and what is said of them, once a budget is merged: each option's, as
// its descriptor declares them (table.ts), in the table's order. No other file refuses an option for another's sake.

/** What the pass reads besides the merged budget: its options as given (the values a refusal shows) and each checked alone, where. */
export interface GivenAt {
  readonly input: Readonly<Record<string, unknown>>
  readonly given: Readonly<Record<string, unknown>>
  readonly place: Place
  readonly store: boolean
}

/**
 * The first conflict of the table that `route` meets, thrown as the coded error naming its option (`where`
 * prefixes names, but a store's refusals, named alone).
 */
export function checkConflicts (route: ResolvedRoute, { input, given, place, store }: GivenAt, where: string): void {
  const budget: Budget = { route, given, place, store }
  for (const [option, entry] of ENTRIES) {
    for (const { when, why, form } of entry.conflicts) {
      if (!when(budget, option)) continue
      if (form === 'expected') fail(`${where}${option}`, input[option], why)
      throw new InvalidOptionError(form === 'store' ? option : `${where}${option}`, why)
    }
  }
}

/** What each option says once its budget is merged and checked (`where` prefixes names), to `warn`. */
export function sayMerged (route: ResolvedRoute, where: string, warn: Warn): void {
  for (const [, entry] of ENTRIES) entry.said?.(route, where, warn)
}
