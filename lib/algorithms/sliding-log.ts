import { largest, longest } from './step.js'
import type { Entry, State, Step } from './step.js'

// The twin of `lua/sliding-log.lua`: every counted request's arrival, oldest first, one log for all limits;
// and, once a request cost more than 1, each entry's cost (the script keeps it in the member's name).

interface Log extends State {
  times: number[]
  /** Each entry's units, beside `times`; undefined while every entry is one unit (the script's log without UNITS). */
  weights: number[] | undefined
}

export const slidingLog: Step = {
  count (state, limits, now, peek, cost) {
    const log = state as Log | undefined
    const times = log?.times ?? []
    let weights = log?.weights
    const longestMs = longest(limits)
    // A peek writes nothing, so it counts around the entries that have left instead of removing them.
    if (!peek) {
      let expired = 0
      while (expired < times.length && times[expired]! <= now - longestMs) expired++
      if (expired > 0) {
        times.splice(0, expired)
        weights?.splice(0, expired)
        if (weights?.every(weight => weight === 1) === true) weights = undefined
      }
    }
    const total = times.length
    const leaves = (rank: number, window: number): number => times[rank]! + window - now

    let allowed = true
    const entries = limits.map(({ max, windowMs: window }): Entry => {
      let n = total
      while (n > 0 && times[total - n]! <= now - window) n--
      let units = n
      if (weights !== undefined) for (let rank = total - n; rank < total; rank++) units += weights[rank]! - 1
      // Ms until `need` units have left this window.
      const left = (need: number): number => {
        let rank = total - n
        if (weights === undefined) rank += need - 1
        else while ((need -= weights[rank]!) > 0) rank++
        return leaves(rank, window)
      }
      // One more unit is free once the oldest leaves; past the limit (a settle charged more than the cost),
      // once enough have left for the count to be one below it.
      const entry = { count: units, reset: n === 0 ? 0 : left(Math.max(1, units + 1 - max)), retry: 0 }
      // The wait is until enough units leave this window for the request's to fit.
      const need = units + cost - max
      if (need > 0) {
        entry.retry = left(need)
        allowed = false
      }
      return entry
    })
    if (!allowed || peek) return { allowed, entries }

    const at = insertSorted(times, now)
    // The first costlier entry gives the log its costs; the script marks it with UNITS.
    const costs = weights ?? (cost > 1 ? new Array<number>(total).fill(1) : undefined)
    costs?.splice(at, 0, cost)
    for (const [index, entry] of entries.entries()) {
      // The new entry is the oldest when the log was empty, or when the clock stepped back.
      if (entry.count === 0 || entry.reset > limits[index]!.windowMs) entry.reset = limits[index]!.windowMs
      entry.count += cost
    }
    if (log === undefined) return { allowed, entries, state: { times, weights: costs, expiresAt: now + 2 * longestMs } as Log }
    log.weights = costs
    // As in the script: the log outlives its newest entry by a window, so its TTL is set to two windows only
    // when less than one is left; a log the trim emptied is gone in Redis, TTL and all, so it starts afresh.
    if (total === 0 || log.expiresAt - now < longestMs) log.expiresAt = now + 2 * longestMs
    return { allowed, entries }
  },

  reserve (state, limits, now, cost, wait, maxQueue, entries) {
    // A denial leaves a log: a request fits an empty one, or costs more than a limit holds (never waits).
    const log = state as Log
    const { times } = log
    let waiting = 0
    for (let i = times.length - 1; i >= 0 && times[i]! > now; i--) waiting++
    if (waiting >= maxQueue) return false
    const at = insertSorted(times, now + wait)
    const costs = log.weights ?? (cost > 1 ? new Array<number>(times.length - 1).fill(1) : undefined)
    costs?.splice(at, 0, cost)
    log.weights = costs
    // As in the script: the log outlives its newest entry by a window.
    const longestMs = longest(limits)
    if (log.expiresAt - now < wait + longestMs) log.expiresAt = now + wait + 2 * longestMs
    // What its limits will say when it is let through.
    entries.splice(0, entries.length, ...slidingLog.count(log, limits, now + wait, true, 0).entries)
    return true
  },

  settle (state, limits, at, _now, cost, asked) {
    // As the script: an entry that has left the log stays gone, and weighs at most the largest capacity.
    const final = Math.min(asked, Math.max(largest(limits), cost))
    const log = state as Log | undefined
    if (log === undefined) return undefined
    const { times } = log
    let index = times.indexOf(at)
    while (index !== -1 && (log.weights?.[index] ?? 1) !== cost) index = times.indexOf(at, index + 1)
    if (index === -1) return undefined
    if (final === 0) {
      times.splice(index, 1)
      log.weights?.splice(index, 1)
    } else if (final !== cost) {
      log.weights ??= times.map(() => 1)
      log.weights[index] = final
    }
    if (log.weights?.every(weight => weight === 1) === true) log.weights = undefined
    return undefined
  }
}

/** Inserts `value`, keeping the array sorted even when the clock steps back; returns where it went. */
function insertSorted (times: number[], value: number): number {
  let i = times.length
  while (i > 0 && times[i - 1]! > value) i--
  times.splice(i, 0, value)
  return i
}
