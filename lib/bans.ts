import type { FastifyBaseLogger } from 'fastify'
import type { Cluster, Redis } from 'ioredis'
import type { RedisLike } from './stores/redis.js'

/**
 * Bans Redis reported, kept in process until they end, so a banned client costs no Redis round trip: a ban
 * only ends when it expires (known from Redis's answer) or when an operator lifts it, and `unban` publishes
 * that on `<nameSpace>unban`, which every instance hears. While this instance is not subscribed (starting,
 * reconnecting) it could miss an unban, so it forgets every cached ban then and asks Redis again.
 */

/** Longest a ban is held in process: past it Redis is asked again (a bound on any missed unban). */
export const MAX_CACHED_BAN = 60_000

export class BanCache {
  readonly #until = new Map<string, number>()
  readonly #size: number
  readonly #now: () => number
  #listening = false

  constructor (size: number, now: () => number = Date.now) {
    this.#size = size
    this.#now = now
  }

  /** Ms left of the ban on `bannedKey` known here, or 0. */
  remaining (bannedKey: string): number {
    if (!this.#listening) return 0
    const until = this.#until.get(bannedKey)
    if (until === undefined) return 0
    const left = until - this.#now()
    if (left > 0) return left
    this.#until.delete(bannedKey)
    return 0
  }

  /** Redis answered that `bannedKey` is banned for `ms` more. */
  add (bannedKey: string, ms: number): void {
    if (!this.#listening) return
    if (this.#until.size >= this.#size) this.#evict()
    this.#until.set(bannedKey, this.#now() + Math.min(ms, MAX_CACHED_BAN))
  }

  /** An operator lifted the ban (here or on another instance). */
  delete (bannedKey: string): void {
    this.#until.delete(bannedKey)
  }

  /** Whether unbans reach this instance: only then are bans held. */
  listening (on: boolean): void {
    this.#listening = on
    if (!on) this.#until.clear()
  }

  /** Drops the ended bans, and when none has ended, the oldest one. */
  #evict (): void {
    const now = this.#now()
    for (const [key, until] of this.#until) if (until <= now) this.#until.delete(key)
    if (this.#until.size >= this.#size) this.#until.delete(this.#until.keys().next().value!)
  }
}

/** The channel unbans are published on. */
export const unbanChannel = (nameSpace: string): string => `${nameSpace}unban`

/**
 * Subscribes a connection of its own (a duplicate of `client`) to the unban channel and keeps `cache` told
 * whether it is listening. Returns the function that closes the subscription.
 */
export function listenForUnbans (client: RedisLike, nameSpace: string, cache: BanCache, log: FastifyBaseLogger): () => void {
  // Subscribing needs the offline queue: the SUBSCRIBE is sent when the connection is ready, and again after a reconnect.
  // Named, so an operator reading CLIENT LIST knows what it is; connecting now even when the lent client
  // was made with lazyConnect (a duplicate would wait for a first command that never comes).
  const connectionName = 'rate-guard-unbans'
  const subscriber = (client as { isCluster?: boolean }).isCluster === true
    ? (client as Cluster).duplicate(undefined, { enableOfflineQueue: true, lazyConnect: false, redisOptions: { ...(client as Cluster).options.redisOptions, connectionName } })
    : (client as Redis).duplicate({ enableOfflineQueue: true, lazyConnect: false, connectionName })
  const channel = unbanChannel(nameSpace)
  subscriber.on('message', (from: string, bannedKey: string) => { if (from === channel) cache.delete(bannedKey) })
  subscriber.on('error', (err: Error) => { log.debug({ err }, 'rate-guard: the unban subscription failed; bans are asked of Redis until it is back') })
  subscriber.on('close', () => cache.listening(false))
  const subscribe = (): void => {
    subscriber.subscribe(channel).then(() => cache.listening(true), (err: unknown) => {
      cache.listening(false)
      log.warn({ err }, 'rate-guard: could not subscribe to unbans; bans are asked of Redis on every request')
    })
  }
  subscriber.on('ready', subscribe)
  return () => {
    cache.listening(false)
    subscriber.disconnect()
  }
}
