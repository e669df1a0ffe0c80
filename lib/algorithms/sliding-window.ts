import type { State, Step } from './step.js'

/**
 * The twin of `lua/sliding-window.lua`: two counters, the current window's and the previous one's (windows
 * aligned to the epoch). The previous window's requests weigh as much of it as the sliding window still
 * covers, `(window - elapsed) / window`: an estimate that assumes they were spread evenly. Integer arithmetic
 * in the same order as the script, so both give the same answer to the millisecond.
 */

interface Counters extends State {
  start: number
  prev: number
  curr: number
}

export const slidingWindow: Step = (state, max, window, now, peek) => {
  const start = now - now % window
  const stored = state as Counters | undefined
  let prev = 0
  let curr = 0
  if (stored?.start === start) {
    prev = stored.prev
    curr = stored.curr
  } else if (stored?.start === start - window) {
    prev = stored.curr
  }
  const weighted = prev * (window - now + start)
  const count = (c: number): number => c + Math.floor((weighted + window - 1) / window)
  const reset = (c: number): number => c > 0 ? start + 2 * window - now : prev > 0 ? start + window - now : 0

  if (weighted + (curr + 1) * window <= max * window) {
    if (peek) return { allowed: true, count: count(curr), reset: reset(curr), retry: 0 }
    curr++
    const made: Counters = { start, prev, curr, expiresAt: start + 2 * window }
    return { allowed: true, count: count(curr), reset: reset(curr), retry: 0, state: made }
  }
  // The first millisecond the request fits: later in this window as the previous one's weight fades, or
  // once this window's requests are the previous ones.
  const retry = curr < max
    ? start + window - Math.floor((max - curr - 1) * window / prev) - now
    : start + 2 * window - Math.floor((max - 1) * window / curr) - now
  return { allowed: false, count: count(curr), reset: reset(curr), retry }
}
