import { fieldsOf, largest, moved } from './step.js'
import type { Entry, Fields, Limit, Step } from './step.js'

// The twin of `lua/fixed-window.lua`: per limit, a counter of the window (aligned to the epoch) it counts in,
// and, while requests wait for the window after it (maxWait), their units (`n<i>`).

/** Limit `i`'s window at `now`, as `current` in the script reads it from the stored fields. */
interface Window {
  start: number
  /** Units counted in it: the stored count, or the units that waited for it once it has come. */
  count: number
  /** Units waiting for the window after it. */
  waiting: number
  /** The stored `n<i>` was for a window now over or begun: it goes with the next write. */
  stale: boolean
}

function current ({ fields }: Fields, i: number, windowMs: number, now: number): Window {
  const start = now - now % windowMs
  const s = fields.get(`s${i}`)
  const waiting = fields.get(`n${i}`)
  const stale = waiting !== undefined && s !== start
  if (s === start) return { start, count: fields.get(`c${i}`)!, waiting: waiting ?? 0, stale }
  return { start, count: s === start - windowMs ? waiting ?? 0 : 0, waiting: 0, stale }
}

/** Limit `i` counts `count` in `window` (and `waiting` for the one after it, when some wait). */
function store ({ fields }: Fields, i: number, { start, stale }: Window, count: number, waiting?: number): void {
  fields.set(`s${i}`, start).set(`c${i}`, count)
  if (waiting !== undefined) fields.set(`n${i}`, waiting)
  else if (stale) fields.delete(`n${i}`)
}

/**
 * Keeps the hash at least `ttl` ms more, as the script does: a TTL already that long stays; a shorter one (or a new
 * hash's) is set past it by up to a second (at most `ttl`), the slack the script gives for its clock and PTTL.
 */
function keep (hash: Fields, now: number, ttl: number): void {
  if (hash.expiresAt - now < ttl) hash.expiresAt = now + ttl + Math.min(ttl, 1000)
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
      else store(hash, index + 1, window, window.count, window.waiting + cost)
      ttl = Math.max(ttl, window.start + ahead[index]! + windowMs - now)
    })
    keep(hash, now, ttl)
    // What its limits will say when it is let through.
    entries.splice(0, entries.length, ...fixedWindow.count(hash, limits, at, true, 0).entries)
    return true
  },

  settle (state, limits, at, _now, cost, final) {
    if (state === undefined) return undefined
    const { fields } = fieldsOf(state)
    const most = largest(limits)
    limits.forEach((limit, index) => {
      const i = index + 1
      const start = at - at % limit.windowMs
      const s = fields.get(`s${i}`)
      // Counted in the window counted, or, waiting for the one after it, in n<i>.
      const name = s !== undefined && s + limit.windowMs === start ? `n${i}` : s === start ? `c${i}` : undefined
      const n = name === undefined ? undefined : fields.get(name)
      const ceiling = Math.min(limit.max + most, Math.max(limit.max, 2 ** 52))
      if (name !== undefined && n !== undefined && n > 0) fields.set(name, n + moved(n, final - cost, ceiling))
    })
    return undefined
  }
}
