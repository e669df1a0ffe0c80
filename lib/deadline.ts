import { DeadlineError } from './errors.js'

// A deadline that measures Redis, not the app's own event loop.
//
// A timer fires in the timers phase, before the poll phase reads what is waiting in the sockets: under a busy
// loop (a CPU-bound handler, many connections) Redis's reply may have been sitting in the socket for a long
// time when the timer finally runs. So a deadline that fires first gives the poll phase one turn
// (`setImmediate` runs right after it): a reply that reached the process is used, however late the loop gets
// to it, and only a reply that really has not arrived misses the deadline.

/** The longest deadline (ms): Node fires a timer of more than 2^31 - 1 ms after 1 ms; a limiter waits far less. */
export const MAX_DEADLINE = 60_000

/**
 * Calls `missed` once `ms` have passed and the poll phase has had its turn since, unless `cancel` is called
 * first. Returns `cancel`.
 */
export function onDeadline (ms: number, missed: () => void): () => void {
  let immediate: NodeJS.Immediate | undefined
  const timer = setTimeout(() => { immediate = setImmediate(missed) }, ms)
  return () => {
    clearTimeout(timer)
    if (immediate !== undefined) clearImmediate(immediate)
  }
}

/** `promise`, or a DeadlineError once `ms` have passed without its answer reaching the process (see above). */
export function deadline<T> (promise: Promise<T> | T, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const cancel = onDeadline(ms, () => reject(new DeadlineError(ms)))
    Promise.resolve(promise).then(value => {
      cancel()
      resolve(value)
    }, (err: unknown) => {
      cancel()
      reject(err)
    })
  })
}
