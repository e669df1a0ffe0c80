import type { Cluster } from 'ioredis'
import { DeadlineError } from '../errors.js'
import type { RedisLike } from '../types.js'

// The Redis client: made from URLs with options that fail fast, told apart from a Cluster, checked for what
// makes requests wait on a dead Redis, and waited for at start.

/** Whether `client` is an ioredis Cluster (whose scripts may touch one slot, and whose options differ). */
export function isCluster (client: RedisLike): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true
}

/**
 * A client for a URL (or a Redis Cluster for a list of node URLs), with options that fail fast: nothing
 * queues while disconnected, a command is never retried or re-sent after a reconnect (a late re-send would
 * spend quota for a request already answered), and reconnection goes on forever with a capped backoff.
 * No `commandTimeout`: it is a plain timer, which under a busy event loop fires before the loop reads a reply
 * that arrived in time. The plugin's own deadline (lib/deadline.ts) bounds every call instead, and a
 * connection that stops answering altogether is cut (lib/stores/stalled.ts).
 */
export async function createClient (url: string | readonly string[], timeout: number): Promise<RedisLike> {
  const { Redis, Cluster } = await import('ioredis')
  const backoff = (times: number): number => Math.min(times * 100, 2000)
  const node = {
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: Math.max(timeout, 2000),
    // On quit, wait this long for the server to close before cutting the socket (ioredis: 2 s).
    disconnectTimeout: 200
  }
  if (typeof url === 'string') return new Redis(url, { ...node, enableOfflineQueue: false, retryStrategy: backoff })
  // Cluster nodes always queue while offline: only the cluster-level switch makes a dead cluster fail fast.
  return new Cluster([...url], {
    ...CLUSTER_OPTIONS,
    clusterRetryStrategy: backoff,
    redisOptions: node
  })
}

/**
 * The cluster options a client made from URLs uses, and the README recommends. ioredis retries TRYAGAIN,
 * CLUSTERDOWN and lost connections up to `maxRedirections` times, each after its `retryDelayOn*`: a window
 * much longer than the decision deadline only makes ghost hits (retries that land after the request was
 * answered), so it is kept near the deadline; three redirections still follow a MOVED and an ASK.
 */
export const CLUSTER_OPTIONS = Object.freeze({
  enableOfflineQueue: false,
  scaleReads: 'master' as const,
  maxRedirections: 3,
  retryDelayOnFailover: 50,
  retryDelayOnClusterDown: 50,
  retryDelayOnTryAgain: 50,
  slotsRefreshTimeout: 1000
})

/** Options of a lent client that make requests wait on a dead Redis; each is worth one warning. */
export function queueingOptions (client: RedisLike): string[] {
  const options = client.options as { enableOfflineQueue?: boolean }
  return options.enableOfflineQueue === false ? [] : ['enableOfflineQueue']
}

/** `maxmemory-policy` as the server gives it (a flat pair, or a map under RESP3 `replyMapping: 'resp3'`). */
export async function evictionPolicy (client: RedisLike): Promise<unknown> {
  const reply: unknown = await client.config('GET', 'maxmemory-policy')
  return Array.isArray(reply) ? reply[1] : (reply as Record<string, unknown>)['maxmemory-policy']
}

/** Resolves with `true` once the client is ready, or with why not: its first error, or a deadline error. */
export function whenReady (client: RedisLike, ms: number): Promise<true | Error> {
  if (client.status === 'ready') return Promise.resolve(true)
  return new Promise(resolve => {
    const done = (outcome: true | Error): void => {
      clearTimeout(timer)
      client.off('ready', onReady)
      client.off('error', done)
      resolve(outcome)
    }
    const onReady = (): void => done(true)
    const timer = setTimeout(() => done(new DeadlineError(ms)), ms)
    client.on('ready', onReady)
    client.on('error', done)
  })
}
