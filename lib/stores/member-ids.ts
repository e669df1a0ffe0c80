// A store's log members: the ids its calls give their requests, which the sliding log's entries and a denial's
// strikes hold, and a settlement names (lib/stores/redis.ts makes them; the scripts take a call's `base`).
import { randomBytes } from 'node:crypto'

/** The first of a store's member bases, 10^16 to 9 x 10^16 - 1: 17 digits, the first 1 to 8. */
const FIRST_BASE = 10n ** 16n
const BASES = 8n * FIRST_BASE

/**
 * A store's members' bases, one per call: a random 17-digit number, then one more for each call. Request i's
 * member, `<base><i>` (i from 1; a call holds at most 32), is then an integer of 18 or 19 digits below 2^63,
 * which a small sorted set keeps in 8 bytes (where text took one a character) and a set of strikes as an intset. Unique across a
 * store's calls (every base has 17 digits, so a member is read one way only) and across instances: two stores'
 * bases meet only when their random starts fall within as many calls of each other (1 in 4 x 10^7 for two stores
 * of a billion calls each), and then only where the same identity is decided by both under the same number.
 * Past 9 x 10^16 - 1 (8 x 10^16 calls: 2,500 years at a million a second) it starts again at 10^16.
 */
export function memberBases (): () => string {
  let next = FIRST_BASE + randomBytes(8).readBigUInt64BE() % BASES
  return () => {
    const base = next.toString()
    next = FIRST_BASE + (next - FIRST_BASE + 1n) % BASES
    return base
  }
}

/** The members a call made with `base` gives its `n` requests. */
export function members (base: string, n: number): string[] {
  return Array.from({ length: n }, (_, i) => `${base}${i + 1}`)
}
