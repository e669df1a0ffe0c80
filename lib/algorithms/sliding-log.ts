import type { Entry, State, Step } from './step.js'

/** The twin of `lua/sliding-log.lua`: every counted request's arrival, oldest first, one log for all limits. */

interface Log extends State {
  times: number[]
}

export const slidingLog: Step = {
  count (state, limits, now, peek) {
    const log = state as Log | undefined
    const times = log?.times ?? []
    const longest = Math.max(...limits.map(limit => limit.windowMs))
    // A peek writes nothing, so it counts around the entries that have left instead of removing them.
    if (!peek) {
      let expired = 0
      while (expired < times.length && times[expired]! <= now - longest) expired++
      if (expired > 0) times.splice(0, expired)
    }
    const total = times.length
    const leaves = (rank: number, window: number): number => times[rank]! + window - now

    let allowed = true
    const entries = limits.map(({ max, windowMs: window }): Entry => {
      let n = total
      while (n > 0 && times[total - n]! <= now - window) n--
      const entry = { count: n, reset: n > 0 ? leaves(total - n, window) : 0, retry: 0 }
      // The wait is until enough entries leave this window for one more to fit.
      if (n >= max) {
        entry.retry = leaves(total - max, window)
        allowed = false
      }
      return entry
    })
    if (!allowed || peek) return { allowed, entries }

    insertSorted(times, now)
    for (const [index, entry] of entries.entries()) {
      // The new entry is the oldest when the log was empty, or when the clock stepped back.
      if (entry.count === 0 || entry.reset > limits[index]!.windowMs) entry.reset = limits[index]!.windowMs
      entry.count++
    }
    // As in the script: the log outlives its newest entry by a window, so its TTL is set to two windows only
    // when less than one is left; a log the trim emptied is gone in Redis, TTL and all, so it starts afresh.
    if (log === undefined) return { allowed, entries, state: { times, expiresAt: now + 2 * longest } as Log }
    if (total === 0 || log.expiresAt - now < longest) log.expiresAt = now + 2 * longest
    return { allowed, entries }
  },

  undo (state, _limits, at) {
    const { times } = state as Log
    const index = times.indexOf(at)
    if (index !== -1) times.splice(index, 1)
  }
}

/** Appends `value`, keeping the array sorted even when the clock steps back. */
function insertSorted (times: number[], value: number): void {
  let i = times.length
  while (i > 0 && times[i - 1]! > value) i--
  times.splice(i, 0, value)
}
