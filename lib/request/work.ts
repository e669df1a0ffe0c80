import type { FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify'

// A request's work, as `concurrency` holds its slots: until its handler is over AND its response is over
// (the raw response's `close`: sent, failed, or its client hung up), whichever is later, AND every hold the app
// took (`request.rateGuard.hold()`) is done. A client that hangs up ends its response, not the handler
// Fastify goes on running, so it frees nothing by leaving.
//
// The handler is over when the handler the route wraps (`watchHandler`, put on at onRoute where a budget with
// `concurrency` may hold the request) returns a value, throws, or its promise settles. A handler that returns
// nothing (callback style), and any request whose handler the plugin does not see (it never starts: a hook
// refused it, an error; or the app placed the limiter where no route shows it), is over once the app answers:
// `reply.sent` (the response ended, the error handler's answer included, or the reply hijacked), heard at the
// response's `close`, or after it on the raw response's `prefinish` (a response ended after its client left).
//
// Never forever: from its response's end, a request still working holds its slots one lease more at most (the
// budget's `lease`, renewed meanwhile, as a process that dies holding them is given), then lets them go: the
// bound for a handler that never settles, a reply never sent, or a hold never done.

/**
 * Where the handler is: `waiting` (or unseen), `running` (its promise pending), `returned` (nothing: callback
 * style), `over`.
 */
type Handler = 'waiting' | 'running' | 'returned' | 'over'

/** Slots a request holds: given back once, when its work is over, or a lease past its response's end. */
interface Holder {
  readonly release: () => void
  readonly leaseMs: number
  cap?: NodeJS.Timeout
}

/** Where a request keeps its work (null, as every request is decorated: it holds no slot). */
export const WORK = Symbol('rate-guard.work')

/** The request's work, or undefined when it holds no slot. */
function workIn (request: FastifyRequest): Work | undefined {
  return (request as unknown as Record<symbol, Work | null>)[WORK] ?? undefined
}

const NOTHING = (): void => {}
/** Handlers watched already. */
const WATCHED = new WeakSet<RouteHandlerMethod>()

export class Work {
  readonly #reply: FastifyReply
  readonly #holders: Holder[] = []
  #handler: Handler = 'waiting'
  #closed = false
  #hearing = false
  #holds = 0
  #over = false

  constructor (reply: FastifyReply) {
    this.#reply = reply
    const raw = reply.raw
    // Its response may be over already (its client left while the slots were taken).
    if (raw.destroyed || raw.writableFinished) this.#closed = true
    else raw.once('close', () => { this.#close() })
  }

  /** Holds `release` (slots of a lease of `leaseMs`) until the work is over. */
  add (release: () => void, leaseMs: number): void {
    if (this.#over) return release()
    this.#holders.push({ release, leaseMs })
    if (this.#closed) this.#closing()
  }

  /** The handler starts: what it returned says when it is over. */
  started (result: unknown): void {
    if (result !== null && typeof (result as PromiseLike<unknown>)?.then === 'function') {
      this.#handler = 'running'
      const over = (): void => this.ended()
      ;(result as PromiseLike<unknown>).then(over, over)
    } else if (result === undefined) {
      this.#handler = 'returned'
      this.#check()
    } else {
      this.ended()
    }
  }

  /** The handler is over: it returned a value, threw, or its promise settled. */
  ended (): void {
    this.#handler = 'over'
    this.#check()
  }

  /** A hold the app takes: the slots stay until `done` (once; later calls do nothing), within the bound above. */
  hold (): () => void {
    if (this.#over) return NOTHING
    this.#holds++
    let done = false
    return () => {
      if (done) return
      done = true
      this.#holds--
      this.#check()
    }
  }

  #close (): void {
    this.#closed = true
    this.#closing()
  }

  /** The response is over: the work is, or it is heard of when the app answers, and bounded by a lease. */
  #closing (): void {
    if (this.#check()) return
    if (!this.#hearing) {
      this.#hearing = true
      this.#reply.raw.once('prefinish', () => { this.#check() })
    }
    for (const holder of this.#holders) {
      holder.cap ??= setTimeout(() => { this.#let(holder) }, holder.leaseMs).unref()
    }
  }

  /** Lets the slots go when the work is over; says whether it is. */
  #check (): boolean {
    if (this.#over) return true
    const handled = this.#handler === 'over' || (this.#handler !== 'running' && this.#reply.sent)
    if (!this.#closed || !handled || this.#holds > 0) return false
    this.#over = true
    for (const holder of this.#holders) this.#let(holder)
    return true
  }

  #let (holder: Holder): void {
    clearTimeout(holder.cap)
    holder.release()
  }
}

/** The request's work, made on the first slots it takes. */
export function workOf (request: FastifyRequest, reply: FastifyReply): Work {
  return workIn(request) ?? ((request as unknown as Record<symbol, Work | null>)[WORK] = new Work(reply))
}

/** A hold on the request's slots (`request.rateGuard.hold()`): nothing to hold when it holds none. */
export function holdWork (request: FastifyRequest): () => void {
  return workIn(request)?.hold() ?? NOTHING
}

/**
 * The route's handler, watched: the same `this`, arguments and return value (or throw), and the request's
 * work told when it is over. A request that holds no slot pays one property read.
 */
export function watchHandler (handler: RouteHandlerMethod): RouteHandlerMethod {
  // Watched once, whatever the registrations that see the route.
  if (WATCHED.has(handler)) return handler
  const watched = function (this: unknown, request: FastifyRequest, reply: FastifyReply) {
    const work = workIn(request)
    if (work === undefined) return handler.call(this as never, request, reply)
    let result: unknown
    try {
      result = handler.call(this as never, request, reply)
    } catch (err) {
      work.ended()
      throw err
    }
    work.started(result)
    return result
  } as RouteHandlerMethod
  WATCHED.add(watched)
  return watched
}
