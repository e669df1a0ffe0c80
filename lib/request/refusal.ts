import { STATUS_CODES } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { isBan } from '../channels.js'
import type { Outcome } from '../channels.js'
import { formatDuration } from '../duration.js'
import {
  BannedError, InvalidOptionError, TooCostlyError, TooManyInFlightError, TooManyRequestsError, TooManyWaitingError
} from '../errors.js'
import { retryAfterSeconds } from '../headers.js'
import type { Decidable, Decision } from '../stores/store.js'
import type { Plan } from './plan.js'
import { hashOf } from './report.js'
import { PROBLEM_TYPE, refusalProblem } from './problem.js'
import type { HeaderStyle } from '../headers.js'

// The error a refused request is handed to Fastify with: this plugin's (429, 403, or 429 "never" for a request
// costing more than a limit holds), or the app's `errorResponseBuilder`'s; and, after Fastify's default error
// handler made its body, the body as `@fastify/rate-limit` writes it (`stripCode`). Refusals are passed to
// `done`, never thrown: a throw inside an async function costs V8 several microseconds, more than the rest
// of the refusal.

export function refuse (
  plan: Plan, request: FastifyRequest, verdict: Decision, outcome: Outcome, input: Decidable, headers: HeaderStyle
): Error {
  const { route, budget } = plan
  if (route.mode === 'report') {
    request.log.info({ rateGuard: { outcome, budget: budget.name, keyHash: hashOf(input) } }, 'rate-guard: refused')
  }
  const banned = isBan(outcome)
  const never = outcome === 'too-costly'
  const after = never ? 'never' : formatDuration(retryAfterSeconds(verdict.retryMs) * 1000)
  const statusCode = banned ? 403 : 429
  if (route.errorResponseBuilder === undefined) {
    const error = banned
      ? new BannedError(after)
      : never ? new TooCostlyError() : outcome === 'in-flight' ? new TooManyInFlightError() : refusedFor(outcome, after)
    // Its problem details, for `stripCode` to send instead of the default body (never serialized with the error).
    if (route.errorFormat === 'problem') {
      Object.defineProperty(error, PROBLEM, { value: refusalProblem(verdict, input.cost ?? 1, headers, statusCode, error.message) })
    }
    return kept(request, error)
  }
  const error: unknown = route.errorResponseBuilder(request, { statusCode, ban: banned, max: verdict.limit, ttl: verdict.retryMs, after })
  if (typeof error !== 'object' || error === null) {
    return new InvalidOptionError('errorResponseBuilder', `expected it to return an object, got ${error === null ? 'null' : typeof error}`)
  }
  (error as { statusCode?: number }).statusCode ??= statusCode
  return error as Error
}

/** A refusal of the rate limits, or of the registration's room for waiting requests (`maxWaiting`). */
function refusedFor (outcome: Outcome, after: string): Error {
  return outcome === 'waiting-full' ? new TooManyWaitingError(after) : new TooManyRequestsError(after)
}

/**
 * Where a refusal made here is kept on its request, for `stripCode`: Fastify's default error handler writes an
 * error's `code` into the body, and `@fastify/rate-limit`'s bodies are `{ statusCode, error, message }`.
 */
export const REFUSAL = Symbol('rate-guard.refusal')
/** Where a refusal keeps its problem details under `errorFormat: 'problem'`. */
const PROBLEM = Symbol('rate-guard.problem')

function kept (request: FastifyRequest, error: Error): Error {
  (request as unknown as Record<symbol, Error | null>)[REFUSAL] = error
  return error
}

/**
 * An `onSend` hook: the body Fastify's default error handler made of a refusal of this plugin, without its
 * `code`, so it is byte for byte `@fastify/rate-limit`'s; the code stays on the error an app's error handler
 * gets (`err.code`). Under `errorFormat: 'problem'`, its problem details instead. Any other payload (an app's
 * error handler's own) goes out untouched.
 */
export function stripCode (
  request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void
): void {
  const error = (request as unknown as Record<symbol, (Error & { statusCode: number, code: string, [PROBLEM]?: string }) | null>)[REFUSAL]
  if (error == null || typeof payload !== 'string') return done(null, payload)
  const { statusCode, code, message } = error
  const bodies = bodiesOf(statusCode, code, message)
  if (payload !== bodies.coded) return done(null, payload)
  const problem = error[PROBLEM]
  if (problem === undefined) return done(null, bodies.stripped)
  reply.type(PROBLEM_TYPE)
  done(null, problem)
}

/** A refusal's body as Fastify's default error handler writes it (`coded`), and without its code (`stripped`). */
interface Bodies {
  readonly statusCode: number
  readonly message: string
  readonly coded: string
  readonly stripped: string
}

/**
 * The last bodies made, by code: a flood of refusals (a hot key, banned clients) is one message for a second
 * or more (`retry in 7 seconds`), so its bodies are made once, not once a refusal. One entry per code: this
 * plugin's three, unless an app's error handler rewrites `err.code`, so at most `MOST_CODES` are kept.
 */
const LAST = new Map<string, Bodies>()
const MOST_CODES = 8

function bodiesOf (statusCode: number, code: string, message: string): Bodies {
  const last = LAST.get(code)
  if (last !== undefined && last.message === message && last.statusCode === statusCode) return last
  const head = `{"statusCode":${statusCode}`
  const tail = `,"error":${JSON.stringify(STATUS_CODES[statusCode])},"message":${JSON.stringify(message)}}`
  const made = { statusCode, message, coded: `${head},"code":${JSON.stringify(code)}${tail}`, stripped: head + tail }
  if (LAST.size >= MOST_CODES && last === undefined) LAST.clear()
  LAST.set(code, made)
  return made
}
