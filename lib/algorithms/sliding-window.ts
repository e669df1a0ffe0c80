import { fieldsOf, largest, moved } from './step.js'
import type { Entry, Fields, Step } from './step.js'

// The twin of `lua/sliding-window.lua`: per limit, two counters, the current window's and the previous one's
// (windows aligned to the epoch). The previous window's requests weigh as much of it as the sliding window
// still covers, `(window - elapsed) / window`: an estimate that assumes they were spread evenly. Integer
// arithmetic in the same order as the script, so both give the same answer to the millisecond. A limit's reset
// is the ms until the estimate (rounded up) falls far enough for one more unit to fit than fits now: as the
// previous window's weight fades, or once this window's requests are the previous ones, so it may be more
// than a window away (a window's requests weigh on the next window until it ends). Under maxWait, the requests
// waiting for the next window count in this one's estimate too (see lua/sliding-window.lua's header).

/**
 * Limit `i`'s counters at `now`: its window's start, the previous window's count, this window's, the units
 * waiting for the next (maxWait: while `w<i>` is the next window's start, `c<i>` counts them, `p<i>` this
 * window and `o<i>` the previous one), and `weighted`, the previous window's count times the part of it the
 * sliding window still covers.
 */
interface Counters { start: number, prev: number, curr: number, next: number, weighted: number }

function current ({ fields }: Fields, i: number, window: number, now: number): Counters {
  const start = now - now % window
  const w = fields.get(`w${i}`)
  // A later window, which a clock ahead of `now` counted in: the request counts in it, the one before whole.
  if (w !== undefined && w > start + window && (w - start) % window === 0) {
    const prev = fields.get(`p${i}`)!
    return { start: w, prev, curr: fields.get(`c${i}`)!, next: 0, weighted: prev * window }
  }
  const [prev, curr, next] = w === start
    ? [fields.get(`p${i}`)!, fields.get(`c${i}`)!, 0]
    : w === start + window
      ? [fields.get(`o${i}`) ?? 0, fields.get(`p${i}`)!, fields.get(`c${i}`)!]
      : w === start - window ? [fields.get(`c${i}`)!, 0, 0] : [0, 0, 0]
  return { start, prev, curr, next, weighted: prev * (window - now + start) }
}

/**
 * Ms from `now` until a request of `cost` units fits, for one that does not fit now: later in this window as
 * the previous one's weight fades; or once this window's requests are the previous ones; or (the requests
 * waiting for the next window fill it) once those are.
 */
function fits ({ start, prev, curr, next }: Counters, max: number, window: number, cost: number, now: number): number {
  if (curr + next + cost <= max) return start + window - Math.floor((max - curr - next - cost) * window / prev) - now
  if (next === 0 || next + cost <= max) return start + 2 * window - Math.floor((max - next - cost) * window / curr) - now
  return start + 3 * window - Math.floor((max - cost) * window / next) - now
}

/** Limit `i` counts `curr` units in this window: in `c<i>`, or in `p<i>` while `w<i>` is the next window. */
function store ({ fields }: Fields, i: number, c: Counters, curr: number): void {
  if (c.next > 0) fields.set(`p${i}`, curr)
  else fields.set(`w${i}`, c.start).set(`p${i}`, c.prev).set(`c${i}`, curr)
}

export const slidingWindow: Step = {
  count (state, limits, now, peek, cost) {
    const hash = fieldsOf(state)
    let allowed = true
    const counters = limits.map(({ windowMs }, index) => current(hash, index + 1, windowMs, now))
    const entries = limits.map(({ max, windowMs: window }, index): Entry => {
      const c = counters[index]!
      const entry = { count: 0, reset: 0, retry: 0 }
      if (c.weighted + (c.curr + c.next + cost) * window > max * window) {
        entry.retry = fits(c, max, window, cost, now)
        allowed = false
      }
      return entry
    })

    let ttl = 0
    for (const [index, entry] of entries.entries()) {
      const { max, windowMs: window } = limits[index]!
      const c = counters[index]!
      if (allowed && !peek) {
        c.curr += cost
        store(hash, index + 1, c, c.curr)
        ttl = Math.max(ttl, c.start + (c.next > 0 ? 3 : 2) * window - now)
      }
      entry.count = c.curr + c.next + Math.floor((c.weighted + window - 1) / window)
      // One more unit than fits now: a request of that many more units than are left (one, when none are).
      entry.reset = entry.count === 0 ? 0 : fits(c, max, window, max - Math.min(entry.count, max) + 1, now)
    }
    if (ttl === 0) return { allowed, entries }
    hash.expiresAt = now + ttl
    return { allowed, entries, state: hash }
  },

  reserve (state, limits, now, cost, wait, maxQueue, entries) {
    // A denial leaves the counters: their windows as count read them.
    const hash = state as Fields
    const counters = limits.map(({ windowMs }, index) => current(hash, index + 1, windowMs, now))
    const at = now + wait
    // Each limit counts it in the window that holds `at`: this one, or the next, one window ahead at most.
    const ahead = limits.map(({ windowMs }, index) => at - at % windowMs - counters[index]!.start)
    const fits = limits.every(({ windowMs }, index) =>
      ahead[index] === 0 || (ahead[index] === windowMs && counters[index]!.next < maxQueue))
    if (!fits) return false
    let ttl = 0
    limits.forEach(({ windowMs }, index) => {
      const c = counters[index]!
      const i = index + 1
      const next = ahead[index] === 0 ? c.next : c.next + cost
      if (ahead[index] === 0) store(hash, i, c, c.curr + cost)
      else hash.fields.set(`w${i}`, c.start + windowMs).set(`p${i}`, c.curr).set(`c${i}`, next).set(`o${i}`, c.prev)
      ttl = Math.max(ttl, c.start + (next > 0 ? 3 : 2) * windowMs - now)
    })
    hash.expiresAt = now + ttl
    // What its limits will say when it is let through.
    entries.splice(0, entries.length, ...slidingWindow.count(hash, limits, at, true, 0).entries)
    return true
  },

  settle (state, limits, at, now, cost, final) {
    if (state === undefined) return undefined
    const { fields } = fieldsOf(state)
    const most = largest(limits)
    limits.forEach(({ max, windowMs: window }, index) => {
      const i = index + 1
      const start = at - at % window
      const w = fields.get(`w${i}`)
      // The window it was counted in: the latest, the one before it, or (requests wait for the next) the one before that.
      const name = w === start
        ? `c${i}`
        : w === start + window ? `p${i}` : w !== undefined && w === start + 2 * window && w > now ? `o${i}` : undefined
      const n = name === undefined ? undefined : fields.get(name)
      const ceiling = Math.min(max + most, Math.floor(2 ** 51 / window))
      if (name !== undefined && n !== undefined && n > 0) fields.set(name, n + moved(n, final - cost, ceiling))
    })
    return undefined
  }
}
