import { performance } from 'node:perf_hooks'
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import { decisionChannel } from '../channels.js'
import type { DecisionMessage } from '../channels.js'
import type { Decider } from '../decider.js'
import { formatDuration } from '../duration.js'
import { InvalidOptionError, ShedError } from '../errors.js'
import { DEFAULT_LEASE_MS } from '../options/concurrency.js'
import { PRIORITIES } from '../options/shed.js'
import type { ResolvedShed } from '../options/shed.js'
import type { ResolvedOptions } from '../options/resolved.js'
import { isPriority, priorityOf } from '../shed/priority.js'
import { Shedder } from '../shed/shedder.js'
import { Signals } from '../shed/signals.js'
import type { Priority, ShedReason } from '../shed-types.js'
import { PROBLEM_TYPE, unavailableProblem } from './problem.js'
import { watchHandler, workOf } from './work.js'

// The load shedder's stage, before every other: an `onRequest` hook for the whole app, ahead of the rate
// limits, so a request it sheds costs no budget and no Redis call. It classes the request (lib/shed/priority.ts),
// asks the shedder (lib/shed/shedder.ts), and either lets it in, counted in flight until its work is over (its
// handler and its response, as `concurrency` counts it: ./work.ts; an exempt request is not counted), or answers
// 503 at once: `Retry-After`, and `@fastify/rate-limit`-shaped JSON or, under `errorFormat: 'problem'`, the
// draft's `temporary-reduced-capacity` problem details. In shadow mode it reports and lets in what it would shed.

/** The 503 of a shed request: made once. */
interface Answer {
  readonly after: number
  readonly type: string
  readonly body: string
}

function answerOf (shed: ResolvedShed, opts: ResolvedOptions): Answer {
  const error = new ShedError(formatDuration(shed.retryAfter * 1000))
  return opts.route.errorFormat === 'problem'
    ? { after: shed.retryAfter, type: PROBLEM_TYPE, body: unavailableProblem(shed.retryAfter, error.message) }
    : {
        after: shed.retryAfter,
        type: 'application/json; charset=utf-8',
        body: JSON.stringify({ statusCode: 503, code: error.code, error: 'Service Unavailable', message: error.message })
      }
}

/** Sheds the app's requests under `opts.shed` (given): the hooks, the signals' timer, closed with the app. */
export function shedRequests (fastify: FastifyInstance, opts: ResolvedOptions, shed: ResolvedShed, decider: Decider): Shedder {
  const shedder = new Shedder(shed, performance.now())
  const signals = new Signals(shed, shedder, decider.replyTimes, opts.callbacks, fastify.log)
  fastify.addHook('onClose', async () => { signals.close() })
  const shadow = (shed.mode ?? (opts.route.mode === 'shadow' ? 'shadow' : 'enforce')) === 'shadow'
  const answer = answerOf(shed, opts)
  const report = reporter(opts, decider, shadow)
  fastify.addHook('onRoute', routeOptions => { watchRoute(routeOptions) })
  fastify.addHook('onRequest', (request, reply, done) => {
    const priority = priorityOf(request, shed.classify, opts.callbacks)
    // Exempt requests are outside the shedder: never shed, and never counted in flight, so slow health checks
    // take no place of the others', nor the critical class's reserve.
    if (priority === 'exempt') return done()
    const reason = shedder.decide(priority)
    if (reason !== null) {
      report(priority, reason, shedder)
      if (!shadow) {
        reply.code(503).header('retry-after', answer.after).type(answer.type).send(answer.body)
        return
      }
    }
    admit(shedder, request, reply)
    done()
  })
  return shedder
}

/** A route's `config.priority`, checked as it is added; its handler watched, so a request is in flight until it ends. */
function watchRoute (routeOptions: RouteOptions): void {
  const priority = (routeOptions.config as { priority?: unknown } | undefined)?.priority
  if (priority !== undefined && !isPriority(priority)) {
    throw new InvalidOptionError(`config.priority of ${routeOptions.url}`,
      `expected one of ${PRIORITIES.map(p => `'${p}'`).join(', ')}, ` +
      `got ${typeof priority === 'string' ? JSON.stringify(priority) : typeof priority}`)
  }
  routeOptions.handler = watchHandler(routeOptions.handler)
}

/** In flight from now until its work is over. */
function admit (shedder: Shedder, request: FastifyRequest, reply: FastifyReply): void {
  const at = performance.now()
  shedder.started()
  workOf(request, reply).add(() => { shedder.done(performance.now() - at, at) }, DEFAULT_LEASE_MS)
}

/** Counts a shed request and publishes it on the decision channel. */
function reporter (opts: ResolvedOptions, decider: Decider, shadow: boolean) {
  const outcome = shadow ? 'shadow-shed' : 'shed'
  return (priority: Priority, reason: ShedReason, shedder: Shedder): void => {
    decider.stats.count(outcome)
    if (!decisionChannel.hasSubscribers) return
    decisionChannel.publish({
      outcome,
      nameSpace: opts.nameSpace,
      budget: 'shed',
      algorithm: opts.route.algorithm,
      limit: undefined,
      cost: 1,
      redisMs: undefined,
      batchSize: undefined,
      keyHash: undefined,
      keyKind: 'none',
      mode: shadow ? 'shadow' : 'enforce',
      inFlight: shedder.inFlight,
      waitedMs: undefined,
      priority,
      reason
    } satisfies DecisionMessage)
  }
}
