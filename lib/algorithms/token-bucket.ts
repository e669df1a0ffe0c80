import { fieldsOf } from './step.js'
import type { Entry, Fields, Step } from './step.js'

/**
 * The twin of `lua/token-bucket.lua`: GCRA, one theoretical arrival time (TAT) per limit, in ticks of
 * 1/max ms so every step is an integer. A request costs `windowMs` ticks; the bucket holds `burst × windowMs`.
 */

/** `a = q × b + r` with `0 <= r < b`, exact below 2^53, as the script computes it. */
function divmod (a: number, b: number): [number, number] {
  const q = Math.floor(a / b)
  const r = a - q * b
  if (r < 0) return [q - 1, r + b]
  if (r >= b) return [q + 1, r - b]
  return [q, r]
}

function ceildiv (a: number, b: number): number {
  const [q, r] = divmod(a, b)
  return r > 0 ? q + 1 : q
}

function store ({ fields }: Fields, i: number, now: number, tat: number, max: number): void {
  const [ms, ticks] = divmod(tat, max)
  fields.set(`t${i}`, now + ms).set(`f${i}`, ticks)
}

export const tokenBucket: Step = {
  count (state, limits, now, peek) {
    const hash = fieldsOf(state)
    const { fields } = hash
    let allowed = true
    const ahead: number[] = []
    const entries = limits.map(({ max, windowMs: window, burst }, index): Entry => {
      const i = index + 1
      // Ticks from now until the bucket is full again (0: full).
      const at = fields.get(`t${i}`)
      const tat = at === undefined ? 0 : Math.max(0, (at - now) * max + fields.get(`f${i}`)!)
      const entry = { count: ceildiv(tat, window), reset: ceildiv(tat, max), retry: 0 }
      const over = tat + window - burst * window
      if (over > 0) {
        entry.retry = ceildiv(over, max)
        allowed = false
      }
      ahead.push(tat)
      return entry
    })
    if (!allowed || peek) return { allowed, entries }

    let ttl = 0
    for (const [index, entry] of entries.entries()) {
      const { max, windowMs } = limits[index]!
      const tat = ahead[index]! + windowMs
      entry.count = ceildiv(tat, windowMs)
      entry.reset = ceildiv(tat, max)
      ttl = Math.max(ttl, entry.reset)
      store(hash, index + 1, now, tat, max)
    }
    hash.expiresAt = now + ttl
    return { allowed, entries, state: hash }
  },

  undo (state, limits, at, now) {
    const hash = fieldsOf(state)
    limits.forEach(({ max, windowMs }, index) => {
      const i = index + 1
      const t = hash.fields.get(`t${i}`)
      if (t !== undefined) store(hash, i, now, Math.max(0, (t - now) * max + hash.fields.get(`f${i}`)! - windowMs), max)
    })
  }
}
