// The app's clock, held still and moved by the test: `Date.now()` in this process, which the in-process store
// reads and `clock: 'app'` sends to Redis's scripts (Redis's own clock cannot be moved). While held, it reads
// the instant the test set, whatever the wall clock does, so a run's decisions fall at instants the test chose
// (across a calendar period's end, say) however slowly the machine runs; `release` gives the wall clock back.
// Timers (setTimeout, a wait under maxWait, a lease's renewal) run on real time either way.

const wall = Date.now.bind(Date)
let held: number | undefined

Date.now = () => held ?? wall()

export const appClock = {
  /** Holds the clock at `at` (ms since the epoch). */
  hold (at: number): void {
    held = at
  },
  /** Moves the held clock forward by `ms`. */
  advance (ms: number): number {
    if (held === undefined) throw new Error('the app clock is not held')
    held += ms
    return held
  },
  /** The clock's reading now. */
  now (): number {
    return Date.now()
  },
  /** The wall clock again. */
  release (): void {
    held = undefined
  }
}
