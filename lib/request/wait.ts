import { LEFT, REFUSED } from './state.js'
import type { RequestState, Step } from './state.js'

// Stage 4a, wait: a request its limits let through after a wait (`maxWait`, lib/options/wait.ts) waits here
// for it, its place already counted at the wait's end, and goes on to hold and respond once it is over; its
// limits are reported as they stand then (the stores fill them so). A client that leaves meanwhile (the
// response's `close`) has left (`LEFT`): the pipeline gives its place back, and its request goes no further: it
// ends as one left before its handler under `refundAborted` does (499 `FST_RATE_GUARD_ABANDONED`, which nobody
// reads). In shadow mode nothing waits: the decision says what enforce would have done.
//
// Every budget of a registration waits in one room of `maxWaiting` places (./waiting-room.ts): a request that
// would wait when they are all taken is refused at once (429 `FST_RATE_GUARD_TOO_MANY_WAITING`), what it
// counted given back as a leaving client's is, and strikes toward no ban: the room is filled by every client
// of the process, not by this one alone. Its `Retry-After` is its own wait: by then its limits let it through
// without the room.

/** What a wait with no response to watch listens to: nothing ever closes it. */
const QUIET = Object.freeze({ destroyed: false, once: () => {}, off: () => {} })

export function wait (state: RequestState): Step | Promise<Step> {
  const { plan } = state
  const decided = state.decided!
  const { verdict } = decided
  if (verdict.status !== 'allowed' || verdict.waitMs === undefined || plan.route.mode === 'shadow') return undefined
  const { waitMs, ...now } = verdict
  if (!plan.room.enter()) {
    // Refused as its limits would refuse it without `maxWait`: until its wait is over (its count the one it saw).
    state.decided = { ...decided, verdict: { ...now, status: 'limited', retryMs: waitMs }, roomFull: true }
    return REFUSED
  }
  // A budget spent by hand (./spend.ts) has no response to watch: its wait ends with its timer.
  const raw = state.reply?.raw ?? QUIET
  return new Promise(resolve => {
    const left = (): void => {
      clearTimeout(timer)
      plan.room.leave()
      resolve(LEFT)
    }
    // A timer fires no earlier than its delay, but Node counts it in whole ms from its loop's time: one more
    // keeps the request from going before the place it was counted at.
    const timer = setTimeout(() => {
      raw.off('close', left)
      plan.room.leave()
      resolve(undefined)
    }, waitMs + 1)
    raw.once('close', left)
    if (raw.destroyed) left()
  })
}
