import type { Algorithm } from './algorithms/index.js'
import { onDeadline } from './deadline.js'
import { DeadlineError } from './errors.js'
import type { DecideInput, Decision } from './stores/store.js'

// Decisions asked of Redis in one turn of the event loop go together: one script call per algorithm, per shard
// (on a Redis Cluster the master that serves the request's keys, `ShardOf`; one shard elsewhere) and per
// `BATCH_MAX` requests: one round trip, one timer, one reply for all. Batching by master fills each master's
// calls whatever the number of masters: a batch of 32 split by master afterwards reached each of three with
// about 9 requests (issue 43). A batch is sent as soon as it is full,
// or once the turn's I/O is handled, so under load Redis works on the first requests of a turn while the app
// still reads the rest (a turn's requests in one call made Redis and the app take turns: the server's core
// was 80% busy at 100 connections, 97% with batches of 32; bench/README.md).
//
// A batch only moves forward, open → sent → settled, in `#sendOne` and `#settle`:
// - open:    it takes requests; it is sent when full, or in the check phase of the turn it was made in. No
//            deadline runs yet: the wait for that phase is the app's own event loop, not Redis.
// - sent:    Redis has it; its deadline runs from here (see `lib/deadline.ts`: a reply that reached the
//            process is used however late the loop gets to it). It takes no more requests.
// - settled: by the reply, by Redis's error, or by the deadline, whichever comes first: each of its requests
//            is answered then, exactly once, and nothing that comes later changes it.

/**
 * Most requests decided in one script call, and the size at which a batch goes without waiting for the turn
 * to end. Measured at 100 connections (allowed traffic, sliding log): 8 or 16 cost Redis more calls, 64 or 128
 * left the app waiting on Redis.
 */
export const BATCH_MAX = 32

/**
 * What a request gets: its decision, or why Redis gave none (for it alone, or for its whole batch); when its batch was
 * sent, and its size.
 */
export type Answer = (result: Decision | Error, sentAt: number, batchSize: number) => void

/** Which shard a request's batch is (the master serving its keys on a Cluster); requests of one shard and algorithm go together. */
export type ShardOf = (input: DecideInput) => string

/** Sends one batch of one algorithm (and shard): a decision, or the error of that request alone, per request, in order. */
export type Send = (inputs: readonly DecideInput[], algorithm: Algorithm) => Promise<ReadonlyArray<Decision | Error>>

/** Told once per batch, before its requests are answered: Redis replied (`undefined`), or why it did not. */
export type Settled = (err: Error | undefined) => void

/**
 * Watches the connection through its batches, beyond their answers (lib/silence.ts, lib/late.ts): each batch
 * sent, each reply however late, each deadline missed.
 */
export interface BatchWatch {
  sent: (at: number) => void
  /**
   * Redis replied `ms` after the batch was sent (its decisions, or `null` for an error of Redis's own for the
   * whole batch); `late` when the deadline had answered its requests already.
   */
  replied: (ms: number, results: ReadonlyArray<Decision | Error> | null, late: boolean) => void
  /** The client failed the batch itself (no connection, one lost): it knows the connection's state. */
  failed: () => void
  missed: (now: number) => void
}

interface Batch {
  state: 'open' | 'sent' | 'settled'
  readonly algorithm: Algorithm
  readonly shard: string
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
  /** The batches still open, one per algorithm and shard at most: each sent when full or in the check phase of this turn. */
  #open: Batch[] = []
  /** Whether the check phase of this turn will send what is open. */
  #scheduled = false
  readonly #watch: BatchWatch | undefined
  readonly #shardOf: ShardOf | undefined

  constructor (send: Send, timeout: number, settled: Settled, watch?: BatchWatch, shardOf?: ShardOf) {
    this.#send = send
    this.#timeout = timeout
    this.#settled = settled
    this.#watch = watch
    this.#shardOf = shardOf
  }

  /** Adds `input` to the open batch of its algorithm and shard (a new one when none is open); `answer` is called once. */
  add (input: DecideInput & { readonly algorithm: Algorithm }, answer: Answer): void {
    const { algorithm } = input
    const shard = this.#shardOf?.(input) ?? ''
    let batch: Batch | undefined
    for (const open of this.#open) if (open.algorithm === algorithm && open.shard === shard) batch = open
    if (batch === undefined) {
      if (!this.#scheduled) {
        this.#scheduled = true
        setImmediate(this.#sendOpen)
      }
      batch = { state: 'open', algorithm, shard, inputs: [], answers: [], sentAt: 0, cancel: null }
      this.#open.push(batch)
    }
    batch.inputs.push(input)
    batch.answers.push(answer)
    if (batch.inputs.length === BATCH_MAX) {
      this.#open.splice(this.#open.indexOf(batch), 1)
      this.#sendOne(batch)
    }
  }

  readonly #sendOpen = (): void => {
    this.#scheduled = false
    const batches = this.#open
    this.#open = []
    for (const batch of batches) this.#sendOne(batch)
  }

  #sendOne (batch: Batch): void {
    batch.state = 'sent'
    batch.sentAt = Date.now()
    this.#watch?.sent(batch.sentAt)
    batch.cancel = onDeadline(this.#timeout, () => {
      this.#watch?.missed(Date.now())
      this.#settle(batch, new DeadlineError(this.#timeout))
    })
    let reply: Promise<ReadonlyArray<Decision | Error>>
    try {
      reply = this.#send(batch.inputs, batch.algorithm)
    } catch (err) {
      reply = Promise.reject(err)
    }
    reply.then(results => {
      this.#watch?.replied(Date.now() - batch.sentAt, results, batch.state === 'settled')
      this.#settle(batch, results)
    }, (err: unknown) => {
      // An error Redis replied with is heard from it; a lost connection's is the client's own.
      if ((err as Error).name === 'ReplyError') this.#watch?.replied(Date.now() - batch.sentAt, null, batch.state === 'settled')
      else this.#watch?.failed()
      this.#settle(batch, err as Error)
    })
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
    for (let i = 0; i < answers.length; i++) answers[i]!(failed ? outcome : outcome[i]!, sentAt, answers.length)
  }
}
