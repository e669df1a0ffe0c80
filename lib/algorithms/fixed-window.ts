import { fieldsOf, keep, largest, moved } from './step.js'
import type { Entry, Fields, Limit, Step } from './step.js'

// The twin of `lua/fixed-window.lua`: per limit, a counter of the latest window (aligned to the epoch) it
// counts in. While requests wait for the next window (maxWait), that is the one `s<i>`/`c<i>` count, and `o<i>`
// holds this window's count.

/** Limit `i`'s window at `now`, as `current` in the script reads it from the stored fields. */
interface Window {
  start: number
  /** Units counted in it. */
  count: number
  /** Units waiting for the next window (`c<i>`, while `s<i>` is that window's start). */
  waiting: number
}

function current ({ fields }: Fields, i: number, windowMs: number, now: number): Window {
  const start = now - now % windowMs
  const s = fields.get(`s${i}`)
  if (s === start) return { start, count: fields.get(`c${i}`)!, waiting: 0 }
  if (s === start + windowMs) return { start, count: fields.get(`o${i}`) ?? 0, waiting: fields.get(`c${i}`)! }
  // A later window, which a clock ahead of `now` counted in: the request counts in it (never a reset).
  if (s !== undefined && s > start && (s - start) % windowMs === 0) {
    return { start: s, count: fields.get(`c${i}`)!, waiting: 0 }
  }
  return { start, count: 0, waiting: 0 }
}

/** Limit `i` counts `count` in `window`: in `c<i>`, or in `o<i>` while `s<i>` is the next window. */
function store ({ fields }: Fields, i: number, { start, waiting }: Window, count: number): void {
  if (waiting > 0) fields.set(`o${i}`, count)
  else fields.set(`s${i}`, start).set(`c${i}`, count)
}

function windowsOf (hash: Fields, limits: readonly Limit[], now: number): Window[] {
  return limits.map(({ windowMs }, index) => current(hash, index + 1, windowMs, now))
}

export const fixedWindow: Step = {
  count (state, limits, now, peek, cost) {
    const hash = fieldsOf(state)
    let allowed = true
    const windows = windowsOf(hash, limits, now)
    const entries = limits.map(({ max, windowMs }, index): Entry => {
      const { start, count: n, waiting } = windows[index]!
      const entry = { count: n, reset: n > 0 ? start + windowMs - now : 0, retry: 0 }
      if (n + cost > max) {
        // The next window; the one after when the requests waiting for the next fill it.
        entry.retry = start + windowMs - now + (waiting > 0 && waiting + cost > max ? windowMs : 0)
        allowed = false
      }
      return entry
    })
    if (!allowed || peek) return { allowed, entries }

    let ttl = 0
    for (const [index, entry] of entries.entries()) {
      const window = windows[index]!
      const { windowMs } = limits[index]!
      entry.count += cost
      entry.reset = window.start + windowMs - now
      ttl = Math.max(ttl, window.waiting > 0 ? entry.reset + windowMs : entry.reset)
      store(hash, index + 1, window, entry.count)
    }
    keep(hash, now, ttl)
    return { allowed, entries, state: hash }
  },

  reserve (state, limits, now, cost, wait, maxQueue, entries) {
    // A denial leaves the counters: their windows as count read them.
    const hash = state as Fields
    const windows = windowsOf(hash, limits, now)
    const at = now + wait
    // Each limit counts it in the window that holds `at`: the one it counts now, or the next, one window ahead at most.
    const ahead = limits.map(({ windowMs }, index) => at - at % windowMs - windows[index]!.start)
    const fits = limits.every(({ max, windowMs }, index) => {
      const { waiting } = windows[index]!
      return ahead[index] === 0 || (ahead[index] === windowMs && waiting < maxQueue && waiting + cost <= max)
    })
    if (!fits) return false
    let ttl = 0
    limits.forEach(({ windowMs }, index) => {
      const window = windows[index]!
      if (ahead[index] === 0) store(hash, index + 1, window, window.count + cost)
      else {
        hash.fields.set(`s${index + 1}`, window.start + windowMs).set(`c${index + 1}`, window.waiting + cost)
          .set(`o${index + 1}`, window.count)
      }
      ttl = Math.max(ttl, window.start + ahead[index]! + windowMs - now)
    })
    keep(hash, now, ttl)
    // What its limits will say when it is let through.
    entries.splice(0, entries.length, ...fixedWindow.count(hash, limits, at, true, 0).entries)
    return true
  },

  settle (state, limits, at, now, cost, final) {
    if (state === undefined) return undefined
    const { fields } = fieldsOf(state)
    const most = largest(limits)
    limits.forEach((limit, index) => {
      const i = index + 1
      const start = at - at % limit.windowMs
      const s = fields.get(`s${i}`)
      // Counted in the window counted, or in this window while requests wait for the next (o<i>).
      const name = s === start ? `c${i}` : s !== undefined && s === start + limit.windowMs && s > now ? `o${i}` : undefined
      const n = name === undefined ? undefined : fields.get(name)
      const ceiling = Math.min(limit.max + most, Math.max(limit.max, 2 ** 52))
      if (name !== undefined && n !== undefined && n > 0) fields.set(name, n + moved(n, final - cost, ceiling))
    })
    return undefined
  }
}
