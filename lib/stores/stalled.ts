import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { deadline } from '../deadline.js'
import { isCluster } from './redis.js'
import type { RedisLike } from '../types.js'

// What is done with a connection that takes commands and returns nothing (lib/silence.ts tells when).
//
// The connection may be stalled (a hung load balancer or NAT: the socket stays open, bytes stop), or Redis
// itself may not answer (frozen, busy): from one connection the two look alike. A client the plugin made asks
// Redis over a fresh connection first. When that answers, the old connection is the dead part: it is cut, and
// ioredis makes it anew (its pending commands fail; the breaker's next probe goes over the new one), unless the
// old one was heard from meanwhile. When it does not, cutting would only add a reconnection to Redis's own
// outage, so the connection is kept. A Cluster
// is cut without asking (a fresh cluster connection is a slot table's worth of work). A lent client is the
// app's: it is told what to set, at most once per `quietMs`.

/** How long the fresh connection has to answer: a healthy Redis answers in a few ms. */
const PROBE_MS = 1000

export function onSilence (client: RedisLike, owned: boolean, log: FastifyBaseLogger, quietMs: number): (err: Error, quiet: () => boolean) => void {
  let lastSaid = -Infinity
  let asking = false
  return (err, quiet) => {
    // Only a connection that says it is up can be silent: one being made is the client's to finish.
    if (client.status !== 'ready' || asking) return
    if (owned) {
      if (isCluster(client)) return cut(client, err, log)
      asking = true
      // freshAnswers never rejects: it says whether Redis answered.
      freshAnswers(client, PROBE_MS).then(answers => {
        asking = false
        // Heard from meanwhile (a frozen Redis thawed while the fresh connection waited): not dead after all.
        if (!quiet()) return
        if (answers) cut(client, err, log)
        else log.warn({ err }, 'rate-guard: Redis does not answer a fresh connection either; the connection is kept (failMode decides until Redis answers)')
      })
      return
    }
    if (Date.now() - lastSaid < quietMs) return
    lastSaid = Date.now()
    log.warn({ err }, 'rate-guard: the connection of the Redis client lent to rate-guard stopped answering and stays open; ioredis will not replace it by itself. Give the client socketTimeout (e.g. 5000) so a stalled connection is cut and made again')
  }
}

function cut (client: RedisLike, err: Error, log: FastifyBaseLogger): void {
  log.warn({ err }, 'rate-guard: the connection to Redis stopped answering; reconnecting')
  client.disconnect(true)
}

/** Whether Redis answers a PING over a connection of its own within `ms` (the connection closed after). */
async function freshAnswers (client: Redis, ms: number): Promise<boolean> {
  // Closed in `finally` whatever happened, which also ends its reconnecting.
  const fresh = client.duplicate({ lazyConnect: false, enableOfflineQueue: true, connectionName: 'rate-guard-probe' })
  fresh.on('error', () => {})
  try {
    return await deadline(fresh.ping(), ms).then(() => true, () => false)
  } finally {
    fresh.disconnect()
  }
}
