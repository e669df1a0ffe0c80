import { fieldsOf, keep, moved } from './step.js'
import type { Entry, Fields, Limit, State } from './step.js'

// The in-process twin of lua/quota.lua: calendar quotas (a limit with `period`), each counted in the period
// that holds the store's clock (of the three around the app's: the one before, its current one, the next),
// beside the budget's algorithm, which counts the other limits. The state is the script's hash: s<j> = the start
// of the period quota j counted, which only moves forward (a request that finds a later period counted counts
// in it), c<j> = the units counted in it.

/** A calendar quota at one instant: its capacity, and the period holding that instant (`windowMs` its length). */
export interface Quota extends Limit {
  readonly start: number
  readonly finish: number
}

const NONE: readonly Quota[] = Object.freeze([])

/**
 * The calendar quotas of `limits` (their last ones, lib/request/limits.ts puts them there) in the periods that
 * hold `now`: the app's clock found their current one, the store's may be in the one before still or in the
 * next already.
 */
export function quotasAt (limits: readonly Limit[], now: number): readonly Quota[] {
  // Most budgets have none: nothing made for them.
  if (limits.at(-1)?.period === undefined) return NONE
  const quotas: Quota[] = []
  for (const limit of limits) {
    if (limit.period === undefined) continue
    const { previous, start, end, next } = limit.period
    const [from, to] = now < start ? [previous, start] : now >= end ? [end, next] : [start, end]
    quotas.push({ max: limit.max, burst: limit.burst, windowMs: to - from, start: from, finish: to })
  }
  return quotas
}

/** The quotas under an override's text: `'<max> q<j>'` gives quota j that max (and capacity); `quotas` itself when it names none. */
export function quotasOverridden (text: string, quotas: readonly Quota[]): readonly Quota[] {
  let changed: Quota[] | undefined
  for (const [, max, j] of text.matchAll(/(\d+) q(\d+)/g)) {
    const limit = quotas[Number(j) - 1]
    if (limit === undefined) continue
    changed ??= [...quotas]
    changed[Number(j) - 1] = { ...limit, max: Number(max), burst: Number(max) }
  }
  return changed ?? quotas
}

/** Whether every quota has room for `cost` units at `now`; appends to `entries` what each says (count, reset, retry). */
export function quotasFit (state: State | undefined, quotas: readonly Quota[], now: number, cost: number, entries: Entry[]): boolean {
  const { fields } = fieldsOf(state)
  let fits = true
  quotas.forEach(({ max, start, finish }, index) => {
    // This period's count, or a later one's (never reset by an earlier period); else none yet.
    const n = (fields.get(`s${index + 1}`) ?? -Infinity) >= start ? fields.get(`c${index + 1}`)! : 0
    const entry = { count: n, reset: n > 0 ? finish - now : 0, retry: 0 }
    if (n + cost > max) {
      entry.retry = finish - now
      fits = false
    }
    entries.push(entry)
  })
  return fits
}

/** Counts `cost` on every quota (`entries`, as quotasFit filled them, say so after): the state to keep. */
export function quotasCount (
  state: State | undefined, quotas: readonly Quota[], now: number, entries: readonly Entry[], cost: number
): Fields {
  const hash = fieldsOf(state)
  let ttl = 0
  quotas.forEach(({ start, finish }, index) => {
    const entry = entries[index]!
    entry.count += cost
    entry.reset = finish - now
    // A later period found counted stays the one counted.
    const since = Math.max(hash.fields.get(`s${index + 1}`) ?? start, start)
    hash.fields.set(`s${index + 1}`, since).set(`c${index + 1}`, entry.count)
    ttl = Math.max(ttl, entry.reset)
  })
  keep(hash, now, ttl)
  return hash
}

/**
 * The request counted at `at` for `cost` units counts `final` instead (0: given back), in the period it was
 * counted in; once that period is over, nothing changes. `most`: the largest capacity of the budget's limits.
 */
export function quotasSettle (
  state: State | undefined, quotas: readonly Quota[], most: number, at: number, now: number, cost: number, final: number
): void {
  const { fields } = fieldsOf(state)
  quotas.forEach(({ max, start }, index) => {
    // s<j> and c<j> are written together: a period counted has its count.
    const n = fields.get(`c${index + 1}`)!
    if (fields.get(`s${index + 1}`) === start && at >= start && n > 0) {
      const ceiling = Math.min(max + most, Math.max(max, 2 ** 52))
      fields.set(`c${index + 1}`, n + moved(n, final - cost, ceiling))
    }
  })
}
