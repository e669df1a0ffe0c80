import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Decided } from './decide.js'
import { giveBack } from './decide.js'
import type { Plan } from './plan.js'

// Stage 4a, wait: a request its limits let through after a wait (`maxWait`, lib/options/wait.ts) waits here
// for it, its place already counted at the wait's end, and goes on to hold and respond once it is over; its
// limits are reported as they stand then (the stores fill them so). A client that leaves meanwhile (the
// response's `close`) gives its place back, and its request goes no further: it ends as one left before its
// handler under `refundAborted` does (499 `FST_RATE_GUARD_ABANDONED`, which nobody reads). In shadow mode
// nothing waits: the decision says what enforce would have done.

/** A request whose client left while it waited: it goes no further. */
export const LEFT = Symbol('left while waiting')

export function wait (plan: Plan, request: FastifyRequest, reply: FastifyReply, decided: Decided): Decided | Promise<Decided | typeof LEFT> {
  const { verdict } = decided
  if (verdict.status !== 'allowed' || verdict.waitMs === undefined || plan.route.mode === 'shadow') return decided
  const { waitMs } = verdict
  const raw = reply.raw
  return new Promise(resolve => {
    const left = (): void => {
      clearTimeout(timer)
      for (const charged of decided.charged) giveBack(plan, charged, request.log)
      resolve(LEFT)
    }
    // A timer fires no earlier than its delay, but Node counts it in whole ms from its loop's time: one more
    // keeps the request from going before the place it was counted at.
    const timer = setTimeout(() => {
      raw.off('close', left)
      resolve(decided)
    }, waitMs + 1)
    raw.once('close', left)
    if (raw.destroyed) left()
  })
}
