// The sliding window at its edges, end to end: HTTP through fastify.inject, decisions by the Lua
// script on a real Redis and its clock. Waits are real (Redis's clock cannot be moved) and short; every
// timing expectation is checked against the log's real entries and Redis TIME, with wide margins.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import rateGuard from '../lib/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

interface Setup {
  app: FastifyInstance
  redis: Redis
  log: string
}

async function setup (t: Test, max: number, timeWindow: number): Promise<Setup> {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, max, timeWindow })
  app.get('/', async () => 'ok')
  await app.ready()
  return { app, redis: client(t, url), log: identityKeys(nameSpace, 'all', '127.0.0.1').log }
}

async function redisNow (redis: Redis): Promise<number> {
  const [s, us] = await redis.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}

async function sleepUntil (redis: Redis, at: number): Promise<void> {
  const wait = at - await redisNow(redis)
  if (wait > 0) await sleep(wait)
}

async function scores (s: Setup): Promise<number[]> {
  const flat = await s.redis.zrange(s.log, '0', '-1', 'WITHSCORES')
  return flat.filter((_, i) => i % 2 === 1).map(Number)
}

/** `n` requests at once; their status codes in order of arrival. */
async function burst (s: Setup, n: number): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < n; i++) codes.push((await s.app.inject('/')).statusCode)
  return codes
}

t.test('a burst right after a fixed-window boundary is denied: at most N in any window, not 2N', async t => {
  const N = 4
  const W = 2000
  const s = await setup(t, N, W)

  // The boundary a fixed window of W would reset at, with room to spend N well before it.
  const now = await redisNow(s.redis)
  let boundary = Math.ceil(now / W) * W
  if (boundary - now < 800) boundary += W

  await sleepUntil(s.redis, boundary - 600)
  t.same(await burst(s, N), Array(N).fill(200), 'N requests near the end of the fixed window are allowed')
  const spent = await scores(s)
  t.equal(spent.length, N)
  t.ok(spent.every(score => score < boundary), 'all N were decided before the boundary (in the old fixed window)')

  await sleepUntil(s.redis, boundary + 100)
  const after = await redisNow(s.redis)
  t.ok(after >= boundary, 'now past the boundary: a fixed window would have reset')
  t.same(await burst(s, N), Array(N).fill(429), 'the burst right after the boundary is denied: the N entries are still in the window')
  const end = await redisNow(s.redis)
  t.ok(spent.every(score => score + W > end), 'every denied request was decided while all N entries were still in the window')
  t.equal((await scores(s)).length, N, 'at most N entries in the window')

  // Once the N entries leave, N fit again, and no more.
  await sleepUntil(s.redis, Math.max(...spent) + W + 50)
  t.same(await burst(s, N + 1), [...Array(N).fill(200), 429], 'a full budget once the old entries left')
})

t.test('requests become allowed again exactly as old entries leave, one at a time', async t => {
  const N = 3
  const W = 2000
  const GAP = 700
  const s = await setup(t, N, W)

  // Spend the budget with entries GAP ms apart.
  for (let i = 0; i < N; i++) {
    if (i > 0) await sleep(GAP)
    t.equal((await s.app.inject('/')).statusCode, 200, `request ${i + 1} of ${N} allowed`)
  }
  const old = await scores(s)
  t.equal(old.length, N)
  for (let i = 1; i < N; i++) t.ok(old[i]! - old[i - 1]! >= GAP - 50, `entries ${i} and ${i + 1} are about ${GAP} ms apart`)
  t.equal((await s.app.inject('/')).statusCode, 429, 'the budget is spent')

  for (let i = 0; i < N; i++) {
    const leaves = old[i]! + W
    // Shortly before entry i leaves: still denied.
    await sleepUntil(s.redis, leaves - 250)
    const before = await s.app.inject('/')
    const decidedBy = await redisNow(s.redis)
    t.ok(decidedBy < leaves, `decided before entry ${i + 1} left`)
    t.equal(before.statusCode, 429, `denied just before entry ${i + 1} leaves`)

    // Shortly after it leaves: exactly one request fits, the next is denied.
    await sleepUntil(s.redis, leaves + 100)
    const allowed = await s.app.inject('/')
    const denied = await s.app.inject('/')
    const decidedAfter = await redisNow(s.redis)
    t.ok(i + 1 >= N || decidedAfter < old[i + 1]! + W, `both decided before entry ${i + 2} left`)
    t.equal(allowed.statusCode, 200, `one request allowed once entry ${i + 1} left`)
    t.equal(allowed.headers['x-ratelimit-remaining'], '0', 'and it fills the only free place')
    t.equal(denied.statusCode, 429, 'the next one is denied again')
  }

  const now = await scores(s)
  t.equal(now.length, N, 'the log holds exactly N entries')
  t.ok(now.every(score => score > old[N - 1]!), 'all old entries left, replaced one at a time')
})

t.test('a concurrent burst gets exactly N through, and the log never holds more than N', async t => {
  const N = 5
  const s = await setup(t, N, 10_000)
  const results = await Promise.all(Array.from({ length: 4 * N }, () => s.app.inject('/')))
  t.equal(results.filter(r => r.statusCode === 200).length, N, 'exactly N allowed')
  t.equal(results.filter(r => r.statusCode === 429).length, 3 * N, 'the rest denied')
  t.same(results.filter(r => r.statusCode === 200).map(r => r.headers['x-ratelimit-remaining']).sort(),
    Array.from({ length: N }, (_, i) => String(i)), 'each allowed request saw its own place in the log')
  t.equal((await scores(s)).length, N)
})
