import type { FastifyInstance } from 'fastify'
import { Breaker } from './breaker.js'
import { announceChanges, listenForChanges } from './changes.js'
import { Decider } from './decider.js'
import { deadline } from './deadline.js'
import { RedisNotReadyError, RedisRefusedError } from './errors.js'
import { HeldAnswers } from './held-answers.js'
import { isPermanent, TROUBLE_LOG_INTERVAL } from './trouble.js'
import { identityKeys } from './stores/key-names.js'
import { MemoryStore } from './stores/memory.js'
import { RedisStore } from './stores/redis.js'
import { createClient, evictionPolicy, isCluster, queueingOptions, whenReady } from './stores/client.js'
import { KEY_LOCKING } from './stores/scripts.js'
import type { Clock, Locking } from './stores/scripts.js'
import { onSilence } from './stores/stalled.js'
import type { DecideInput } from './stores/store.js'
import type { ResolvedOptions } from './options/resolved.js'
import type { RedisLike } from './types.js'
import { warn as say, type Warn } from './warnings.js'

// Where a registration's requests are decided: in process when no Redis is given (with the warning that
// limits are per process), else a Redis store (a client made here or lent), with its breaker, its held
// answers and their changes subscription, and the checks at start-up (TIME in scripts, per-key locking, EVALSHA
// allowed, eviction policy).

/** What traffic gets while Redis does not answer, per `failMode`: said when the plugin starts without it. */
const UNTIL_REDIS = Object.freeze({
  closed: "every limited request is answered 503 (failMode: 'closed'); failMode: 'open' lets requests through unenforced, " +
    "'local' limits each instance on its own, or strict: true refuses to start",
  open: "every limited request goes through unenforced, marked X-RateLimit-Enforced: false (failMode: 'open')",
  local: "each instance limits on its own, in process (failMode: 'local')"
})

/** Said once when the app lends a client with no 'error' listener: ioredis prints each error event then. */
const NO_ERROR_LISTENER = "rate-guard: the Redis client lent to rate-guard has no 'error' listener, so ioredis prints " +
  "'[ioredis] Unhandled error event' on every failed connection attempt while Redis is down. Give it one, e.g. " +
  "redis.on('error', err => app.log.error({ err }, 'redis')); rate-guard reports Redis trouble itself, once per interval"

/** How long registration waits for Redis to be ready before starting degraded (it keeps reconnecting). */
const READY_WAIT = 2000

export async function openDecider (fastify: FastifyInstance, opts: ResolvedOptions, warn: Warn): Promise<Decider> {
  const { timeout, cache, redis: given } = opts
  const local = (): MemoryStore => new MemoryStore({
    cache,
    onFull: () => say(fastify.log, 'STORE_FULL', 'rate-guard: the in-process store is full of clients at their limits: ' +
      'newcomers share budgets (64 per budget) until room is made; raise cache if this is ordinary traffic', { cache })
  })
  if (given === undefined) return inProcess(fastify, opts, warn, local)

  const owned = typeof given === 'string' || Array.isArray(given)
  const client = owned ? await createClient(given as string | readonly string[], timeout) : given as RedisLike
  const held = opts.banCache ? new HeldAnswers(cache) : undefined
  let stopListening = (): void => {}
  try {
    const { readiness, clock, locking } = await serverTraits(fastify, opts, client, warn)
    // A client made just now has no commands of ours or anyone's: only a lent one can make this throw.
    const store = new RedisStore(client, owned, opts.nameSpace, { clock, locking })
    if (held !== undefined) {
      stopListening = listenForChanges(client, opts.nameSpace, held, fastify.log)
      fastify.addHook('onClose', async () => stopListening())
    }
    const breaker = breakerOf(fastify, opts, client)
    const decider = new Decider({
      held,
      announce: announceChanges(client, opts.nameSpace, held),
      store,
      remote: true,
      timeout,
      local,
      breaker,
      nameSpace: opts.nameSpace,
      silent: onSilence(client, owned, fastify.log, TROUBLE_LOG_INTERVAL),
      log: fastify.log
    })
    watchErrors(fastify, client, owned, decider, warn)
    await checkStartup(fastify, opts, store, readiness, warn)
    return decider
  } catch (err) {
    stopListening()
    if (owned) client.disconnect()
    throw err
  }
}

/** No Redis given: the in-process store decides (with the warning that limits are per process, unless the app gave a store). */
function inProcess (fastify: FastifyInstance, opts: ResolvedOptions, warn: Warn, local: () => MemoryStore): Decider {
  // With a store of the app's own, the in-process store decides only for failMode: 'local'.
  if (opts.store === undefined) {
    const hint = fastifyRedisClient(fastify) === undefined
      ? ''
      : ' (to count in the Redis @fastify/redis decorates, give redis: fastify.redis)'
    warn('IN_PROCESS', 'rate-guard: no Redis configured, so limits are kept in this process only: ' +
      `each instance of the app counts on its own${hint}`)
  }
  return new Decider({ store: local(), remote: false, timeout: opts.timeout, local, breaker: undefined })
}

/** Whether Redis was ready within the wait, whose clock the scripts read, and how a script locks. */
interface ServerTraits {
  readiness: true | Error
  clock: Clock
  locking: Locking
}

/**
 * What the server is, asked once at start: whether it was ready within the wait (a Redis down or hung is
 * failMode's from the start), whose clock the scripts read, and how a script locks.
 */
async function serverTraits (fastify: FastifyInstance, opts: ResolvedOptions, client: RedisLike, warn: Warn): Promise<ServerTraits> {
  let readiness = await whenReady(client, READY_WAIT)
  let clock = opts.clock
  if (clock === 'redis' && readiness === true) {
    const time = await timeInScripts(client)
    if (time === 'refused') clock = 'app'
    else if (time !== true) readiness = time
  }
  if (clock === 'app') {
    const why = opts.clock === 'app' ? "clock: 'app'" : 'this Redis refuses TIME in scripts, as ElastiCache Serverless does'
    warn('APP_CLOCK', `rate-guard: decisions read this app's clock, not Redis's (${why}): keep every instance's clock in sync (NTP), ` +
      "or a client's window is as wide as their skew", { clock })
  }
  // A server that locks per key (Upstash) runs a script under its global lock unless the script asks.
  const locking = readiness === true && !isCluster(client) && await takesKeyLocking(client) ? 'keys' : 'global'
  if (locking === 'keys') {
    fastify.log.info({ locking }, 'rate-guard: this server locks per key (as Upstash does): ' +
      'each script call locks only its own keys (allow-key-locking)')
  }
  return { readiness, clock, locking }
}

/** The breaker (unless `breaker: false`), told each time the client is ready again. */
function breakerOf (fastify: FastifyInstance, opts: ResolvedOptions, client: RedisLike): Breaker | undefined {
  if (opts.breaker === null) return undefined
  const breaker = new Breaker(opts.breaker.threshold, opts.breaker.coolDownMs, undefined, opts.nameSpace)
  const connected = (): void => breaker.connected()
  client.on('ready', connected)
  fastify.addHook('onClose', async () => { client.off('ready', connected) })
  return breaker
}

/** A client made here reports its errors as Redis trouble; a lent one is the app's, warned about what it lacks. */
function watchErrors (fastify: FastifyInstance, client: RedisLike, owned: boolean, decider: Decider, warn: Warn): void {
  if (owned) {
    client.on('error', (err: Error) => decider.report(err, fastify.log))
    return
  }
  for (const option of queueingOptions(client)) {
    warn('OFFLINE_QUEUE', 'rate-guard: the Redis client lent to rate-guard queues commands while disconnected; the decision deadline ' +
      'still holds, but queued commands may spend quota after the request was answered. Set enableOfflineQueue: false', { option })
  }
  // A lent client is the app's: its 'error' events are the app's to handle, never silenced here.
  if (client.listenerCount('error') === 0) warn('NO_ERROR_LISTENER', NO_ERROR_LISTENER)
}

/**
 * Whether a ready Redis lets a script call `TIME`: `true`, `'refused'` (a server with TIME disabled or renamed:
 * the scripts read the app's clock), or the error of a Redis that did not answer within the wait (it starts
 * degraded, as one not ready). Another refusal (an ACL user without EVAL) is the start-up check's to report.
 */
async function timeInScripts (client: RedisLike): Promise<true | 'refused' | Error> {
  try {
    await deadline(client.eval("return redis.call('TIME')[1]", 0) as Promise<unknown>, READY_WAIT)
    return true
  } catch (err) {
    if (/\bTIME\b|unknown (redis )?command|not allowed from script/i.test((err as Error).message)) return 'refused'
    return isPermanent(err as Error) ? true : err as Error
  }
}

/**
 * Whether a ready server takes the script flag `allow-key-locking` (Upstash, where a script otherwise holds the
 * whole server): Redis and Valkey refuse a flag they do not know (and Redis 6 any shebang), so they keep
 * scripts as they are; so does a server that does not answer within the wait (the global lock works anywhere).
 */
async function takesKeyLocking (client: RedisLike): Promise<boolean> {
  try {
    await deadline(client.eval(`${KEY_LOCKING}\nreturn 1`, 0) as Promise<unknown>, READY_WAIT)
    return true
  } catch {
    return false
  }
}

/** What an identity no client can have looks like to the script: a read-only decision proves EVALSHA works. */
const PROBE: Omit<DecideInput, 'keys'> = { limits: [{ max: 1, windowMs: 1, burst: 1 }], ban: null, peek: true }

/**
 * Once Redis was ready within the wait (`readiness`), runs the script once read-only: a Redis that refuses it
 * (an ACL user without EVALSHA, which stays the functions' fallback) fails registration; then loads the
 * FUNCTION library. A Redis that is down or hung fails it only with `strict`; otherwise
 * the plugin starts degraded, `failMode` deciding until Redis answers.
 */
async function checkStartup (
  fastify: FastifyInstance, opts: ResolvedOptions, store: RedisStore, readiness: true | Error, warn: Warn
): Promise<void> {
  let outcome = readiness
  if (outcome === true) {
    try {
      await deadline(store.decide({ ...PROBE, keys: identityKeys(opts.nameSpace, 'probe', 'rate-guard:probe') }), READY_WAIT)
    } catch (err) {
      outcome = err as Error
    }
  }
  if (outcome === true) {
    // Decisions go FCALL from the first request; a load slower than the wait goes on, EVALSHA deciding meanwhile.
    await deadline(store.loadFunctions(), READY_WAIT).catch(() => {})
    return await checkEvictionPolicy(fastify, store.client, warn)
  }
  if (isPermanent(outcome)) throw new RedisRefusedError(outcome.message)
  if (opts.strict) throw new RedisNotReadyError(outcome.message)
  const fields = { err: outcome, failMode: opts.route.failMode }
  warn('REDIS_NOT_READY',
    `rate-guard: Redis is not ready; starting anyway, failMode decides until it answers: ${UNTIL_REDIS[opts.route.failMode]}`, fields)
}

async function checkEvictionPolicy (fastify: FastifyInstance, client: RedisLike, warn: Warn): Promise<void> {
  let policy: unknown
  try {
    policy = await deadline(evictionPolicy(client), READY_WAIT)
  } catch (err) {
    // Managed Redis often forbids CONFIG: nothing to warn about then.
    fastify.log.debug({ err }, 'rate-guard: could not read maxmemory-policy')
  }
  if (typeof policy === 'string' && policy !== 'noeviction') {
    warn('EVICTION_POLICY',
      'rate-guard: Redis maxmemory-policy is not noeviction: under memory pressure Redis may delete bans and counters', { policy })
  }
}

/** `fastify.redis` from `@fastify/redis`, when it is registered: named in the in-process warning, never taken unasked. */
function fastifyRedisClient (fastify: FastifyInstance): RedisLike | undefined {
  if (!fastify.hasDecorator('redis')) return undefined
  const redis = (fastify as unknown as { redis?: Partial<RedisLike> }).redis
  return typeof redis?.defineCommand === 'function' ? redis as RedisLike : undefined
}
