/** mulberry32: a small, seedable PRNG, so a failing run can be replayed from its printed seed. */
export function prng (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

/** Draws from one seed: a float, an integer in [lo, hi], an item, and ms on a 10 ms grid (off it with `offGrid`'s odds, or the call's). */
export interface Draws {
  random: () => number
  int: (lo: number, hi: number) => number
  pick: <T>(items: readonly T[]) => T
  /** Times on a 10 ms grid, so steps land where windows, tokens, bans and overrides end: the edges where two implementations part. */
  ms: (lo: number, hi: number, odds?: number) => number
}

export function draws (seed: number, offGrid: number): Draws {
  const random = prng(seed)
  const int = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1))
  return {
    random,
    int,
    pick: <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!,
    ms: (lo, hi, odds = offGrid) => random() < odds ? int(lo, hi) : 10 * int(Math.ceil(lo / 10), Math.floor(hi / 10))
  }
}
