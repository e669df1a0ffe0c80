// How much random traffic a run explores. `npm test` plays every fixed seed in full (each chosen because its
// traffic reaches every kind of answer, so agreement means something) and one fresh seed a run, played short:
// a new corner each run at a quarter of the cost. FULL=1 plays the fresh seeds in full too, and the sweeps
// kept for it (a year of every time zone, every bench variant): before a release, or after changing an
// algorithm.

/** FULL=1: the long runs too. */
export const FULL = process.env.FULL === '1'

/**
 * The steps (or ticks) a seeded run takes: all of `steps` for a fixed seed (`fixed`) or under FULL=1, a
 * quarter for a fresh one.
 */
export function stepsFor (steps: number, fixed: boolean): number {
  return fixed || FULL ? steps : Math.ceil(steps / 4)
}
