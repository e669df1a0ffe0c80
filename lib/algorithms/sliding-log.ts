import type { State, Step } from './step.js'

/** The twin of `lua/sliding-log.lua`: every counted request's arrival, oldest first. */

interface Log extends State {
  times: number[]
}

export const slidingLog: Step = (state, max, window, now, peek) => {
  const log = state as Log | undefined
  const times = log?.times ?? []
  let expired = 0
  while (expired < times.length && times[expired]! <= now - window) expired++
  if (expired > 0) times.splice(0, expired)
  let count = times.length
  const leaves = (index: number): number => times[index]! + window - now

  if (count < max) {
    let made: Log | undefined
    if (!peek) {
      insertSorted(times, now)
      if (log === undefined) made = { times, expiresAt: now + window }
      // As in the script: the log lives until its newest entry leaves, also after the clock stepped back.
      else log.expiresAt = Math.max(log.expiresAt, now + window)
      count++
    }
    return { allowed: true, count, reset: count === 0 ? 0 : leaves(0), retry: 0, state: made }
  }
  return { allowed: false, count, reset: leaves(0), retry: leaves(count - max) }
}

/** Appends `value`, keeping the array sorted even when the clock steps back. */
function insertSorted (times: number[], value: number): void {
  let i = times.length
  while (i > 0 && times[i - 1]! > value) i--
  times.splice(i, 0, value)
}
