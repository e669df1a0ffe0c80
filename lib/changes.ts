import type { FastifyBaseLogger } from 'fastify'
import { isCluster } from './stores/client.js'
import type { RedisLike } from './types.js'
import type { HeldAnswers } from './held-answers.js'
import { warn } from './warnings.js'

// Operators' changes (unban, ban, reset, override) and units given back, told to every instance on one Redis
// channel, so none goes on answering from what it held for the keys changed (see lib/held-answers.ts).

/**
 * The channel operators' changes are published on: the instance that made the change (its `HeldAnswers`' id,
 * `-` when it holds nothing), then the keys changed, separated by spaces.
 */
export const changesChannel = (nameSpace: string): string => `${nameSpace}changed`

/**
 * The function that tells every instance which keys an operator changed. The instance that made the change
 * forgot them before it publishes (see `Decider.forget`), and skips its own message when it comes back: a
 * second forget would only keep it from holding answers to questions asked after the change.
 */
export function announceChanges (
  client: RedisLike, nameSpace: string, held: HeldAnswers | undefined
): (keys: readonly string[]) => Promise<unknown> {
  const channel = changesChannel(nameSpace)
  const from = held?.id ?? '-'
  return async keys => await client.publish(channel, `${from} ${keys.join(' ')}`)
}

/**
 * Units given back on budgets whose denials are held (a handler settling a request below its cost): every
 * instance must forget the denials it holds for them, but one message a turn tells them all. The keys of the
 * settlements begun in one turn of the event loop are announced together, once every one of them has landed
 * in Redis (sooner, an instance could ask again, and hold again, the denial being lifted). A request needs
 * no answer from it; a failure is reported with the log of the turn's first request.
 */
export class GivenBack {
  readonly #announce: (keys: readonly string[]) => Promise<unknown>
  readonly #report: (err: Error, log: FastifyBaseLogger) => void
  #keys = new Set<string>()
  #landing: Array<Promise<unknown>> = []
  #log: FastifyBaseLogger | undefined

  constructor (announce: (keys: readonly string[]) => Promise<unknown>, report: (err: Error, log: FastifyBaseLogger) => void) {
    this.#announce = announce
    this.#report = report
  }

  /** Units were given back at `key`, by a settlement that has landed when `landed` resolves. */
  add (key: string, landed: Promise<unknown>, log: FastifyBaseLogger): void {
    if (this.#log === undefined) {
      this.#log = log
      setImmediate(this.#send)
    }
    this.#keys.add(key)
    this.#landing.push(landed)
  }

  readonly #send = (): void => {
    const keys = [...this.#keys]
    const landing = this.#landing
    const log = this.#log!
    this.#keys = new Set()
    this.#landing = []
    this.#log = undefined
    Promise.all(landing).then(async () => await this.#announce(keys)).catch((err: unknown) => this.#report(err as Error, log))
  }
}

/**
 * Subscribes a connection of its own (a duplicate of `client`) to the changes channel and keeps `held` told
 * whether it is listening. Returns the function that closes the subscription.
 */
export function listenForChanges (client: RedisLike, nameSpace: string, held: HeldAnswers, log: FastifyBaseLogger): () => void {
  // Subscribing needs the offline queue: the SUBSCRIBE is sent when the connection is ready, and again after a reconnect.
  // Named, so an operator reading CLIENT LIST knows what it is; connecting now even when the lent client
  // was made with lazyConnect (a duplicate would wait for a first command that never comes).
  const connectionName = 'rate-guard-changes'
  const subscriber = isCluster(client)
    ? client.duplicate(undefined, {
      enableOfflineQueue: true, lazyConnect: false, redisOptions: { ...client.options.redisOptions, connectionName }
    })
    // autoResubscribe off: `subscribe` below does it on every 'ready', and handles its answer (ioredis's own
    // re-subscription leaves its promise unhandled: a close while it is pending is an unhandled rejection).
    : client.duplicate({ enableOfflineQueue: true, lazyConnect: false, connectionName, autoResubscribe: false })
  const channel = changesChannel(nameSpace)
  // Subscribed to the one channel, so every message is a change.
  subscriber.on('message', (_channel: string, message: string) => {
    const [sender, ...keys] = message.split(' ')
    if (sender !== held.id) held.forget(keys)
  })
  subscriber.on('error', (err: Error) => {
    log.debug({ err }, 'rate-guard: the changes subscription failed; bans and denials are asked of Redis until it is back')
  })
  subscriber.on('close', () => held.listening(false))
  const subscribe = (): void => {
    subscriber.subscribe(channel).then(() => held.listening(true), (err: unknown) => {
      held.listening(false)
      warn(log, 'SUBSCRIBE_FAILED', 'rate-guard: could not subscribe to changes (unban, reset, overrides); bans and denials are ' +
        'asked of Redis on every request', { err })
    })
  }
  subscriber.on('ready', subscribe)
  const stop = (): void => {
    client.off('end', stop)
    held.listening(false)
    subscriber.disconnect()
  }
  // The subscription lives as long as the client it was made from: an app that quits the client it lent
  // (without closing Fastify) is not kept running by a connection it never made.
  client.on('end', stop)
  return stop
}
