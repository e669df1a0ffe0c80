import { fieldsOf, largest, moved } from './step.js'
import type { Entry, Fields, Limit, Step } from './step.js'

// The twin of `lua/token-bucket.lua`: GCRA, one theoretical arrival time (TAT) per limit, in ticks of
// 1/max ms so every step is an integer. A unit costs `windowMs` ticks; the bucket holds `burst × windowMs`.
// A limit's reset is the ms until one more unit is free than now: one token back, or (tokens in use past the
// bucket's size, after a settle charged more) the first of them back in the bucket.

// Below 2^53 (options.ts bounds max × window by 2^50), a float quotient is never rounded across an integer,
// so floor and ceil of a / b are exact, in Lua as here.
const ceildiv = (a: number, b: number): number => Math.ceil(a / b)

/**
 * Ms until one more unit is free than with `tat` ticks in use: the next token back, or (more in use than the
 * bucket holds, after a settle charged more) the first one back in the bucket; 0 when the bucket is full.
 */
function nextUnit (tat: number, { max, windowMs: window, burst }: Limit): number {
  return tat === 0 ? 0 : ceildiv(tat - (Math.min(ceildiv(tat, window), burst) - 1) * window, max)
}

function store ({ fields }: Fields, i: number, now: number, tat: number, max: number): void {
  const ms = Math.floor(tat / max)
  fields.set(`t${i}`, now + ms).set(`f${i}`, tat - ms * max)
}

/** Ticks from `now` until limit `i`'s bucket is full again (0: full). */
function ticksAhead ({ fields }: Fields, i: number, now: number, max: number): number {
  const at = fields.get(`t${i}`)
  return at === undefined ? 0 : Math.max(0, (at - now) * max + fields.get(`f${i}`)!)
}

export const tokenBucket: Step = {
  count (state, limits, now, peek, cost) {
    const hash = fieldsOf(state)
    let allowed = true
    const ahead: number[] = []
    const entries = limits.map(({ max, windowMs: window, burst }, index): Entry => {
      const tat = ticksAhead(hash, index + 1, now, max)
      const entry = { count: ceildiv(tat, window), reset: 0, retry: 0 }
      const over = tat + cost * window - burst * window
      if (over > 0) {
        entry.retry = ceildiv(over, max)
        allowed = false
      }
      ahead.push(tat)
      return entry
    })
    if (!allowed || peek) {
      entries.forEach((entry, index) => { entry.reset = nextUnit(ahead[index]!, limits[index]!) })
      return { allowed, entries }
    }

    let ttl = 0
    for (const [index, entry] of entries.entries()) {
      const { max, windowMs } = limits[index]!
      const tat = ahead[index]! + cost * windowMs
      // Allowed: no more than the bucket's size is in use, and some; one more unit is free once what is above
      // count - 1 has dripped out.
      entry.count = ceildiv(tat, windowMs)
      entry.reset = ceildiv(tat - (entry.count - 1) * windowMs, max)
      // The key lives until the bucket is full again.
      ttl = Math.max(ttl, ceildiv(tat, max))
      store(hash, index + 1, now, tat, max)
    }
    hash.expiresAt = now + ttl
    return { allowed, entries, state: hash }
  },

  reserve (state, limits, now, cost, wait, maxQueue, entries) {
    // A denial leaves a bucket: an empty one lets any request through that fits its size.
    const hash = state as Fields
    const ahead = limits.map(({ max }, index) => ticksAhead(hash, index + 1, now, max))
    // As in the script: not when a limit owes maxQueue units already.
    const owes = limits.some(({ windowMs, burst }, index) =>
      ahead[index]! - burst * windowMs > 0 && ceildiv(ahead[index]! - burst * windowMs, windowMs) >= maxQueue)
    if (owes) return false
    let ttl = 0
    limits.forEach(({ max, windowMs }, index) => {
      const tat = ahead[index]! + cost * windowMs
      ttl = Math.max(ttl, ceildiv(tat, max))
      store(hash, index + 1, now, tat, max)
    })
    hash.expiresAt = now + ttl
    // What its limits will say when it is let through.
    entries.splice(0, entries.length, ...tokenBucket.count(hash, limits, now + wait, true, 0).entries)
    return true
  },

  settle (state, limits, _at, now, cost, final) {
    const hash = fieldsOf(state)
    const delta = final - cost
    const most = largest(limits)
    let ttl = 0
    limits.forEach(({ max, windowMs, burst }, index) => {
      const i = index + 1
      const t = hash.fields.get(`t${i}`)
      if (t === undefined && delta <= 0) return
      const before = t === undefined ? 0 : Math.max(0, (t - now) * max + hash.fields.get(`f${i}`)!)
      const tat = before + moved(before, delta * windowMs, Math.min((burst + most) * windowMs, 2 ** 51))
      store(hash, i, now, tat, max)
      ttl = Math.max(ttl, ceildiv(tat, max))
    })
    // As the script: more taken, the bucket is full again later; less, its TTL is already long enough.
    if (delta > 0) hash.expiresAt = now + ttl
    return state === undefined && delta > 0 ? hash : undefined
  }
}
