import type { Algorithm } from './algorithms/index.js'
import { onDeadline } from './deadline.js'
import { DeadlineError } from './errors.js'
import type { DecideInput, Decision } from './stores/store.js'

// Decisions asked of Redis in one turn of the event loop go together: one script call per algorithm (up to
// `BATCH_MAX` requests), sent once the turn's I/O is handled: one round trip, one timer, one reply for all.
//
// A batch only moves forward, open → sent → settled, in `#send` and `#settle`:
// - open:    it takes requests; it is sent in the check phase of the turn it was made in. No deadline runs
//            yet: the wait for that phase is the app's own event loop, not Redis.
// - sent:    Redis has it; its deadline runs from here (see `lib/deadline.ts`: a reply that reached the
//            process is used however late the loop gets to it). It takes no more requests.
// - settled: by the reply, by Redis's error, or by the deadline, whichever comes first: each of its requests
//            is answered then, exactly once, and nothing that comes later changes it.

/** Most requests decided in one script call: a longer one would hold Redis up for every other client. */
export const BATCH_MAX = 128

/** What a request gets: its decision, or why Redis gave none (for it alone, or for its whole batch); and when its batch was sent. */
export type Answer = (result: Decision | Error, sentAt: number) => void

/** Sends one batch of one algorithm: a decision, or the error of that request alone, per request, in order. */
export type Send = (inputs: readonly DecideInput[], algorithm: Algorithm) => Promise<ReadonlyArray<Decision | Error>>

/** Told once per batch, before its requests are answered: Redis replied (`undefined`), or why it did not. */
export type Settled = (err: Error | undefined) => void

interface Batch {
  state: 'open' | 'sent' | 'settled'
  readonly algorithm: Algorithm
  readonly inputs: DecideInput[]
  readonly answers: Answer[]
  /** When it was sent (ms): what Redis answers holds from no earlier than that. */
  sentAt: number
  /** Stops its deadline; set when it is sent. */
  cancel: (() => void) | null
}

export class Batcher {
  readonly #send: Send
  readonly #timeout: number
  readonly #settled: Settled
  /** The batches still open: each sent in the check phase of this turn. */
  #open: Batch[] = []

  constructor (send: Send, timeout: number, settled: Settled) {
    this.#send = send
    this.#timeout = timeout
    this.#settled = settled
  }

  /** Adds `input` to an open batch of its algorithm (a new one when none has room); `answer` is called once. */
  add (input: DecideInput & { readonly algorithm: Algorithm }, answer: Answer): void {
    const { algorithm } = input
    let batch: Batch | undefined
    for (const open of this.#open) if (open.algorithm === algorithm && open.inputs.length < BATCH_MAX) batch = open
    if (batch === undefined) {
      if (this.#open.length === 0) setImmediate(this.#sendOpen)
      batch = { state: 'open', algorithm, inputs: [], answers: [], sentAt: 0, cancel: null }
      this.#open.push(batch)
    }
    batch.inputs.push(input)
    batch.answers.push(answer)
  }

  readonly #sendOpen = (): void => {
    const batches = this.#open
    this.#open = []
    for (const batch of batches) this.#sendOne(batch)
  }

  #sendOne (batch: Batch): void {
    batch.state = 'sent'
    batch.sentAt = Date.now()
    batch.cancel = onDeadline(this.#timeout, () => this.#settle(batch, new DeadlineError(this.#timeout)))
    let reply: Promise<ReadonlyArray<Decision | Error>>
    try {
      reply = this.#send(batch.inputs, batch.algorithm)
    } catch (err) {
      reply = Promise.reject(err)
    }
    reply.then(results => this.#settle(batch, results), (err: unknown) => this.#settle(batch, err as Error))
  }

  /** The one place a batch is settled: once, by whatever comes first; its requests are answered in order. */
  #settle (batch: Batch, outcome: ReadonlyArray<Decision | Error> | Error): void {
    if (batch.state === 'settled') return
    batch.state = 'settled'
    // Only a sent batch settles.
    batch.cancel!()
    const failed = outcome instanceof Error
    this.#settled(failed ? outcome : undefined)
    const { answers, sentAt } = batch
    for (let i = 0; i < answers.length; i++) answers[i]!(failed ? outcome : outcome[i]!, sentAt)
  }
}
