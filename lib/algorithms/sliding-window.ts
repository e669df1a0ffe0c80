import { fieldsOf, largest, moved } from './step.js'
import type { Entry, Step } from './step.js'

// The twin of `lua/sliding-window.lua`: per limit, two counters, the current window's and the previous one's
// (windows aligned to the epoch). The previous window's requests weigh as much of it as the sliding window
// still covers, `(window - elapsed) / window`: an estimate that assumes they were spread evenly. Integer
// arithmetic in the same order as the script, so both give the same answer to the millisecond. A limit's reset
// is the ms until the estimate (rounded up) falls far enough for one more unit to fit than fits now: as the
// previous window's weight fades, or once this window's requests are the previous ones, so it may be more
// than a window away (a window's requests weigh on the next window until it ends).

interface Counters { start: number, prev: number, curr: number, weighted: number }

/**
 * Ms from `now` until a request of `cost` units fits, for one that does not fit now: later in this window as
 * the previous one's weight fades, or once this window's requests are the previous ones.
 */
function fits ({ start, prev, curr }: Counters, max: number, window: number, cost: number, now: number): number {
  return curr + cost <= max
    ? start + window - Math.floor((max - curr - cost) * window / prev) - now
    : start + 2 * window - Math.floor((max - cost) * window / curr) - now
}

export const slidingWindow: Step = {
  count (state, limits, now, peek, cost) {
    const hash = fieldsOf(state)
    const { fields } = hash
    let allowed = true
    const counters: Counters[] = []
    const entries = limits.map(({ max, windowMs: window }, index): Entry => {
      const i = index + 1
      const start = now - now % window
      let prev = 0
      let curr = 0
      if (fields.get(`w${i}`) === start) {
        prev = fields.get(`p${i}`)!
        curr = fields.get(`c${i}`)!
      } else if (fields.get(`w${i}`) === start - window) {
        prev = fields.get(`c${i}`)!
      }
      const c = { start, prev, curr, weighted: prev * (window - now + start) }
      counters.push(c)
      const entry = { count: 0, reset: 0, retry: 0 }
      if (c.weighted + (curr + cost) * window > max * window) {
        entry.retry = fits(c, max, window, cost, now)
        allowed = false
      }
      return entry
    })

    let ttl = 0
    for (const [index, entry] of entries.entries()) {
      const i = index + 1
      const { max, windowMs: window } = limits[index]!
      const c = counters[index]!
      if (allowed && !peek) {
        c.curr += cost
        fields.set(`w${i}`, c.start).set(`p${i}`, c.prev).set(`c${i}`, c.curr)
        ttl = Math.max(ttl, c.start + 2 * window - now)
      }
      entry.count = c.curr + Math.floor((c.weighted + window - 1) / window)
      // One more unit than fits now: a request of that many more units than are left (one, when none are).
      entry.reset = entry.count === 0 ? 0 : fits(c, max, window, max - Math.min(entry.count, max) + 1, now)
    }
    if (ttl === 0) return { allowed, entries }
    hash.expiresAt = now + ttl
    return { allowed, entries, state: hash }
  },

  settle (state, limits, at, _now, cost, final) {
    if (state === undefined) return undefined
    const { fields } = fieldsOf(state)
    const most = largest(limits)
    limits.forEach(({ max, windowMs: window }, index) => {
      const i = index + 1
      const start = at - at % window
      const curr = fields.get(`c${i}`)!
      const prev = fields.get(`p${i}`)!
      const ceiling = Math.min(max + most, Math.floor(2 ** 51 / window))
      if (fields.get(`w${i}`) === start && curr > 0) fields.set(`c${i}`, curr + moved(curr, final - cost, ceiling))
      else if (fields.get(`w${i}`) === start + window && prev > 0) fields.set(`p${i}`, prev + moved(prev, final - cost, ceiling))
    })
    return undefined
  }
}
