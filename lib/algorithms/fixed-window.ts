import type { State, Step } from './step.js'

/** The twin of `lua/fixed-window.lua`: one counter per window aligned to the epoch, gone when the window ends. */

interface Counter extends State {
  count: number
}

export const fixedWindow: Step = (state, max, window, now, peek) => {
  const counter = state as Counter | undefined
  const count = counter?.count ?? 0
  const reset = counter === undefined ? 0 : counter.expiresAt - now
  if (count >= max) return { allowed: false, count, reset, retry: reset }
  if (peek) return { allowed: true, count, reset, retry: 0 }
  if (counter !== undefined) {
    counter.count++
    return { allowed: true, count: counter.count, reset, retry: 0 }
  }
  const end = window - now % window
  return { allowed: true, count: 1, reset: end, retry: 0, state: { count: 1, expiresAt: now + end } as Counter }
}
