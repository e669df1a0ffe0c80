import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Outcome } from '../channels.js'
import { writeHeaders } from '../headers.js'
import { SENT } from './state.js'
import type { Decided, HookResult, RequestState, Step } from './state.js'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'
import { refuse } from './refusal.js'
import { report } from './report.js'

// Stage 5, respond: a verdict made an answer. Allowed: the headers, and on its way. Not decided: through
// (`failMode: 'open'`, marked) or a 503 sent here. Refused: the headers, the app's callbacks, and the error the
// app's error handler shapes (./refusal.ts); in shadow mode, decided as enforce would and let through.

/** The header that says a request went through because Redis could not decide (`failMode: 'open'`). */
const UNENFORCED_HEADER = 'x-ratelimit-enforced'
/** The header that says a request waited before it went on (`maxWait`), and for how many ms. */
const WAITED_HEADER = 'x-ratelimit-waited-ms'

/** What `onExceeded` is told: whether the request was let through all the same (shadow mode). */
export const SHADOW = Object.freeze({ shadow: true })
const ENFORCED = Object.freeze({ shadow: false })

/** The respond stage: what the decision on the request comes to, as its `result`. */
export function respond (state: RequestState): Step {
  state.result = answer(state.plan, state.request, state.reply!, state.given, state.decided!)
  return undefined
}

function answer (plan: Plan, request: FastifyRequest, reply: FastifyReply, key: Given, decided: Decided): HookResult {
  const { verdict, input, headers, inFlight, roomFull, slots } = decided
  const { route } = plan
  // Under `concurrency`, the units in flight after its slots were asked for.
  const inUse = slots !== undefined && 'count' in slots ? slots.count : undefined
  switch (verdict.status) {
    case 'allowed':
      report(plan, 'allowed', key, verdict, input, headers, inUse)
      writeHeaders(reply, headers, verdict)
      // Its rate limits decided, its slots not (Redis missed their deadline, failMode 'open'): not all enforced.
      if (slots?.status === 'unenforced') reply.header(UNENFORCED_HEADER, 'false')
      // In shadow mode nothing waits (./wait.ts): the channel alone says what enforce would have waited.
      if (verdict.waitMs !== undefined && route.mode !== 'shadow') reply.header(WAITED_HEADER, verdict.waitMs)
      route.onExceeding?.(request, key as string)
      return undefined
    case 'unenforced':
      report(plan, 'unenforced', key, verdict, input, headers, inUse)
      reply.header(UNENFORCED_HEADER, 'false')
      return undefined
    case 'unavailable':
      report(plan, 'unavailable', key, verdict, input, headers, inUse)
      reply.code(503).header('retry-after', plan.unavailable.after).type(plan.unavailable.type).send(plan.unavailable.body)
      return SENT
  }

  const banned = verdict.status === 'banned'
  // A limited request with no wait costs more than a limit holds: it never passes.
  const never = !banned && verdict.retryMs === 0
  if (route.mode === 'shadow') {
    // Decided as enforce would, and let through: the client sees an allowed request's headers.
    report(plan, banned ? (verdict.banStarted ? 'shadow-ban-started' : 'shadow-banned') : 'shadow-limited',
      key, verdict, input, headers, inUse)
    writeHeaders(reply, headers, { ...verdict, status: 'allowed' })
    route.onExceeded?.(request, key as string, SHADOW)
    if (verdict.banStarted) {
      route.onBanReach?.(request, key as string, { durationMs: verdict.retryMs, offence: verdict.offence, shadow: true })
    }
    return undefined
  }
  const outcome: Outcome = banned
    ? (verdict.banStarted ? 'ban-started' : 'banned')
    : never ? 'too-costly' : inFlight === true ? 'in-flight' : roomFull === true ? 'waiting-full' : 'limited'
  report(plan, outcome, key, verdict, input, headers, inUse)
  writeHeaders(reply, headers, verdict)
  route.onExceeded?.(request, key as string, ENFORCED)
  if (verdict.banStarted) {
    route.onBanReach?.(request, key as string, { durationMs: verdict.retryMs, offence: verdict.offence, shadow: false })
  }
  return refuse(plan, request, verdict, outcome, input, headers)
}
