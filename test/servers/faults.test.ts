// Faults and fail modes on each Redis-compatible server (test/helpers/servers.ts), one server process of that
// binary each: frozen (every failMode answers within the deadline, the operator's client still waiting), back
// (exact again), restarted with its data lost (its script cache too: exact again, nothing remembered), and
// stopped (every failMode within the deadline). The full fault suites stay on the redis-server on PATH
// (test/fail-modes.test.ts, test/redis-faults.test.ts, test/edges/).
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { checkDegraded, makeApp, MODES } from '../helpers/fail-modes.js'
import { exactCodes, exactly, lend, redisDecides, watchEscapes } from '../helpers/faults.js'
import type { App } from '../helpers/faults.js'
import { ready } from '../helpers/redis.js'
import { eachServer, startServer } from '../helpers/servers.js'

// A server each, frozen, restarted and stopped: about 3 s a server on a quiet machine.
t.setTimeout(120_000)

const escaped = watchEscapes()
const MAX = 3

/** An app for each failMode on `redis`, Redis deciding for each before the fault. */
async function appsOn (t: Test, redis: Redis): Promise<Record<string, App>> {
  const apps: Record<string, App> = {}
  for (const [name, options] of Object.entries(MODES)) {
    apps[name] = await makeApp(t, { ...options, redis, max: MAX })
    t.ok(await redisDecides(apps[name].app, 'before'), `${name}: Redis decides before the fault`)
  }
  return apps
}

eachServer(t, 'frozen, thawed, restarted with its data lost, stopped: failMode answers within the deadline, exact again after', async (t, server) => {
  const proc = await startServer(t, server)
  // The client an app lends with default options (it queues while the server is frozen or gone), and one
  // that fails at once (no offline queue), each with the apps of every failMode.
  const queued = await ready(lend(t, proc.url))
  const failFast = await ready(lend(t, proc.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0 }))
  const frozenApps = await appsOn(t, queued)
  const stoppedApps = await appsOn(t, failFast)
  // Exactness is checked with a deadline no busy machine misses, and 503 (never 200) if it did, on a client of
  // its own that the test can wait for after the restart (a client the plugin made is not the test's to watch).
  const exactClient = await ready(lend(t, proc.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0 }))
  const exact = await makeApp(t, { redis: exactClient, failMode: 'closed', max: MAX, timeout: 2000 })

  proc.freeze()
  t.teardown(() => { proc.thaw() })
  let pinged = false
  const ping = queued.ping().then(() => { pinged = true })
  await checkDegraded(t, frozenApps, `${server.name} frozen`)
  t.notOk(pinged, 'the lent client itself is still waiting: the deadline alone bounded each answer')
  proc.thaw()
  await ping
  t.same(await exactCodes(exact.app, MAX), exactly(MAX), 'thawed: max + 1 requests give exactly one 429')

  // Restarted with its data lost: an identity at its limit before is counted from nothing after, exactly.
  const before = await Promise.all(Array.from({ length: MAX + 1 }, async () => (await exact.app.inject({ url: '/', headers: { 'x-api-key': 'kept' } })).statusCode))
  t.same(before.sort(), exactly(MAX), 'before the restart: the identity at its limit')
  await proc.restart()
  await Promise.all([ready(queued), ready(failFast), ready(exactClient)])
  const after = await Promise.all(Array.from({ length: MAX + 1 }, async () => (await exact.app.inject({ url: '/', headers: { 'x-api-key': 'kept' } })).statusCode))
  t.same(after.sort(), exactly(MAX), 'after the restart (data and scripts lost): counted from nothing, exactly max allowed')

  await proc.kill()
  await checkDegraded(t, stoppedApps, `${server.name} stopped`)
})

t.test('nothing escaped: no unhandled rejection, no unlistened error event', async t => {
  t.same(escaped.unhandled.map(String), [])
  t.same(escaped.unlistened, [])
})
