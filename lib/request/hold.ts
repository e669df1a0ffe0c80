import type { FastifyReply, FastifyRequest } from 'fastify'
import { then } from '../awaitable.js'
import type { Decided } from './decide.js'
import { giveBack } from './decide.js'
import type { Plan } from './plan.js'

// Stage 4b, hold: under `concurrency`, a request its rate limits let through takes its slots (its cost in
// units) among its client's requests in flight on the budget (lib/leases.ts), and holds them until its
// response is over: sent, failed or aborted (the response's `close`). A request that finds them full is
// refused (429 `FST_RATE_GUARD_TOO_MANY_IN_FLIGHT`, `Retry-After: 1`; or a ban, which it may start), and what
// its rate limits counted is given back: a refused request costs no budget. Redis unable to answer in time is
// `failMode`'s, as for a decision: `open` goes on holding nothing, `closed` is a 503, `local` holds slots in
// process. In shadow mode the slots are shadow mode's own, and a refusal is let through.

export function hold (plan: Plan, request: FastifyRequest, reply: FastifyReply, decided: Decided): Decided | PromiseLike<Decided> {
  const { concurrency } = plan
  const { verdict, input } = decided
  // A request its rate limits refused never runs: it takes no slot.
  if (concurrency === null || (verdict.status !== 'allowed' && verdict.status !== 'unenforced')) return decided
  const slots = plan.leases.acquire({
    keys: input.keys,
    algorithm: input.algorithm,
    units: input.cost ?? 1,
    max: concurrency.max,
    leaseMs: concurrency.leaseMs,
    ban: input.ban,
    // A refusal strikes within the longest window of the request's limits (a rate denial, within its own).
    strikeWindowMs: Math.max(...input.limits.map(limit => limit.windowMs)),
    failMode: input.failMode
  }, request.log)
  return then(slots, ({ verdict: held, release }) => {
    if (release !== null) {
      reply.raw.once('close', release)
      // Its client may have left while the slots were taken.
      if (reply.raw.destroyed || reply.raw.writableFinished) release()
      return { ...decided, slots: held }
    }
    // Redis could not answer, and failMode 'open' lets the request through holding nothing.
    if (held.status === 'unenforced') return { ...decided, slots: held }
    for (const charged of decided.charged) giveBack(plan, charged, request.log)
    return { verdict: held, input, headers: plan.inFlightHeaders, charged: [], inFlight: true, slots: held }
  })
}
