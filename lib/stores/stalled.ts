import { performance } from 'node:perf_hooks'
import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { deadline } from '../deadline.js'
import { isCluster } from './client.js'
import type { RedisLike } from '../types.js'
import { warn } from '../warnings.js'

// What is done with a connection that takes commands and returns nothing (lib/silence.ts tells when).
//
// The connection may be stalled (a hung load balancer or NAT: the socket stays open, bytes stop), or Redis
// itself may not answer (frozen, busy, or holding writes): from one connection these look alike. A client the
// plugin made asks Redis over a fresh connection first, with what the old one waits on: a script that may
// write, which Redis holds while writes are paused (`CLIENT PAUSE WRITE`, and `FAILOVER`'s pause) as it holds
// the old connection's, beside a PING, which it answers even then. When the script is answered with the PING,
// the old connection is the dead part: it is cut, and ioredis makes it anew (its pending commands fail; the
// breaker's next probe goes over the new one), unless the old one was heard from meanwhile. When it is not
// answered, or only well after the PING (held by a pause that ended while the fresh connection waited: the old
// connection's replies are on their way too), cutting would only add a reconnection to Redis's own outage or
// pause, so the connection is kept (the PING tells which, for the log). A Cluster
// is cut without asking (a fresh cluster connection is a slot table's worth of work). A lent client is the
// app's: it is told what to set, at most once per `quietMs`.

/** How long the fresh connection has to answer: a healthy Redis answers in a few ms. */
const PROBE_MS = 1000
/**
 * The fresh connection's script: it has no flags, so Redis takes it for one that may write and holds it while
 * writes are paused; it writes nothing, so it runs under `noeviction` with memory full, and needs no key.
 */
const MAY_WRITE = 'return 1'

/** What is logged when the fresh connection's script is held: Redis is not writing. */
const PAUSED = 'rate-guard: Redis holds a fresh connection\'s script too: writes are paused (CLIENT PAUSE WRITE, ' +
  'or a FAILOVER under way); the connection is kept (failMode decides until Redis writes again)'
/** What is logged when the fresh connection gets no answer either: Redis is not answering at all. */
const SILENT = 'rate-guard: Redis does not answer a fresh connection either; the connection is kept (failMode decides until ' +
  'Redis answers)'
/** What is logged, once per quietMs, when a lent client's connection stops answering: it is the app's to cut. */
const LENT_STALLED = 'rate-guard: the connection of the Redis client lent to rate-guard stopped answering and stays open; ioredis ' +
  'will not replace it by itself. Give the client socketTimeout (e.g. 5000) so a stalled connection is cut and made again'

/** A script answered this long after the PING sent with it was held: writes were paused when it came. */
const HELD_MS = 100

/** What a fresh connection was answered: the script (Redis takes writes), a PING alone (writes are held), or nothing. */
type Fresh = 'writes' | 'paused' | 'nothing'

export function onSilence (
  client: RedisLike, owned: boolean, log: FastifyBaseLogger, quietMs: number
): (err: Error, quiet: () => boolean) => void {
  let lastSaid = -Infinity
  let asking = false
  return (err, quiet) => {
    // Only a connection that says it is up can be silent: one being made is the client's to finish.
    if (client.status !== 'ready' || asking) return
    if (owned) {
      if (isCluster(client)) return cut(client, err, log)
      asking = true
      // freshAnswer never rejects: it says what Redis answered.
      freshAnswer(client, PROBE_MS).then(answer => {
        asking = false
        // Heard from meanwhile (a frozen Redis thawed while the fresh connection waited): not dead after all.
        if (!quiet()) return
        if (answer === 'writes') cut(client, err, log)
        else if (answer === 'paused') warn(log, 'REDIS_STALLED', PAUSED, { err })
        else warn(log, 'REDIS_STALLED', SILENT, { err })
      })
      return
    }
    if (Date.now() - lastSaid < quietMs) return
    lastSaid = Date.now()
    warn(log, 'REDIS_STALLED', LENT_STALLED, { err })
  }
}

function cut (client: RedisLike, err: Error, log: FastifyBaseLogger): void {
  warn(log, 'REDIS_STALLED', 'rate-guard: the connection to Redis stopped answering; reconnecting', { err })
  client.disconnect(true)
}

/** What Redis answers, within `ms`, a PING and a script that may write over a connection of its own (closed after). */
async function freshAnswer (client: Redis, ms: number): Promise<Fresh> {
  // Closed in `finally` whatever happened, which also ends its reconnecting.
  const fresh = client.duplicate({ lazyConnect: false, enableOfflineQueue: true, connectionName: 'rate-guard-probe' })
  fresh.on('error', () => {})
  try {
    // When each was answered (performance.now()), or undefined.
    const answered = async (call: Promise<unknown>): Promise<number | undefined> =>
      await deadline(call, ms).then(() => performance.now(), () => undefined)
    const [pong, script] = await Promise.all([answered(fresh.ping()), answered(fresh.eval(MAY_WRITE, 0))])
    if (pong === undefined) return 'nothing'
    return script !== undefined && script - pong < HELD_MS ? 'writes' : 'paused'
  } finally {
    fresh.disconnect()
  }
}
