// The Redis every test talks to. Tests fail, never skip, when there is no
// Redis: the error says how to get one.
//
//   const { url } = await getRedis(t)            // shared by the test file
//   const redis = client(t, url)                  // closed by t.teardown
//   const prefix = uniquePrefix()                 // 't-1a2b3c4d5e6f:'
//   const server = await startRedisServer(t)      // own process: kill/freeze/restart
//
// Call these inside a test (or t.before), not at the top level of a file.
import { randomBytes } from 'node:crypto'
// Named import: under NodeNext a default import of ioredis is typed as the
// module object, not the class (it works at runtime, but tsc rejects it).
import { Redis, type RedisOptions } from 'ioredis'
import tap from 'tap'
import { changesChannel } from '../../lib/changes.js'
import { containerEngineAnswers, startContainerRedis, TESTCONTAINERS, TESTCONTAINERS_INSTALL } from './container.js'
import { allowing } from './lag.js'
import { HOW_TO_GET_REDIS, startRedisServer, type Teardownable } from './redis-server.js'

export { freePort, startRedisServer, type RedisProcess, type Teardownable } from './redis-server.js'
export { timeVariant } from './lua.js'

export interface RedisInfo {
  url: string
  host: string
  port: number
}

let shared: Promise<RedisInfo> | undefined

/**
 * The Redis shared by every test in this process (one test file), found in
 * this order: REDIS_URL; a container when a container engine answers;
 * `redis-server` from PATH on a free loopback port. Whatever was started is
 * stopped when the file's root test ends (or the process exits).
 * Shared: use `uniquePrefix()` for keys, and never FLUSHALL it.
 */
export async function getRedis (t: Teardownable): Promise<RedisInfo> {
  // The shared server outlives the test that asked first (`t`), so its
  // cleanup belongs to the root test of the file.
  shared ??= resolveRedis()
  return await shared
}

/**
 * getRedis without the cache: finds (or starts) a Redis every call. Only
 * for the harness's own tests (which also name the testcontainers package,
 * to try one that is not installed); anything started stops with the root test.
 */
export async function resolveRedis (testcontainers = TESTCONTAINERS): Promise<RedisInfo> {
  const fromEnv = process.env.REDIS_URL
  if (fromEnv !== undefined && fromEnv !== '') return await checkUrl(fromEnv)

  const notes: string[] = []
  if (await containerEngineAnswers()) {
    try {
      const container = await startContainerRedis(testcontainers)
      if (container !== undefined) {
        tap.teardown(async () => { await container.stop() })
        return { url: `redis://${container.host}:${container.port}`, host: container.host, port: container.port }
      }
      // Not a failure: the package is left out of the install on purpose.
      const note = `a container engine answers, but ${testcontainers} is not installed ` +
        `(\`${TESTCONTAINERS_INSTALL}\` adds the container path)`
      notes.push(note)
      tap.comment(`${note}; trying redis-server`)
    } catch (err) {
      // Loud, not silent: the run goes on with redis-server, but says why.
      const note = `a container engine answers, but no Redis container: ${(err as Error).message}`
      notes.push(note)
      tap.comment(`${note}; trying redis-server`)
    }
  }

  try {
    const server = await startRedisServer(tap)
    return { url: server.url, host: server.host, port: server.port }
  } catch (err) {
    notes.push(`redis-server: ${(err as Error).message}`)
  }
  throw new Error(`No Redis for the tests. ${HOW_TO_GET_REDIS}\n${notes.join('\n')}`)
}

/** Fail early and clearly when REDIS_URL points at nothing. */
async function checkUrl (url: string): Promise<RedisInfo> {
  const parsed = new URL(url)
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: 2_000, maxRetriesPerRequest: 0, retryStrategy: () => null })
  redis.on('error', () => {})
  try {
    await redis.connect()
    await redis.ping()
  } catch (err) {
    throw new Error(`REDIS_URL=${url} does not answer PING (${(err as Error).message}). ${HOW_TO_GET_REDIS}`)
  } finally {
    redis.disconnect()
  }
  return { url, host: parsed.hostname.replace(/^\[|\]$/g, ''), port: Number(parsed.port || 6379) }
}

/**
 * An ioredis client for `url`, disconnected by `t.teardown`. Disconnect
 * (not QUIT) so teardown never waits on a server a test killed or froze. It has an 'error' listener, as an
 * app's should (else the plugin warns, FST_RATE_GUARD_NO_ERROR_LISTENER, and ioredis prints each error).
 */
export function client (t: Teardownable, url: string, opts: RedisOptions = {}): Redis {
  const redis = new Redis(url, opts)
  redis.on('error', () => {})
  t.teardown(() => { redis.disconnect() })
  return redis
}

/** A key namespace of its own for one test: `t-<12 hex>:`. No {hash tag}. */
export function uniquePrefix (): string {
  return `t-${randomBytes(6).toString('hex')}:`
}

/** Every key under `nameSpace`, by SCAN (never KEYS), sorted and without repeats. */
export async function scanKeys (redis: Redis, nameSpace: string): Promise<string[]> {
  const found = new Set<string>()
  let cursor = '0'
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${nameSpace}*`, 'COUNT', 1000)
    cursor = next
    for (const key of batch) found.add(key)
  } while (cursor !== '0')
  return [...found].sort()
}

/**
 * Resolves once `redis` is ready. Unlike `events.once`, a connection error on the way (a reconnect that
 * raced a restart) does not reject: the client retries by itself, and its 'ready' event is what counts.
 */
export async function ready<T extends Redis> (redis: T): Promise<T> {
  if (redis.status !== 'ready') await new Promise(resolve => redis.once('ready', resolve))
  return redis
}

/**
 * Polls until `check` holds: a server-side change that no client event reports. Gives up after `ms`, and the
 * slack the lag measured meanwhile allows (lag.ts).
 */
export async function until (check: () => Promise<boolean>, what: string, ms = 3000): Promise<void> {
  const started = performance.now()
  while (!(await check())) {
    if (performance.now() - started > allowing(ms, started)) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

/**
 * The commands a decision goes as: FCALL (the FUNCTION library's), and EVALSHA and EVAL (before the library is
 * loaded, and where the server refuses it; ioredis sends a script's text the first time on a connection).
 */
export const SCRIPT_COMMANDS: readonly string[] = ['fcall', 'evalsha', 'eval']

/** Script calls (`SCRIPT_COMMANDS`) Redis has counted since it started or the last CONFIG RESETSTAT. */
export async function scriptCalls (redis: Redis): Promise<number> {
  const stats = String(await redis.info('commandstats'))
  return [...stats.matchAll(new RegExp(`^cmdstat_(?:${SCRIPT_COMMANDS.join('|')}):calls=(\\d+)`, 'gm'))].reduce((sum, [, calls]) => sum + Number(calls), 0)
}

/** Calls of `command` (lower case: `scan`, `zrevrange`) Redis has counted since it started or the last CONFIG RESETSTAT. */
export async function commandCalls (redis: Redis, command: string): Promise<number> {
  const stats = String(await redis.info('commandstats'))
  return Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0)
}

/** Waits until `count` connections are subscribed to the operators' changes channel of `nameSpace`. */
export async function subscribed (observer: Redis, nameSpace: string, count: number): Promise<void> {
  await until(async () => Number(((await observer.pubsub('NUMSUB', changesChannel(nameSpace))) as [string, number])[1]) === count, `${count} change subscriptions`)
}
