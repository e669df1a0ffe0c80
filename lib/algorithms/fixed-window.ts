import { fieldsOf, largest, moved } from './step.js'
import type { Entry, Step } from './step.js'

// The twin of `lua/fixed-window.lua`: per limit, a counter of the window (aligned to the epoch) it counts in.

export const fixedWindow: Step = {
  count (state, limits, now, peek, cost) {
    const hash = fieldsOf(state)
    const { fields } = hash
    let allowed = true
    const starts: number[] = []
    const entries = limits.map((limit, index): Entry => {
      const i = index + 1
      const start = now - now % limit.windowMs
      const n = fields.get(`s${i}`) === start ? fields.get(`c${i}`)! : 0
      const entry = { count: n, reset: n > 0 ? start + limit.windowMs - now : 0, retry: 0 }
      if (n + cost > limit.max) {
        entry.retry = start + limit.windowMs - now
        allowed = false
      }
      starts.push(start)
      return entry
    })
    if (!allowed || peek) return { allowed, entries }

    let ttl = 0
    for (const [index, entry] of entries.entries()) {
      entry.count += cost
      entry.reset = starts[index]! + limits[index]!.windowMs - now
      ttl = Math.max(ttl, entry.reset)
      fields.set(`s${index + 1}`, starts[index]!).set(`c${index + 1}`, entry.count)
    }
    // As the script: a TTL already that long stays; a shorter one (or a new hash's) is set past the window's end
    // by up to a second (at most the time left), the slack the script gives for its clock and PTTL.
    if (hash.expiresAt - now < ttl) hash.expiresAt = now + ttl + Math.min(ttl, 1000)
    return { allowed, entries, state: hash }
  },

  settle (state, limits, at, _now, cost, final) {
    if (state === undefined) return undefined
    const { fields } = fieldsOf(state)
    const most = largest(limits)
    limits.forEach((limit, index) => {
      const i = index + 1
      const n = fields.get(`c${i}`)!
      const ceiling = Math.min(limit.max + most, Math.max(limit.max, 2 ** 52))
      if (fields.get(`s${i}`) === at - at % limit.windowMs && n > 0) fields.set(`c${i}`, n + moved(n, final - cost, ceiling))
    })
    return undefined
  }
}
