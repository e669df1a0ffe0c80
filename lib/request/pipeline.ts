import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { isPromise, andThen } from '../awaitable.js'
import type { RouteBudget } from '../budgets.js'
import type { Decider } from '../decider.js'
import type { Decidable, Verdict } from '../stores/store.js'
import type { ResolvedOptions } from '../options/resolved.js'
import type { TheirStore } from '../types.js'
import { AbandonedError } from '../errors.js'
import { isAllowListed } from './allow.js'
import { charge } from './charge.js'
import { ask, decide } from './decide.js'
import type { Given } from './identify.js'
import { hold } from './hold.js'
import { decidableFor } from './limits.js'
import type { Leases } from '../leases.js'
import { planBudget } from './plan.js'
import { admit } from './admission.js'
import type { Plan } from './plan.js'
import { SENT, respond } from './respond.js'
import type { HookResult } from './respond.js'
import { watch } from './watch.js'
import { LEFT, wait } from './wait.js'
import type { WaitingRoom } from './waiting-room.js'

// A request, as one budget limits it, in named stages:
//   identify → allow → limits and cost → decide → wait → hold → charge → respond → watch
// over the budget's plan, worked out once at onRoute (./plan.ts). Every stage runs at once when its answer is
// at hand (a static allow list and limits, a ban held in process, the in-process store) and waits only for
// what must be waited for (Redis, an async key generator): a client refused in process costs no promise.

/** A request's key and what its decision takes: `input` is null when the allow list lets it through. */
export interface Prepared {
  /** Who the client is, as the stores key it. */
  readonly key: string
  /** The key as the app's key generator returned it: what the app's callbacks are given. */
  readonly given: Given
  readonly input: Decidable | null
}

type Done = (err?: Error) => void

/** The hook in Fastify's callback style: `done` once, with the refusal if any; not at all when it answered itself. */
export type RequestHook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

/** One budget applied to requests: as Fastify's hook, as a function giving the result, and its first stages alone. */
export interface BudgetHooks {
  readonly hook: RequestHook
  /** What the hook does, as a value: the refusal to throw, `SENT`, or nothing. */
  run (request: FastifyRequest, reply: FastifyReply): HookResult | PromiseLike<HookResult>
  /** The verdict on a prepared request (a read with `peek`), from the store that counts this budget. */
  ask (input: Decidable, given: Given, log: FastifyBaseLogger): Verdict | Promise<Verdict>
  /** Identify → allow → limits: what a decision of this budget takes for `request`. */
  prepare (request: FastifyRequest): Prepared | PromiseLike<Prepared>
  /** The app's store (`@fastify/rate-limit`'s `store`) counts this budget, with their meaning of its count. */
  readonly theirStore: boolean
  /** The budget has `concurrency`: its requests may hold slots until their work is over (./work.ts). */
  readonly holds: boolean
  /**
   * For requests no route matched (`request.is404`): refuses a client known to be banned (held in process,
   * or in the in-process store), asking Redis nothing and counting nothing; lets every other request by.
   */
  readonly notFound: RequestHook
}

/** `room`: where the registration's requests wait (`maxWaiting`); `ran`: the request decoration saying one of the registration's hooks has limited it. */
export function createHooks (decider: Decider, leases: Leases, room: WaitingRoom, opts: ResolvedOptions, budget: RouteBudget, undoneScopes: ReadonlySet<string>, ran: symbol, appStore?: TheirStore): BudgetHooks {
  const plan = planBudget(decider, leases, room, opts, budget, undoneScopes, appStore)
  const run = (request: FastifyRequest, reply: FastifyReply): HookResult | PromiseLike<HookResult> => {
    // Limited once: a route's own hook and a limiter the app put on it too count the request once, the first.
    const marked = request as unknown as Record<symbol, boolean>
    if (marked[ran]) return undefined
    marked[ran] = true
    return andThen(prepare(plan, request), ready => {
      if (ready.input !== null) return decideAndRespond(plan, request, reply, ready.given, ready.input)
      admit(request, plan, ready.given, null)
      return undefined
    })
  }
  const notFound = (request: FastifyRequest, reply: FastifyReply): HookResult | PromiseLike<HookResult> => refuseIfBanned(plan, request, reply)
  return {
    hook: (request, reply, done) => { asHook(run, request, reply, done) },
    run,
    ask: (input, given, log) => ask(plan, input, given, log),
    prepare: request => prepare(plan, request),
    theirStore: plan.appStore !== undefined,
    holds: plan.concurrency !== null,
    notFound (request, reply, done) {
      if (request.is404) asHook(notFound, request, reply, done)
      else done()
    }
  }
}

/** Identify → allow → limits and cost. */
function prepare (plan: Plan, request: FastifyRequest): Prepared | PromiseLike<Prepared> {
  return andThen(plan.keyOf(request), given => {
    const key = String(given)
    return andThen(isAllowListed(plan, request, key, given), listed => listed
      ? { key, given, input: null }
      : andThen(decidableFor(plan, request, key, given), input => ({ key, given, input })))
  })
}

/** Decide → wait → hold → charge → respond → watch. */
function decideAndRespond (plan: Plan, request: FastifyRequest, reply: FastifyReply, given: Given, input: Decidable): HookResult | PromiseLike<HookResult> {
  const waited = andThen(decide(plan, input, given, request.log), decided => wait(plan, request, reply, decided))
  return andThen(andThen(waited, decided => decided === LEFT ? decided : hold(plan, request, reply, decided)), decided => {
    // Its client left while it waited: it gave its place back, and is not handled.
    if (decided === LEFT) return new AbandonedError()
    admit(request, plan, given, decided)
    if (decided.charged.length > 0) charge(request, plan.decider, decided.charged)
    const result = respond(plan, request, reply, given, decided)
    if (plan.watched !== null && decided.verdict.status === 'allowed') watch(plan, request, given, decided.input)
    return result
  })
}

/** A request no route matched: refused only when its client is known to be banned here. */
function refuseIfBanned (plan: Plan, request: FastifyRequest, reply: FastifyReply): HookResult | PromiseLike<HookResult> {
  return andThen(prepare(plan, request), ({ given, input }) => {
    if (input === null) return undefined
    const verdict = plan.decider.knownBan(input)
    return verdict === undefined ? undefined : respond(plan, request, reply, given, { verdict, input, headers: plan.budget.headers, charged: [] })
  })
}

/** Runs `step` as Fastify's callback-style hook: `done` once, with its refusal, whether it answers at once, later, or throws. */
function asHook (step: (request: FastifyRequest, reply: FastifyReply) => HookResult | PromiseLike<HookResult>, request: FastifyRequest, reply: FastifyReply, done: Done): void {
  let result: HookResult | PromiseLike<HookResult>
  try {
    result = step(request, reply)
  } catch (err) {
    done(err as Error)
    return
  }
  if (isPromise(result)) result.then(value => finish(value, done), done)
  else finish(result, done)
}

function finish (result: HookResult, done: Done): void {
  if (result !== SENT) done(result)
}
