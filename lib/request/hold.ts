import { longest } from '../algorithms/index.js'
import { andThenWith } from '../awaitable.js'
import type { Slots } from '../leases.js'
import { REFUSED } from './state.js'
import type { RequestState, Step } from './state.js'
import { workOf } from './work.js'

// Stage 4b, hold: under `concurrency`, a request its rate limits let through takes its slots (its cost in
// units) among its client's requests in flight on the budget (lib/leases.ts), and holds them until its work
// is over: its handler and its response, whichever ends later, never merely its client's hang-up (./work.ts).
// A request that finds them full is refused (429 `FST_RATE_GUARD_TOO_MANY_IN_FLIGHT`, `Retry-After: 1`; or a
// ban, which it may start), and the pipeline gives back what its rate limits counted: a refused request costs
// no budget. Redis unable to answer in time is `failMode`'s, as for a decision: `open` goes on holding nothing,
// `closed` is a 503, `local` holds slots in process (held by the same rule); a request whose rate limits Redis
// did not decide is not asked of it again (one deadline a request, not two). In shadow mode the slots are
// shadow mode's own, held by the same rule, and a refusal is let through.

export function hold (state: RequestState): Step | PromiseLike<Step> {
  const { concurrency } = state.plan
  const { verdict, input } = state.decided!
  // A request its rate limits refused never runs: it takes no slot. One let through unenforced (Redis did not
  // decide, failMode 'open') holds none: nothing of it is enforced, and Redis is not asked a second time.
  if (concurrency === null || verdict.status !== 'allowed') return undefined
  const slots = state.plan.leases.acquire({
    keys: input.keys,
    algorithm: input.algorithm,
    units: input.cost ?? 1,
    max: concurrency.max,
    leaseMs: concurrency.leaseMs,
    ban: input.ban,
    // A refusal strikes within the longest window of the request's limits (a rate denial, within its own).
    strikeWindowMs: longest(input.limits),
    failMode: input.failMode,
    // Decided in process (a decision there names no member, as `Decider.settle` reads it): by the in-process
    // store, or by its twin under failMode 'local' while Redis fails.
    failed: verdict.member === ''
  }, state.request.log)
  return andThenWith(state, slots, held)
}

function held (state: RequestState, { verdict: slots, release }: Slots): Step {
  const { plan } = state
  const decided = state.decided!
  if (release !== null) {
    workOf(state.request, state.reply!).add(release, plan.concurrency!.leaseMs)
    state.decided = { ...decided, slots }
    return undefined
  }
  // Redis could not answer in time for its slots, and failMode 'open' lets the request through holding nothing.
  if (slots.status === 'unenforced') {
    state.decided = { ...decided, slots }
    return undefined
  }
  state.decided = { verdict: slots, input: decided.input, headers: plan.inFlightHeaders, inFlight: true, slots }
  return REFUSED
}
