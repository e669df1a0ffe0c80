import type { FastifyReply, FastifyRequest } from 'fastify'
import { longest } from '../algorithms/index.js'
import { andThen } from '../awaitable.js'
import type { Decided } from './decide.js'
import { giveBack } from './decide.js'
import type { Plan } from './plan.js'
import { workOf } from './work.js'

// Stage 4b, hold: under `concurrency`, a request its rate limits let through takes its slots (its cost in
// units) among its client's requests in flight on the budget (lib/leases.ts), and holds them until its work
// is over: its handler and its response, whichever ends later, never merely its client's hang-up (./work.ts).
// A request that finds them full is refused (429 `FST_RATE_GUARD_TOO_MANY_IN_FLIGHT`, `Retry-After: 1`; or a
// ban, which it may start), and what its rate limits counted is given back: a refused request costs no budget.
// Redis unable to answer in time is `failMode`'s, as for a decision: `open` goes on holding nothing, `closed`
// is a 503, `local` holds slots in process (held by the same rule); a request whose rate limits Redis did not
// decide is not asked of it again (one deadline a request, not two). In shadow mode the slots are shadow
// mode's own, held by the same rule, and a refusal is let through.

export function hold (plan: Plan, request: FastifyRequest, reply: FastifyReply, decided: Decided): Decided | PromiseLike<Decided> {
  const { concurrency } = plan
  const { verdict, input } = decided
  // A request its rate limits refused never runs: it takes no slot. One let through unenforced (Redis did not
  // decide, failMode 'open') holds none: nothing of it is enforced, and Redis is not asked a second time.
  if (concurrency === null || verdict.status !== 'allowed') return decided
  const slots = plan.leases.acquire({
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
  }, request.log)
  return andThen(slots, ({ verdict: held, release }) => {
    if (release !== null) {
      workOf(request, reply).add(release, concurrency.leaseMs)
      return { ...decided, slots: held }
    }
    // Redis could not answer in time for its slots, and failMode 'open' lets the request through holding nothing.
    if (held.status === 'unenforced') return { ...decided, slots: held }
    for (const charged of decided.charged) giveBack(plan, charged, request.log)
    return { verdict: held, input, headers: plan.inFlightHeaders, charged: [], inFlight: true, slots: held }
  })
}
