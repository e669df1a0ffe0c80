// Which store the examples use, decided the same way for `npm start` and `npm run demo`:
//   DEMO_IN_PROCESS=1  the in-process twin, even when a Redis is running;
//   REDIS_URL          that Redis, which must answer (a URL that does not is a mistake worth stopping for);
//   otherwise          a Redis on 127.0.0.1:6379 when one answers, else the in-process twin.

import { Redis } from 'ioredis'

const LOCAL = 'redis://127.0.0.1:6379'
const PROBE_MS = 500

/** @returns {Promise<{ redis: string | undefined, where: string, notice?: string }>} */
export async function chooseRedis (env = process.env) {
  if (env.DEMO_IN_PROCESS === '1') {
    return { redis: undefined, where: 'in process (DEMO_IN_PROCESS=1)' }
  }
  if (env.REDIS_URL) {
    if (await answers(env.REDIS_URL)) return { redis: env.REDIS_URL, where: `Redis at ${redact(env.REDIS_URL)} (REDIS_URL)` }
    throw new Error(`REDIS_URL is set, but Redis at ${redact(env.REDIS_URL)} did not answer PING within ${PROBE_MS} ms`)
  }
  if (await answers(LOCAL)) return { redis: LOCAL, where: `Redis at ${LOCAL}` }
  return {
    redis: undefined,
    where: 'in process',
    notice: `No Redis answered at ${LOCAL}, so limits are kept in this process (the in-process twin of the Lua ` +
      'script). Start redis-server or set REDIS_URL to see the shared, Redis-backed limiter.'
  }
}

/**
 * Whether a PING to `url` is answered within PROBE_MS; the probe client never retries or lingers.
 * @param {string} url
 */
async function answers (url) {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: PROBE_MS,
    commandTimeout: PROBE_MS,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null
  })
  client.on('error', () => {}) // the outcome is the answer below, not an event
  const timer = setTimeout(() => client.disconnect(), PROBE_MS)
  try {
    await client.connect()
    return (await client.ping()) === 'PONG'
  } catch {
    return false
  } finally {
    clearTimeout(timer)
    client.disconnect()
  }
}

/**
 * The URL without its password, for printing.
 * @param {string} url
 */
function redact (url) {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.toString()
  } catch {
    return '(unparsable URL)'
  }
}
