// `maxWaiting` over real HTTP (issue 41): the requests that wait (`maxWait`) in one registration, all its budgets
// and clients together, are at most `maxWaiting`. Many clients (an address each, through a trusted proxy's
// X-Forwarded-For, as many IPv6 /64s would be), on two routes, each with a request that would wait: exactly
// `maxWaiting` wait and go, the rest are refused at once (429 `FST_RATE_GUARD_TOO_MANY_WAITING`, `Retry-After`
// their own wait) having counted nothing, so a retry after it goes at once; once the waits are over, or a
// waiting client leaves, the places are free again. On both stores. (Before it, every one of them waited.)
import { performance } from 'node:perf_hooks'
import t from 'tap'
import type { Test } from 'tap'
import Fastify from 'fastify'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/types.js'
import { under } from './helpers/lag.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const WINDOW_MS = 2000
const ROOM = 5
/** The clients, each with one request allowed and one that would wait: more than the room holds. */
const CLIENTS = 12

interface Answer { status: number, waited: number | null, retryAfter: number | null, message: string, at: number, ms: number }

/** An app on loopback behind a trusted proxy (127.0.0.1), a room of `ROOM`, and routes `/a`, `/b` at 1 per window. */
async function listening (t: Test, store: RateGuardOptions, starts: string[], codes: string[], arrived = (): void => {}): Promise<string> {
  const app = Fastify({ trustProxy: '127.0.0.1' })
  app.addHook('onError', async (_request, _reply, err) => { codes.push((err as Error & { code: string }).code) })
  // Before the plugin's own hook, which decides in the same turn on the in-process store.
  app.addHook('onRequest', (_request, _reply, done) => {
    arrived()
    done()
  })
  await app.register(rateGuard, { ...store, max: 1, timeWindow: WINDOW_MS, maxWait: WINDOW_MS + 1000, maxWaiting: ROOM })
  for (const url of ['/a', '/b']) {
    app.get(url, async request => {
      starts.push(`${url} ${request.ip}`)
      return 'ok'
    })
  }
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => {
    // fetch's pool may have opened a connection it sent nothing on (after an abort): Node's server.close()
    // leaves such a one until headersTimeout. Every request of the test was answered before this.
    app.server.closeAllConnections()
    await app.close()
  })
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
}

async function get (url: string, client: string, signal?: AbortSignal): Promise<Answer> {
  const at = performance.now()
  const res = await fetch(url, { headers: { 'x-forwarded-for': client }, signal })
  const text = await res.text()
  const body = (res.status === 200 ? {} : JSON.parse(text)) as { message?: string }
  const header = (name: string): number | null => res.headers.get(name) === null ? null : Number(res.headers.get(name))
  return { status: res.status, waited: header('x-ratelimit-waited-ms'), retryAfter: header('retry-after'), message: body.message ?? '', at, ms: performance.now() - at }
}

/** Client `i`: an IPv6 /64 of its own, half of them on `/a`, half on `/b`. */
const clientOf = (i: number): string => `2001:db8:${(i + 1).toString(16)}::1`
const routeOf = (base: string, i: number): string => `${base}/${i % 2 === 0 ? 'a' : 'b'}`

for (const where of ['redis', 'memory'] as const) {
  t.test(`${where}: maxWaiting ${ROOM}, ${CLIENTS} clients on two routes each with a request that would wait: ${ROOM} wait, the rest are refused at once, and the room frees`, async t => {
    const store: RateGuardOptions = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 2000 } : {}
    const starts: string[] = []
    const codes: string[] = []
    const base = await listening(t, store, starts, codes)
    const clients = Array.from({ length: CLIENTS }, (_, i) => i)
    const first = await Promise.all(clients.map(async i => await get(routeOf(base, i), clientOf(i))))
    t.strictSame(first.map(answer => [answer.status, answer.waited]), clients.map(() => [200, null]), 'each client\'s first request goes at once')

    const second = await Promise.all(clients.map(async i => await get(routeOf(base, i), clientOf(i))))
    const waited = second.filter(answer => answer.status === 200)
    const refused = second.filter(answer => answer.status === 429)
    t.equal(waited.length, ROOM, `exactly ${ROOM} waited and went`)
    t.ok(waited.every(answer => answer.waited !== null && answer.waited > 0), `each said how long (${waited.map(answer => answer.waited).join(', ')} ms)`)
    t.equal(refused.length, CLIENTS - ROOM, `the other ${CLIENTS - ROOM} were refused`)
    t.ok(refused.every(answer => under(WINDOW_MS - 500, answer)), `at once, not after waiting (${refused.map(answer => Math.round(answer.ms)).join(', ')} ms)`)
    t.ok(refused.every(answer => /^Too many requests waiting on this server: retry in (1|2) seconds?$/.test(answer.message)), refused[0]?.message ?? 'none refused')
    t.strictSame(codes, refused.map(() => 'FST_RATE_GUARD_TOO_MANY_WAITING'), 'with a code of their own')
    // Their own wait, in whole seconds: at most the window, at least one second.
    t.ok(refused.every(answer => answer.retryAfter !== null && answer.retryAfter >= 1 && answer.retryAfter <= WINDOW_MS / 1000), `Retry-After ${refused.map(answer => answer.retryAfter).join(', ')}`)
    t.equal(starts.length, CLIENTS + ROOM, 'the handlers of the refused never ran')

    // Each refused client counted nothing: at its Retry-After, the window of its first request is over.
    const refusedClients = clients.filter(i => second[i]!.status === 429)
    const retry = Math.max(...refusedClients.map(i => second[i]!.retryAfter!))
    const since = Math.max(...refusedClients.map(i => second[i]!.at + second[i]!.ms))
    await new Promise(resolve => setTimeout(resolve, Math.max(0, since + retry * 1000 - performance.now())))
    const again = await Promise.all(refusedClients.map(async i => await get(routeOf(base, i), clientOf(i))))
    t.strictSame(again.map(answer => [answer.status, answer.waited]), refusedClients.map(() => [200, null]), 'after Retry-After, each refused client goes at once')

    // The waits are over: the room is empty again. Fresh clients, each with a request that waits: ROOM wait.
    const fresh = Array.from({ length: ROOM }, (_, i) => CLIENTS + i)
    await Promise.all(fresh.map(async i => await get(routeOf(base, i), clientOf(i))))
    const later = await Promise.all(fresh.map(async i => await get(routeOf(base, i), clientOf(i))))
    t.strictSame(later.map(answer => answer.status), fresh.map(() => 200), `once the waits are over, ${ROOM} wait again`)
    t.ok(later.every(answer => answer.waited !== null && answer.waited > 0), 'and each of them waited')
  })
}

t.test('a client that leaves while it waits frees its place in the room at once', async t => {
  const starts: string[] = []
  const codes: string[] = []
  let seen = 0
  let roomFull = (): void => {}
  const full = new Promise<void>(resolve => { roomFull = resolve })
  // The in-process store decides in the turn a request arrives: a turn after the room's last, it is full.
  const base = await listening(t, {}, starts, codes, () => { if (++seen === 2 * ROOM + 1) setImmediate(roomFull) })
  const clients = Array.from({ length: ROOM + 1 }, (_, i) => i)
  await Promise.all(clients.map(async i => await get(routeOf(base, i), clientOf(i))))
  const leaving = new AbortController()
  // ROOM clients wait, the first of them on a request it will leave.
  const waiting = clients.slice(0, ROOM).map(async i => await get(routeOf(base, i), clientOf(i), i === 0 ? leaving.signal : undefined).catch((err: Error) => err))
  await full
  t.equal((await get(routeOf(base, ROOM), clientOf(ROOM))).status, 429, 'the room full, one more is refused')
  leaving.abort()
  t.ok(await waiting[0] instanceof Error, 'a waiting client left')
  // Its place is free once its close is seen: the next that would wait waits.
  let next = await get(routeOf(base, ROOM), clientOf(ROOM))
  for (let i = 0; next.status === 429 && i < 50; i++) next = await get(routeOf(base, ROOM), clientOf(ROOM))
  t.equal(next.status, 200, 'the next request takes the place it left')
  t.ok(next.waited !== null && next.waited > 0, `and waited (${next.waited} ms)`)
  const rest = await Promise.all(waiting.slice(1))
  t.ok(rest.every(answer => !(answer instanceof Error) && answer.status === 200 && answer.waited !== null), 'the others waited and went')
  t.equal(starts.length, 2 * ROOM + 1, 'the handler of the one that left never ran')
})
