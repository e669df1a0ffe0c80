import type { FastifyReply, FastifyRequest } from 'fastify'
import { remainingOf, seconds } from './headers.js'
import type { Given } from './request/identify.js'
import type { BudgetHooks } from './request/pipeline.js'
import { unavailableError } from './request/plan.js'
import { SENT } from './request/state.js'
import type { Verdict } from './stores/store.js'
import type { HeldSlots, SpendOptions, Spent } from './request/spend.js'
import { InvalidOptionError } from './errors.js'

// `fastify.rateLimit(options?)` and `fastify.createRateLimit(options?)`, as `@fastify/rate-limit` has them:
// limiters an app applies where it chooses (a not-found handler, a check inside a handler). Without options
// they count on the plugin-wide budget; each made with options counts on a budget of its own.

/**
 * What `createRateLimit`'s check answers (`@fastify/rate-limit`'s fields; `isAllowed` means allow-listed). `key`
 * is the key as the app's key generator returned it (typed a string, as theirs: a number stays a number).
 */
export type RateLimitResult =
  | { isAllowed: true, key: string }
  | {
    isAllowed: false
    key: string
    /** The binding limit's capacity and window (ms). */
    max: number
    timeWindow: number
    remaining: number
    /** Ms until the request would pass (refused), or until the binding limit's count starts falling (allowed). */
    ttl: number
    ttlInSeconds: number
    /** The request was refused; with `increment: false`, which counts nothing, the next counted request would be. */
    isExceeded: boolean
    isBanned: boolean
  }

export type RateLimitCheck = (request: FastifyRequest, options?: { increment?: boolean }) => Promise<RateLimitResult>
export type RateLimitHandler = (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply | undefined>

/**
 * Limiters (fastify.rateLimit()) whose budget has `concurrency`: a route they are placed on has its handler
 * watched (lib/routes.ts).
 */
const HOLDING = new WeakSet<object>()

/** Whether `hook` is a limiter whose requests may hold slots. */
export function holdsSlots (hook: unknown): boolean {
  return typeof hook === 'function' && HOLDING.has(hook)
}

/**
 * A budget the app spends by hand (`fastify.rateGuard.budget(options)`): for what is not one HTTP request a
 * unit (a GraphQL operation's cost, a WebSocket message, a connection held open). Made once, at start.
 */
export interface RateGuardBudget {
  /** Counts `cost` units (default 1) for the request's client, or a key under it, and answers; never throws for a refusal. */
  spend (request: FastifyRequest, options?: SpendOptions): Promise<Spent>
  /** Under the budget's `concurrency`: takes `cost` slots (default 1) until `release()`. */
  hold (request: FastifyRequest, options?: SpendOptions): Promise<HeldSlots>
}

export interface LimiterDecorators {
  rateLimit (options?: object): RateLimitHandler
  createRateLimit (options?: object): RateLimitCheck
  budget (options?: object): RateGuardBudget
}

/** `hooksFor(options, call)`: the hooks of the budget `options` make (the plugin-wide one without). */
export function createLimiters (timeout: number, hooksFor: (options: unknown, call: string) => BudgetHooks): LimiterDecorators {
  return {
    rateLimit (options) {
      const { run, holds } = hooksFor(options, 'rateLimit')
      // Async, as theirs: usable as any hook, or awaited by hand. A refusal is thrown for the error handler.
      const limiter: RateLimitHandler = async function rateLimit (request, reply) {
        const outcome = await run(request, reply)
        if (outcome === SENT) return reply
        if (outcome !== undefined) throw outcome
        return undefined
      }
      if (holds) HOLDING.add(limiter)
      return limiter
    },
    budget (options) {
      const { spend, hold, holds } = hooksFor(options, 'budget')
      const made: RateGuardBudget = {
        spend: async (request, spending) => await spend(request, spending),
        async hold (request, spending) {
          if (!holds) throw new InvalidOptionError('concurrency', 'budget.hold() takes slots of a budget made with concurrency: { max }')
          return await hold(request, spending)
        }
      }
      return Object.freeze(made)
    },
    createRateLimit (options) {
      const { prepare, ask, theirStore } = hooksFor(options, 'createRateLimit')
      return async function check (request, { increment = true } = {}) {
        const { given, input } = await prepare(request)
        if (input === null) return { isAllowed: true, key: given as string }
        if (increment) return result(given, await ask(input, given, request.log), input.limits[0]!, timeout)
        // A read counts nothing: it has exceeded when the next counted request would be refused, nothing being
        // left (or a ban). Theirs says so once the count is over the limit (`current > max`), which a refused
        // request makes in their counter but never in a log, where their README's peek-then-count login check
        // would never refuse; the app's own store keeps their meaning.
        const verdict = await ask({ ...input, peek: true }, given, request.log)
        const read = result(given, verdict, input.limits[0]!, timeout)
        return { ...read, isExceeded: theirStore ? 'count' in verdict && verdict.count > verdict.limit : read.remaining === 0 }
      }
    }
  }
}

function result (
  key: Given, verdict: Verdict, first: { burst: number, windowMs: number }, timeout: number
): Extract<RateLimitResult, { isAllowed: false }> {
  const ttlOf = (ttl: number): { ttl: number, ttlInSeconds: number } => ({ ttl, ttlInSeconds: seconds(ttl) })
  switch (verdict.status) {
    case 'unenforced':
      // Redis could not decide and failMode let the request through: nothing is known of the count.
      return {
        isAllowed: false,
        key: key as string,
        max: first.burst,
        timeWindow: first.windowMs,
        remaining: first.burst,
        ...ttlOf(0),
        isExceeded: false,
        isBanned: false
      }
    case 'unavailable':
      // failMode 'closed': the check fails as the store did (theirs throws the store's error), for the app to answer.
      throw verdict.error ?? unavailableError(timeout)
  }
  const refused = verdict.status !== 'allowed'
  return {
    isAllowed: false,
    key: key as string,
    max: verdict.limit,
    timeWindow: verdict.windowMs,
    remaining: remainingOf(verdict.limit, verdict.count, verdict.status === 'banned'),
    ...ttlOf(refused ? verdict.retryMs : verdict.resetMs),
    isExceeded: refused,
    isBanned: verdict.status === 'banned'
  }
}
