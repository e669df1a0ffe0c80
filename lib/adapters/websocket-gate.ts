import type { FastifyRequest } from 'fastify'
import type { RateGuardBudget } from '../limiters.js'
import { seconds } from '../headers.js'
import { isBan } from '../channels.js'
import type { Spent } from '../request/spend.js'

// One WebSocket connection's messages as the adapter (./websocket.ts) gates them, before the app's listeners
// see them: each message's decision starts as it arrives (its budgets asked one after the other, so a refusal
// the decider holds in process costs the later budgets nothing), and messages reach the app in arrival order,
// each once its decision is in; a refused one is dropped and answered as the app chose. At most `maxPending`
// decisions are in flight per connection: past that the socket is paused (TCP pushes back on the client) and
// what it had already read waits its turn, undecided, so nothing is refused that its limits would let through.

/** The part of a `ws` WebSocket the gate uses. */
export interface GatedSocket {
  emit (event: string | symbol, ...args: unknown[]): boolean
  once (event: 'close', listener: () => void): unknown
  send (data: string): void
  close (code?: number, reason?: string): void
  pause (): void
  resume (): void
}

/** What a refused message is told: `error` in its notice, the budget that refused it, seconds until one may pass. */
export interface Refusal {
  readonly error: 'rate_limited' | 'too_costly' | 'banned' | 'unavailable'
  readonly budget: 'messages' | 'connectionMessages' | 'bytes'
  /** Seconds until a message would pass (0 with `too_costly`: it never will, it costs more than the limit holds). */
  readonly retryAfter: number
  readonly spent: Spent
}

export type OnRefused = 'close' | 'notify' | ((socket: GatedSocket, refusal: Refusal) => void)

/** A route's message budgets and answers, made once at register. */
export interface MessageRules {
  readonly messages: RateGuardBudget | null
  readonly connectionMessages: RateGuardBudget | null
  readonly bytes: RateGuardBudget | null
  readonly cost: ((data: unknown, isBinary: boolean) => number) | undefined
  readonly onRefused: OnRefused
  readonly closeCode: number
  readonly maxPending: number
}

/** A message from arrival to delivery: `refusal` undefined while its decision runs, null once let through. */
interface Entry {
  readonly data: unknown
  readonly isBinary: boolean
  refusal: Refusal | null | undefined
  /** Its decision failed (an error, logged): dropped, nothing told. */
  failed: boolean
}

/** The reasons a socket is closed with (each well under the 123 bytes a close frame's reason may hold). */
const REASONS: Readonly<Record<Refusal['error'], string>> = {
  rate_limited: 'rate limited',
  too_costly: 'message costs more than the limit holds',
  banned: 'banned',
  unavailable: 'rate limiting unavailable, try again later'
}

/** The byte length of a message as `ws` gives it (a Buffer, an ArrayBuffer, or fragments). */
export function byteLength (data: unknown): number {
  if (Array.isArray(data)) return data.reduce((sum: number, part: Buffer) => sum + part.length, 0)
  return (data as Buffer | ArrayBuffer).byteLength
}

export class Gate {
  readonly #socket: GatedSocket
  readonly #rules: MessageRules
  readonly #request: FastifyRequest
  readonly #key: string
  /** The socket's own `emit`, which delivers to the app's listeners. */
  readonly #emit: GatedSocket['emit']
  /** Messages not yet delivered, in arrival order; those not yet started are the last `#waiting` of them. */
  readonly #queue: Entry[] = []
  readonly #waiting: Entry[] = []
  #deciding = 0
  #paused = false
  #closed = false
  /** Until when `notify` sends no other notice (at most one a retry period). */
  #quietUntil = 0

  constructor (socket: GatedSocket, rules: MessageRules, request: FastifyRequest, key: string) {
    this.#socket = socket
    this.#rules = rules
    this.#request = request
    this.#key = key
    const emit = socket.emit
    this.#emit = emit
    const arrive = (data: unknown, isBinary: boolean): void => { this.#arrive(data, isBinary) }
    socket.emit = function gated (event, ...args) {
      if (event !== 'message') return emit.apply(this, [event, ...args])
      arrive(args[0], args[1] as boolean)
      return true
    }
    socket.once('close', () => { this.#close() })
  }

  #arrive (data: unknown, isBinary: boolean): void {
    if (this.#closed) return
    const entry: Entry = { data, isBinary, refusal: undefined, failed: false }
    this.#queue.push(entry)
    if (this.#deciding < this.#rules.maxPending) {
      this.#start(entry)
      return
    }
    this.#waiting.push(entry)
    if (!this.#paused) {
      this.#paused = true
      this.#socket.pause()
    }
  }

  #start (entry: Entry): void {
    this.#deciding++
    this.#decide(entry).then(refusal => { entry.refusal = refusal }, (err: unknown) => {
      this.#request.log.error({ err }, 'rate-guard: a WebSocket message could not be decided; it is dropped')
      entry.failed = true
      entry.refusal = null
    }).finally(() => {
      this.#deciding--
      this.#decided()
    })
  }

  /** A decision is in: the next waiting messages start, and the queue's decided head is delivered. */
  #decided (): void {
    while (this.#waiting.length > 0 && this.#deciding < this.#rules.maxPending) this.#start(this.#waiting.shift()!)
    if (this.#paused && this.#waiting.length === 0) {
      this.#paused = false
      this.#socket.resume()
    }
    while (this.#queue.length > 0 && this.#queue[0]!.refusal !== undefined && !this.#closed) {
      const entry = this.#queue.shift()!
      if (entry.failed) continue
      if (entry.refusal === null) this.#deliver(entry)
      else this.#refuse(entry.refusal!)
    }
  }

  /** Asks each budget in turn; a refusal gives back what the budgets before it counted. */
  async #decide (entry: Entry): Promise<Refusal | null> {
    const rules = this.#rules
    const asks: Array<[Refusal['budget'], RateGuardBudget | null, () => { cost: number, key?: string }]> = [
      ['connectionMessages', rules.connectionMessages, () => ({ cost: 1, key: this.#key })],
      ['messages', rules.messages, () => ({ cost: rules.cost === undefined ? 1 : rules.cost(entry.data, entry.isBinary) })],
      ['bytes', rules.bytes, () => ({ cost: byteLength(entry.data) })]
    ]
    const counted: Spent[] = []
    for (const [name, budget, options] of asks) {
      if (budget === null) continue
      const asked = options()
      // A message that costs nothing (empty, or free by the app's function) counts nothing there.
      if (asked.cost === 0) continue
      const spent = await budget.spend(this.#request, asked)
      if (!spent.ok) {
        for (const earlier of counted) this.#giveBack(earlier)
        return refusalOf(name, spent)
      }
      if (spent.charged > 0) counted.push(spent)
    }
    return null
  }

  #giveBack (spent: Spent): void {
    // A settlement logs Redis's trouble itself; it rejects only a second settle or a bad amount, neither possible here.
    spent.settle(0).catch(() => {})
  }

  #deliver (entry: Entry): void {
    try {
      this.#emit.call(this.#socket, 'message', entry.data, entry.isBinary)
    } catch (err) {
      // What a listener throws goes where @fastify/websocket sends a socket's errors (its errorHandler).
      this.#emit.call(this.#socket, 'error', err)
    }
  }

  #refuse (refusal: Refusal): void {
    const { onRefused, closeCode } = this.#rules
    if (typeof onRefused === 'function') {
      try {
        onRefused(this.#socket, refusal)
      } catch (err) {
        this.#request.log.error({ err }, 'rate-guard: the app\'s onRefused threw')
      }
      return
    }
    if (refusal.error === 'banned') {
      this.#shut(1008, REASONS.banned)
      return
    }
    if (onRefused === 'close') {
      this.#shut(refusal.error === 'unavailable' ? 1013 : closeCode, REASONS[refusal.error])
      return
    }
    const now = Date.now()
    if (now < this.#quietUntil) return
    this.#quietUntil = now + Math.max(1000, refusal.retryAfter * 1000)
    this.#socket.send(JSON.stringify({ error: refusal.error, retryAfter: refusal.retryAfter }))
  }

  #shut (code: number, reason: string): void {
    this.#close()
    this.#socket.close(code, reason)
  }

  /** Closed (by us, or the socket's close): what is still queued is dropped. */
  #close (): void {
    this.#closed = true
    this.#queue.length = 0
    this.#waiting.length = 0
  }
}

/** A refused spend as the client is told it. */
function refusalOf (budget: Refusal['budget'], spent: Spent): Refusal {
  const error: Refusal['error'] = isBan(spent.outcome)
    ? 'banned'
    : spent.outcome === 'unavailable' ? 'unavailable' : spent.outcome === 'too-costly' ? 'too_costly' : 'rate_limited'
  return { error, budget, retryAfter: seconds(spent.retryMs), spent }
}
