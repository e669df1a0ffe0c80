// Redis Cluster: the plugin on a real 3-master + 3-replica cluster of redis-server processes. Every
// decision's keys share one slot whatever the identity, and limiting is exact across instances. A killed
// master, a slot migrated by hand, and every node killed (then restarted) each leave every decision within
// the deadline, with limiting exact again afterwards. Measured latencies, recovery times and ghost hits are
// printed as comments (`npx tap test/cluster.test.ts -R tap` shows them).
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { Cluster } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { DEFAULTS } from '../lib/options/table.js'
import { GLOBAL_SCOPE, hashIdentity, identityKeys, scopeOf, sharedKeys } from '../lib/stores/key-names.js'
import { keySlot, slotTags } from '../lib/slots.js'
import { Masters } from '../lib/stores/masters.js'
import { indexOf } from '../lib/stores/ban-index.js'
import { RedisStore } from '../lib/stores/redis.js'
import { BATCH_MAX, Batcher } from '../lib/batcher.js'
import type { Decision, DecideInput } from '../lib/stores/store.js'
import { clusterReady, pollUntil, startCluster } from './helpers/cluster.js'
import { allowedBy, callsOf, identityOn, inputOf } from './helpers/cluster-batches.js'
import type { ClusterNode, TestCluster } from './helpers/cluster.js'
import { commandCalls, scanKeys, scriptCalls, uniquePrefix } from './helpers/redis.js'
import { watchEscapes } from './helpers/faults.js'
import { firstFulfilled } from './helpers/first.js'
import { allowing, overdue } from './helpers/lag.js'
import { prng } from './helpers/random.js'

/** The decision deadline of the latency cases: each answer is held to it plus the lag measured while it was out (lag.ts). */
const TIMEOUT = 150
/** Cases about correctness, not latency: a deadline no busy machine misses, and 503 (never 200) if it did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
/**
 * After a fault, how soon Redis must decide again: the breaker (default: open after 5 failures, one probe
 * per cool-down) may have opened just before Redis came back, so its cool-down plus one decision's deadline,
 * and the lag measured meanwhile. (The issue's bar, limiting again within 1 s of a promotion, is this on a
 * quiet machine: 500 + 150 + 100 ms.)
 */
function resumeBound (from: number, to: number): number {
  return allowing(DEFAULTS.breaker.coolDown + TIMEOUT, from, to)
}
/** The budget of `GET /exact`, a route of its own: a fresh budget to show limiting is exact after a fault. */
const EXACT_MAX = 5

// Whatever escapes during this file is recorded here and fails the last test.
const escaped = watchEscapes()

// Six redis-servers, a failover and a restart of them all: about 30 s on a quiet machine, 57 s seen beside two
// CPU-bound processes and other test runs, and tap's limit for a file is 60 s (.taprc).
t.setTimeout(150_000)

// Identities of any bytes: requests carry an index into this registry, and the key generator returns the
// identity itself, so no HTTP header rule stands between a hostile identity and the key it makes.
const registry: string[] = []
function idHeaders (identity: string): Record<string, string> {
  let index = registry.indexOf(identity)
  if (index === -1) index = registry.push(identity) - 1
  return { 'x-id': String(index) }
}
const keyGenerator = (request: { headers: Record<string, unknown> }): string => {
  const identity = registry[Number(request.headers['x-id'])]
  if (identity === undefined) throw new Error('a request without a registered identity')
  return identity
}

interface LogLine { level: number, msg: string, err?: { message?: string } }
interface App { app: FastifyInstance, logs: LogLine[], nameSpace: string }

/**
 * An app on the cluster: `redis` is a Cluster client lent to the plugin, or the node URLs (the plugin makes
 * and closes its own client). `GET /` is on the plugin's budget, `GET /exact` on its own with max EXACT_MAX.
 */
async function makeApp (t: Test, redis: Cluster | readonly string[], options: RateGuardOptions): Promise<App> {
  const logs: LogLine[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } } } })
  t.teardown(async () => { await app.close() })
  const nameSpace = options.nameSpace ?? uniquePrefix()
  await app.register(rateGuard, { max: 1_000_000, ...options, redis, nameSpace, keyGenerator })
  app.get('/', async () => 'ok')
  app.get('/exact', { config: { rateLimit: { max: EXACT_MAX } } }, async () => 'ok')
  await app.ready()
  return { app, logs, nameSpace }
}

/**
 * The plugin's own error-level lines (`rate-guard: …`). Fastify's error handler logs every 5xx reply at error
 * level by itself, so a failMode 'closed' 503 shows up there once per request whatever the plugin does.
 */
function ownErrors (logs: readonly LogLine[]): string[] {
  return logs.filter(line => line.level >= 50 && line.msg.startsWith('rate-guard')).map(line => `${line.msg} ${line.err?.message ?? ''}`)
}

interface Sample {
  identity: string
  /** When the request was sent, in ms since the case's own start. */
  at: number
  /** When the request was sent (performance.now()). */
  sentAt: number
  ms: number
  status: number
  /** Redis decided: an allowed request with the counts, or a 429/403. */
  decided: boolean
  res: LightMyRequestResponse
}

async function send (app: FastifyInstance, identity: string, origin: number, url = '/'): Promise<Sample> {
  const started = performance.now()
  const res = await app.inject({ url, headers: idHeaders(identity) })
  const ms = performance.now() - started
  const decided = (res.statusCode === 200 && 'x-ratelimit-remaining' in res.headers) || res.statusCode === 429 || res.statusCode === 403
  return { identity, at: started - origin, sentAt: started, ms, status: res.statusCode, decided, res }
}

/**
 * Whether Redis decides a request of `identity`, asked up to 10 times: before a fault, that it decides at all
 * (a healthy cluster on a loaded machine may miss the 150 ms deadline now and then).
 */
async function decides (app: FastifyInstance, identity: string): Promise<boolean> {
  for (let i = 0; i < 10; i++) if ((await send(app, identity, 0)).decided) return true
  return false
}

/** `count` calls of `fire`, one every `everyMs` on a fixed schedule (a slow answer never delays the next). */
async function paced<T> (count: number, everyMs: number, fire: (i: number) => Promise<T>): Promise<T[]> {
  const start = performance.now()
  const pending: Array<Promise<T>> = []
  for (let i = 0; i < count; i++) {
    const wait = start + i * everyMs - performance.now()
    if (wait > 0) await sleep(wait)
    pending.push(fire(i))
  }
  return await Promise.all(pending)
}

/** Runs `fn` over `items` with at most `width` at a time. */
async function pool<T, R> (items: readonly T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) {
      const i = next++
      results[i] = await fn(items[i]!)
    }
  }))
  return results
}

function worst (samples: readonly Sample[]): number {
  return Math.max(0, ...samples.map(s => s.ms))
}

function allWithin (t: Test, samples: readonly Sample[], what: string): void {
  t.same(overdue(TIMEOUT, samples.map(s => ({ at: s.sentAt, ms: s.ms }))), [],
    `${what}: all ${samples.length} answered within the deadline (${TIMEOUT} ms, plus the lag meanwhile); worst ${worst(samples).toFixed(1)} ms`)
}

/** max + 1 requests on a fresh budget: exactly one 429, the rest allowed by Redis. */
async function checkExact (t: Test, app: FastifyInstance, identity: string, what: string): Promise<void> {
  const statuses: number[] = []
  for (let i = 0; i <= EXACT_MAX; i++) statuses.push((await send(app, identity, 0, '/exact')).status)
  t.same(statuses, [...Array<number>(EXACT_MAX).fill(200), 429], `${what}: max + 1 requests give exactly one 429`)
}

const HOSTILE = [
  '', '}', '{', '{}', '{{}}', '}{', '{a}', 'a{}b', '{}}', '\0', '\0{\0}', '\r\n', '\r\nSet-Cookie: x=1', '\n{x}\r',
  'x'.repeat(16 * 1024), '{' + 'y'.repeat(16 * 1024) + '}', '🦀', '{🦀}', '\ud800', '\udfff{', 'ip:127.0.0.1', 'apikey:{}'
]
const ALPHABET = ['{', '}', '\0', '\r', '\n', ' ', ':', 'a', 'Z', '9', 'é', '字', '🦀', '\ud83d', '\u200b', '%', '\\', '"']

function randomIdentities (seed: number, count: number): string[] {
  const random = prng(seed)
  const pick = (n: number): number => Math.floor(random() * n)
  const ids = new Set(HOSTILE)
  while (ids.size < count) {
    const length = random() < 0.02 ? 1000 + pick(15_000) : pick(40)
    let id = ''
    for (let i = 0; i < length; i++) id += ALPHABET[pick(ALPHABET.length)]
    ids.add(id)
  }
  return [...ids]
}

let cluster: TestCluster

t.before(async () => {
  const started = performance.now()
  cluster = await startCluster(t)
  t.comment(`cluster of 3 masters + 3 replicas ready in ${Math.round(performance.now() - started)} ms`)
})

t.test('1,000 identities of any bytes: every decision in one slot, no CROSSSLOT, limited like any other', async t => {
  const seed = Number(process.env.CLUSTER_SEED ?? Date.now() % 1_000_000)
  const identities = randomIdentities(seed, 1000)
  t.comment(`seed ${seed} (CLUSTER_SEED=${seed} repeats this run)`)
  t.equal(identities.length, 1000)

  const { app, logs, nameSpace } = await makeApp(t, cluster.urls, { ...RELAXED, max: 1, timeWindow: '1 minute', ban: { threshold: 2, duration: '1 minute' } })

  // Where the cluster itself puts every key of every decision (CLUSTER KEYSLOT, one pipeline).
  const keysOf = identities.map(id => identityKeys(nameSpace, GLOBAL_SCOPE, id))
  const pipeline = cluster.nodes[0]!.redis.pipeline()
  for (const keys of keysOf) for (const key of [keys.log, keys.strikes, keys.banned]) pipeline.call('CLUSTER', 'KEYSLOT', key)
  const slots = (await pipeline.exec())!.map(([err, slot]) => err === null ? Number(slot) : NaN)
  const split = identities.filter((_, i) => !(slots[3 * i] === slots[3 * i + 1] && slots[3 * i] === slots[3 * i + 2] && Number.isInteger(slots[3 * i])))
  t.same(split.map(id => JSON.stringify(id.slice(0, 40))), [], 'the three keys of every identity are in one slot')
  const distinct = new Set(slots)
  t.ok(distinct.size > 900, `the identities spread over ${distinct.size} slots (the hash tag is the identity's hash, not a constant)`)
  t.equal(new Set(keysOf.map(keys => keys.log.length)).size, 1, 'every log key has the same length, whatever the identity')

  // Through the plugin: allowed, limited, banned — never a 503 (which is what a CROSSSLOT would give).
  const started = performance.now()
  const outcomes = await pool(identities, 20, async identity => {
    const samples: Sample[] = []
    for (let i = 0; i < 3; i++) samples.push(await send(app, identity, started))
    return samples
  })
  const wrong = outcomes.flatMap((samples, i) => {
    const statuses = samples.map(s => s.status)
    return statuses.join() === '200,429,403' ? [] : [`${JSON.stringify(identities[i]!.slice(0, 40))}: ${statuses.join()} ${samples.map(s => s.res.body.slice(0, 120)).join(' | ')}`]
  })
  t.same(wrong, [], 'every identity: allowed, then 429, then 403 (its ban starts)')
  t.same(logs.filter(line => line.level >= 40).map(line => `${line.msg} ${line.err?.message ?? ''}`), [], 'nothing logged: no CROSSSLOT, no Redis trouble')
  t.comment(`3,000 decisions, 20 at a time: worst ${worst(outcomes.flat()).toFixed(1)} ms`)

  // What landed in Redis: every identity's log and ban, nothing that is not one of their keys.
  const masters = await cluster.masters()
  const found = (await Promise.all(masters.map(async m => await scanKeys(m.redis, nameSpace)))).flat()
  const expected = new Set(keysOf.flatMap(keys => [keys.log, keys.strikes, keys.banned, indexOf(keys.banned, true)]))
  t.same(found.filter(key => !expected.has(key)), [], 'every key written is one of an identity\'s three, or the ban index of its slot')
  t.equal(found.filter(key => key.endsWith('}:bans')).length, new Set(slots).size, 'one ban index per slot an identity was banned in')
  const present = new Set(found)
  t.equal(keysOf.filter(keys => present.has(keys.log) && present.has(keys.banned)).length, identities.length, 'every identity has its log and its ban in the cluster')
})

t.test('4 instances, each with its own cluster client: exactly max allowed per identity', async t => {
  const nameSpace = uniquePrefix()
  const max = 10
  const perIdentity = 100
  // Two instances are given the node URLs, two lend a Cluster client of their own, one of them speaking
  // RESP2 (ioredis 6 speaks RESP3 by default): a mixed fleet still shares one budget exactly.
  const redisFor: Array<Cluster | readonly string[]> = [cluster.urls, cluster.urls, cluster.client(), cluster.client({ redisOptions: { protocol: 2 } })]
  const apps = await Promise.all(redisFor.map(async redis => (await makeApp(t, redis, { ...RELAXED, nameSpace, max })).app))
  // One identity on each master, so all three shards decide at once.
  const identities = await Promise.all((await cluster.masters()).map(async (m, i) => await identityOn(cluster, m, nameSpace, `shared-${i}`)))

  const replies = await Promise.all(identities.flatMap(identity => Array.from({ length: perIdentity }, async (_, i) => await send(apps[i % apps.length]!, identity, 0))))
  const observer = cluster.client()
  await clusterReady(observer)
  for (const identity of identities) {
    const mine = replies.filter(r => r.identity === identity)
    const allowed = mine.filter(r => r.status === 200)
    t.equal(allowed.length, max, `${identity}: exactly max allowed across 4 instances`)
    t.equal(mine.filter(r => r.status === 429).length, perIdentity - max, `${identity}: every other request limited (no 503)`)
    t.same(allowed.map(r => Number(r.res.headers['x-ratelimit-remaining'])).sort((a, b) => a - b), Array.from({ length: max }, (_, i) => i),
      `${identity}: remaining counts down from max - 1 to 0, each value once`)
    t.equal(await observer.zcard(identityKeys(nameSpace, GLOBAL_SCOPE, identity).log), max, `${identity}: the log holds exactly max entries`)
  }
  t.comment(`300 parallel decisions on 4 instances: worst ${worst(replies).toFixed(1)} ms`)
})

/** A store on its own cluster client, ready, whose batches are grouped by master from the first. */
async function groupingStore (t: Test, nameSpace: string): Promise<RedisStore> {
  const client = cluster.client()
  await clusterReady(client)
  const store = new RedisStore(client, false, nameSpace)
  const calls = callsOf(t, nameSpace)
  const masters = await cluster.masters()
  const pair = [await identityOn(cluster, masters[0]!, nameSpace, 'warm-a'), await identityOn(cluster, masters[0]!, nameSpace, 'warm-b')]
  // Two identities on one master: one call.
  await store.decideMany(pair.map(id => inputOf(nameSpace, id, 1_000_000)), 'sliding-log')
  if (calls.length !== 1) throw new Error(`two identities on one master took ${calls.length} calls`)
  calls.length = 0
  return store
}

t.test('a batch over the three masters: one call per master (Redis 7 cross-slot scripts), exact', async t => {
  const nameSpace = uniquePrefix()
  const store = await groupingStore(t, nameSpace)
  const calls = callsOf(t, nameSpace)
  const masters = await cluster.masters()
  const random = prng(29)
  const shuffled = <T>(list: T[]): T[] => list.map(item => [random(), item] as const).sort((a, b) => a[0] - b[0]).map(([, item]) => item)
  // A first batch loads the cross-slot scripts on every master (EVALSHA, then EVAL after NOSCRIPT).
  await store.decideMany(Array.from({ length: 60 }, (_, i) => inputOf(nameSpace, `load-${i}`, 3)), 'sliding-log')
  await store.decideMany(Array.from({ length: 60 }, (_, i) => inputOf(nameSpace, `load-${i}`, 3, 'fixed-window')), 'fixed-window')
  calls.length = 0
  await Promise.all(masters.map(async master => await master.redis.config('RESETSTAT')))

  // 200 requests over 50 identities (4 each, in a shuffled order), max 3: exactly 150 allowed.
  const identities = Array.from({ length: 50 }, (_, i) => `spread-${i}`)
  const owners = await Promise.all(identities.map(async id => await cluster.ownerOf(await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, id).log))))
  t.equal(new Set(owners).size, masters.length, 'the identities live on every master')
  const inputs = shuffled(identities.flatMap(id => Array.from({ length: 4 }, () => inputOf(nameSpace, id, 3))))
  const decisions = await store.decideMany(inputs, 'sliding-log')
  t.same(decisions.filter(d => d instanceof Error).map(String), [], 'no request failed')
  t.equal(decisions.filter(d => !(d instanceof Error) && d.status === 'allowed').length, 150, 'exactly 150 of 200 allowed')
  t.same([...allowedBy(inputs, decisions).values()], identities.map(() => 3), 'exactly max allowed per identity')
  t.same(calls.slice().sort((a, b) => a - b), owners.reduce<number[]>((counts, owner) => {
    counts[masters.indexOf(owner)]! += 4
    return counts
  }, masters.map(() => 0)).sort((a, b) => a - b), 'one lean call per master, each with its master\'s requests')
  const evals = await Promise.all(masters.map(async master => await scriptCalls(master.redis)))
  t.same(evals, masters.map(() => 1), 'each master ran one script call')
  for (const [i, id] of identities.entries()) {
    if (i % 10 === 0) t.equal(await owners[i]!.redis.zcard(identityKeys(nameSpace, GLOBAL_SCOPE, id).log), 3, `${id}: its log holds max entries, on its master`)
  }

  // The general script across slots too: a fixed window, and requests the lean script does not take (a cost of 2).
  calls.length = 0
  const windows = shuffled(identities.flatMap(id => Array.from({ length: 4 }, () => inputOf(nameSpace, id, 3, 'fixed-window'))))
  const counted = await store.decideMany(windows, 'fixed-window')
  t.same([...allowedBy(windows, counted).values()], identities.map(() => 3), 'fixed window: exactly max allowed per identity')
  t.equal(calls.length, masters.length, 'fixed window: one call per master')
  calls.length = 0
  const costly = identities.map(id => inputOf(nameSpace, `costly-${id}`, 3, 'sliding-log', 2))
  const costlyAnswers = await store.decideMany([...costly, ...costly], 'sliding-log')
  t.same([...allowedBy([...costly, ...costly], costlyAnswers).values()], identities.map(() => 1), 'a cost of 2 of 3: one of two allowed per identity')
  t.equal(calls.length, masters.length, 'the general script: one call per master')
})

t.test('the Batcher on a Cluster: one turn\'s requests gather by master, each master\'s call full (BATCH_MAX) whatever the number of masters; sent in the check phase of their turn', async t => {
  const nameSpace = uniquePrefix()
  const store = await groupingStore(t, nameSpace)
  const calls = callsOf(t, nameSpace)
  const masters = await cluster.masters()
  const identities = Array.from({ length: 150 }, (_, i) => `turn-${i}`)
  const owners = await Promise.all(identities.map(async id => await cluster.ownerOf(await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, id).log))))
  const perMaster = masters.map(master => owners.filter(owner => owner === master).length)
  t.ok(perMaster.every(n => n > BATCH_MAX), `every master serves more than a batch of them (${perMaster.join(', ')})`)
  const sent: number[] = []
  const batcher = new Batcher(async (inputs, algorithm) => {
    sent.push(inputs.length)
    return await store.decideMany(inputs, algorithm)
  }, 5_000, () => {}, undefined, input => store.shardOf(input))
  const answers: Array<Promise<Decision | Error>> = identities.map(id => new Promise(resolve => batcher.add(inputOf(nameSpace, id, 3) as DecideInput & { algorithm: 'sliding-log' }, result => resolve(result))))
  const full = sent.length
  t.equal(full, perMaster.reduce((n, each) => n + Math.floor(each / BATCH_MAX), 0), 'each master\'s batch went as soon as it was full, in the same turn')
  const decisions = await Promise.all(answers)
  t.same(decisions.filter(d => d instanceof Error).map(String), [], 'every request decided')
  t.same(sent.slice(full).sort((a, b) => a - b), perMaster.map(n => n % BATCH_MAX).filter(n => n > 0).sort((a, b) => a - b), 'the rest went in the check phase: one batch per master')
  t.same(calls.slice().sort((a, b) => a - b), sent.slice().sort((a, b) => a - b), 'each batch one script call on its master (none split)')
  const shards = new Set(identities.map(id => store.shardOf(inputOf(nameSpace, id, 3))))
  t.same([...shards].sort(), masters.map(master => `127.0.0.1:${master.port}`).sort(), 'a shard is its master\'s address: three shards')
})

t.test('a grouped call refused as a whole (out of memory): each of its requests gets the error, named in its lua/ file; never a request alone', async t => {
  const nameSpace = uniquePrefix()
  const store = await groupingStore(t, nameSpace)
  const calls = callsOf(t, nameSpace)
  const masters = await cluster.masters()
  const identities = Array.from({ length: 30 }, (_, i) => `oom-${i}`)
  // The cross-slot scripts carry flags, so Redis refuses them before they run once memory is over maxmemory.
  await Promise.all(masters.map(async master => await master.redis.config('SET', 'maxmemory', '1')))
  t.teardown(async () => { await Promise.all(masters.map(async master => await master.redis.config('SET', 'maxmemory', '0'))) })
  for (const [what, cost] of [['the lean script', 1], ['the general script', 2]] as const) {
    calls.length = 0
    await t.rejects(store.decideMany(identities.map(id => inputOf(nameSpace, id, 3, 'sliding-log', cost)), 'sliding-log'), { message: /^OOM / }, `${what}: every request refused, so the batch is`)
    t.equal(calls.length, masters.length, `${what}: one call per master, none retried one by one`)
  }
  await Promise.all(masters.map(async master => await master.redis.config('SET', 'maxmemory', '0')))
  t.same([...allowedBy(identities.map(id => inputOf(nameSpace, id, 3)), await store.decideMany(identities.map(id => inputOf(nameSpace, id, 3)), 'sliding-log')).values()], identities.map(() => 1), 'nothing was counted meanwhile')
})

t.test('Masters: before the client is ready and for a slot with no known master, a request goes alone; a master refusing the cross-slot scripts ends them', async t => {
  const client = cluster.client()
  const masters = new Masters(client)
  const inputs = ['v-a', 'v-b', 'v-c', 'v-d'].map(id => inputOf(uniquePrefix(), id, 1))
  const alone = inputs.map((_, i) => [i])
  t.same(masters.groups(inputs), alone, 'not ready (no slot table yet): each request alone')
  await clusterReady(client)
  t.ok(masters.groups(inputs).length < inputs.length, 'ready: grouped by master')
  // A slot the client's table names no master for (as while a slot is unassigned): its request goes alone.
  const hole = keySlot(inputs[0]!.keys.log)
  const owner = client.slots[hole]
  client.slots[hole] = undefined as unknown as string[]
  t.same(masters.groups(inputs).filter(group => group.includes(0)), [[0]], 'a request whose slot has no known master: alone')
  client.slots[hole] = owner!
  t.ok(masters.elsewhere(new Error('MOVED 3999 127.0.0.1:6381')), 'a redirection: one by one')
  t.ok(masters.elsewhere(new Error('Too many Cluster redirections. Last error: ReplyError: ASK 2908 127.0.0.1:37477')), 'ioredis giving up on redirections: one by one')
  t.notOk(masters.elsewhere(new Error('Too many Cluster redirections. Last error: Error: Connection is closed.')), 'but not when the last attempt may have run: the call\'s own')
  t.notOk(masters.elsewhere(new Error('OOM command not allowed')), 'any other error: the call\'s own')
  t.notOk(masters.elsewhere('not an error'), 'a rejection that is not an Error: the call\'s own')
  t.ok(masters.groups(inputs).length < inputs.length, 'still grouped')
  t.ok(masters.elsewhere(new Error('ERR Error compiling script (new function): user_script:1: unexpected symbol near \'#\'')), 'a master that reads the shebang as Lua (below 7.0): one by one')
  t.same(masters.groups(inputs), alone, 'and from then on each request alone')
  client.disconnect()
})

t.test('a batch meeting a slot mid-migration: that master\'s call falls back to one call per request; every other identity decided exactly, nothing counted twice', async t => {
  const nameSpace = uniquePrefix()
  const store = await groupingStore(t, nameSpace)
  const calls = callsOf(t, nameSpace)
  const [source, target, third] = await cluster.masters()
  const moving = await identityOn(cluster, source!, nameSpace, 'moving')
  const slot = await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, moving).log)
  const neighbours = [await identityOn(cluster, source!, nameSpace, 'neighbour'), await identityOn(cluster, target!, nameSpace, 'there'), await identityOn(cluster, third!, nameSpace, 'third')]
  t.not(await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, neighbours[0]!).log), slot, 'the source\'s other identity is in another slot')
  const admin = async (node: ClusterNode, ...args: Array<string | number>): Promise<unknown> => await node.redis.call('CLUSTER', ...args)
  await admin(target!, 'SETSLOT', slot, 'IMPORTING', source!.id)
  await admin(source!, 'SETSLOT', slot, 'MIGRATING', target!.id)
  t.teardown(async () => {
    // Whatever happened, the slot ends owned by one node.
    await admin(target!, 'SETSLOT', slot, 'NODE', target!.id).catch(() => {})
    await admin(source!, 'SETSLOT', slot, 'NODE', target!.id).catch(() => {})
  })

  // The moving identity first, so its log is the key that routes the source's call: Redis lets the call in
  // (no key of it is here: an ASK would redirect it), then its script finds a key not served and writes nothing.
  // The target has not loaded the scripts: an ASK there meets NOSCRIPT, and ioredis may re-send the EVAL
  // without ASKING, round and round, until it gives up ("Too many Cluster redirections", seen once in CI): that
  // falls back too, and so does the script's own refusal.
  await target!.redis.script('FLUSH')
  const everyone = [moving, ...neighbours]
  const inputs = [...everyone, ...everyone].map(id => inputOf(nameSpace, id, 1))
  const decisions = await store.decideMany(inputs, 'sliding-log')
  // The moving identity's own calls are redirected (ASK) as they are today without batching, and may run out
  // of redirections (ioredis re-sends a NOSCRIPT's EVAL without its ASKING): then its error, never a count twice.
  const movingLog = identityKeys(nameSpace, GLOBAL_SCOPE, moving).log
  t.same(decisions.filter((d, i) => d instanceof Error && inputs[i]!.keys.log !== movingLog).map(String), [], 'no other request failed')
  const allowed = allowedBy(inputs, decisions)
  t.same(neighbours.map(id => allowed.get(identityKeys(nameSpace, GLOBAL_SCOPE, id).log)), neighbours.map(() => 1), 'each other identity: one allowed, one limited')
  const movingAllowed = allowed.get(movingLog)!
  t.ok(movingAllowed <= 1, `the moving identity: ${movingAllowed} allowed, ${decisions.filter(d => d instanceof Error).length} failed (${decisions.filter(d => d instanceof Error).map(String).join('; ')})`)
  t.ok(calls.length > 3, `the source's grouped call fell back: ${calls.length} calls (${calls.join(', ')} requests)`)
  t.ok(calls.includes(1), 'calls of one request')
  // The general script's cross-slot call falls back alike: the same identities on a budget of their own (the
  // same slots), at a cost of 2 of 3.
  calls.length = 0
  const costly = everyone.map(id => ({ ...inputOf(nameSpace, id, 3, 'sliding-log', 2), keys: identityKeys(nameSpace, 'costly', id) }))
  const general = [...costly, ...costly]
  const generalAnswers = await store.decideMany(general, 'sliding-log')
  const movingCostly = identityKeys(nameSpace, 'costly', moving).log
  t.same(generalAnswers.filter((d, i) => d instanceof Error && general[i]!.keys.log !== movingCostly).map(String), [], 'the general script: no other request failed')
  t.same(neighbours.map(id => allowedBy(general, generalAnswers).get(identityKeys(nameSpace, 'costly', id).log)), neighbours.map(() => 1), 'the general script: each other identity, one of two allowed')
  t.ok(calls.includes(1) && calls.length > 3, `the general script's grouped call fell back too: ${calls.length} calls`)

  // The slot is the target's now; the store's slot table is stale until a MOVED refreshes it.
  await admin(target!, 'SETSLOT', slot, 'NODE', target!.id)
  await admin(source!, 'SETSLOT', slot, 'NODE', target!.id)
  const after = await store.decideMany(inputs, 'sliding-log')
  t.same(after.filter(d => d instanceof Error).map(String), [], 'after the migration: no request failed')
  const allowedAfter = allowedBy(inputs, after)
  t.same(neighbours.map(id => allowedAfter.get(identityKeys(nameSpace, GLOBAL_SCOPE, id).log)), neighbours.map(() => 0), 'after the migration: each other identity still at its limit, nothing counted twice')
  t.equal(allowedAfter.get(movingLog), 1 - movingAllowed, 'the moving identity: one allowed in all')
  t.equal(await target!.redis.zcard(movingLog), 1, 'the moving identity\'s log, on the target, holds one entry')
})

t.test('200 concurrent requests through the plugin over 50 identities, max 3: exactly 150 allowed, in batches', async t => {
  const { app, nameSpace } = await makeApp(t, cluster.urls, { ...RELAXED, max: 3, timeWindow: '1 minute' })
  const calls = callsOf(t, nameSpace)
  const identities = Array.from({ length: 50 }, (_, i) => `plugin-${i}`)
  // Until the plugin's client is ready (no slot table yet), each request is a call: wait for grouped batches.
  await pollUntil('batches grouped by master', 5000, async () => {
    const before = calls.length
    await Promise.all(Array.from({ length: 20 }, async (_, i) => await send(app, `warm-${i}`, 0)))
    return calls.length - before <= 3
  })
  calls.length = 0
  const replies = await Promise.all(identities.flatMap(id => Array.from({ length: 4 }, async () => await send(app, id, 0))))
  t.equal(replies.filter(r => r.status === 200).length, 150, 'exactly 150 allowed')
  t.equal(replies.filter(r => r.status === 429).length, 50, 'the other 50 limited (no 503)')
  // Gathered by master, about 67 requests a master go in 3 calls each; gathered first and split by master after
  // (before issue 43) the same turn took 7 batches of 32 made 21 calls of about 10.
  t.ok(calls.length <= 12, `${calls.length} script calls for 200 requests (batches of ${calls.join(', ')})`)
})

t.test('a shared budget: its keys in a slot apart from every client\'s, and both budgets hold', async t => {
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace, keyGenerator })
  app.get('/shared', { config: { rateLimit: { max: 2, timeWindow: '1 minute', shared: { max: 3, timeWindow: '1 minute' } } } }, async () => 'ok')
  await app.ready()

  const scope = scopeOf('route', 'GET /shared')
  const sharedLog = sharedKeys(nameSpace, scope, 'sliding-log').log
  const sharedSlot = await cluster.keySlot(sharedLog)
  const sharedOwner = await cluster.ownerOf(sharedSlot)
  // Clients whose keys live on the other masters: each decision of theirs runs on two shards.
  const others = (await cluster.masters()).filter(m => m !== sharedOwner)
  const [a, b, c] = await Promise.all(['a', 'b', 'c'].map(async (label, i) => await identityOn(cluster, others[i % others.length]!, nameSpace, `shared-budget-${label}`))) as [string, string, string]
  for (const identity of [a, b, c]) {
    t.not(await cluster.keySlot(identityKeys(nameSpace, scope, identity).log), sharedSlot, `${identity}: its own log is in another slot than the shared log`)
  }

  const hit = async (identity: string): Promise<Array<string | number | undefined>> => {
    const { res } = await send(app, identity, 0, '/shared')
    return [res.statusCode, res.headers['x-ratelimit-limit']?.toString(), res.headers['x-ratelimit-remaining']?.toString()]
  }
  t.strictSame([await hit(a), await hit(a), await hit(a)], [[200, '2', '1'], [200, '2', '0'], [429, '2', '0']], 'a: its own budget of 2, then its own 429')
  t.strictSame(await hit(b), [200, '2', '1'], 'b takes the third and last of the shared budget (a\'s refusal took none)')
  t.strictSame(await hit(c), [429, '3', '0'], 'c meets the spent shared budget, with its headers')

  const observer = cluster.client()
  await clusterReady(observer)
  t.equal(await observer.zcard(sharedLog), 3, 'the shared log holds the 3 requests that passed')
  let own = await app.rateGuard.peek(c, { route: 'GET /shared' })
  for (let i = 0; i < 20 && own.count !== 0; i++) own = await app.rateGuard.peek(c, { route: 'GET /shared' })
  t.equal(own.count, 0, 'c\'s own count was given back, on its own shard')
  t.equal((await app.rateGuard.peek(a, { route: 'GET /shared' })).count, 2)
})

t.test('every algorithm on the cluster: two limits, an override and an escalating ban, keys in one slot per identity', async t => {
  const observer = cluster.client()
  await clusterReady(observer)
  const masters = await cluster.masters()
  for (const [i, algorithm] of ALGORITHMS.entries()) {
    const nameSpace = uniquePrefix()
    const app = Fastify()
    t.teardown(async () => { await app.close() })
    const bans: Array<[number, number]> = []
    await app.register(rateGuard, {
      ...RELAXED,
      redis: cluster.urls,
      nameSpace,
      keyGenerator,
      algorithm,
      limits: [{ max: 2, timeWindow: '1 minute' }, { max: 100, timeWindow: '1 hour' }],
      ban: { threshold: 1, escalate: ['1 minute', '1 hour'] },
      // The ban is lifted by hand below, behind the plugin's back.
      banCache: false,
      onBanReach: (_request, _key, { durationMs, offence }) => { bans.push([durationMs, offence]) }
    })
    app.get('/', async () => 'ok')
    await app.ready()
    // Each algorithm on another master, so every shard runs every script.
    const [plain, raised] = await Promise.all(['plain', 'raised'].map(async label => await identityOn(cluster, masters[i % masters.length]!, nameSpace, `${algorithm}-${label}`))) as [string, string]
    const status = async (identity: string): Promise<number> => (await send(app, identity, 0)).res.statusCode

    t.strictSame([await status(plain), await status(plain), await status(plain)], [200, 200, 403], `${algorithm}: two allowed, the third denied and banned (threshold 1)`)
    t.strictSame(bans, [[60_000, 1]], `${algorithm}: the first ban of the ladder`)
    const keys = identityKeys(nameSpace, GLOBAL_SCOPE, plain, algorithm)
    await observer.del(keys.banned)
    t.equal(await status(plain), 403, `${algorithm}: denied again once the ban is lifted by hand: banned at once`)
    t.strictSame(bans[1], [3_600_000, 2], `${algorithm}: the second ban is the ladder's second step (offences kept in the identity's slot)`)
    const slots = new Set(await Promise.all([keys.log, keys.offences, keys.banned].map(async key => await cluster.keySlot(key))))
    t.equal(slots.size, 1, `${algorithm}: state, offences and ban in one slot`)

    await app.rateGuard.setOverride(raised, { max: 4, timeWindow: '1 minute', ttl: '1 minute' })
    const replies = []
    for (let n = 0; n < 5; n++) replies.push(await status(raised))
    t.strictSame(replies, [200, 200, 200, 200, 403], `${algorithm}: the override's 4 apply, read in the same call on the identity's shard`)
  }
})

t.test('every algorithm on the cluster: costs charged and settled on the identity\'s shard', async t => {
  const masters = await cluster.masters()
  for (const [i, algorithm] of ALGORITHMS.entries()) {
    const app = Fastify()
    t.teardown(async () => { await app.close() })
    const nameSpace = uniquePrefix()
    await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace, keyGenerator, algorithm, max: 10, timeWindow: '1 minute' })
    app.get('/units', { config: { rateLimit: { cost: 3 } } }, async (request) => {
      await request.rateGuard.settle(Number(request.headers['x-used']))
      return 'ok'
    })
    await app.ready()
    const identity = await identityOn(cluster, masters[(i + 1) % masters.length]!, nameSpace, `${algorithm}-units`)
    const call = async (used: number): Promise<Array<number | string | undefined>> => {
      const res = await app.inject({ url: '/units', headers: { ...idHeaders(identity), 'x-used': String(used) } })
      return [res.statusCode, res.headers['x-ratelimit-remaining']?.toString()]
    }
    t.strictSame(await call(6), [200, '7'], `${algorithm}: 3 units reserved`)
    t.strictSame(await call(0), [200, '1'], `${algorithm}: settled at 6, then 3 more reserved`)
    t.strictSame(await call(4), [200, '1'], `${algorithm}: that one given back; 3 reserved again`)
    t.strictSame(await call(1), [429, '0'], `${algorithm}: settled at 4: 10 of 10 used`)
  }
})

t.test('every algorithm on the cluster: a day\'s quota beside a minute\'s limit, its key in the identity\'s slot, batched with others', async t => {
  const masters = await cluster.masters()
  for (const [i, algorithm] of ALGORITHMS.entries()) {
    const app = Fastify()
    t.teardown(async () => { await app.close() })
    const nameSpace = uniquePrefix()
    await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace, keyGenerator, algorithm, limits: [{ max: 10, timeWindow: '1 minute' }, { max: 3, per: 'day', timeZone: 'Asia/Kathmandu' }] })
    app.get('/', async () => 'ok')
    await app.ready()
    const identities = await Promise.all(masters.map(async (master, m) => await identityOn(cluster, master, nameSpace, `${algorithm}-quota-${i}-${m}`)))
    // Four requests of each identity at once: one call per master, three allowed and one refused each.
    const codes = await Promise.all(identities.flatMap(identity => Array.from({ length: 4 }, async () => (await app.inject({ url: '/', headers: idHeaders(identity) })).statusCode)))
    for (const [m, identity] of identities.entries()) {
      t.strictSame(codes.slice(4 * m, 4 * m + 4).sort(), [200, 200, 200, 429], `${algorithm}: ${identity}, 3 a day`)
      const { quota } = identityKeys(nameSpace, GLOBAL_SCOPE, identity, algorithm)
      t.strictSame(await masters[m]!.redis.hmget(quota, 's1', 'c1').then(([start, count]) => [start !== null, count]), [true, '3'], `${algorithm}: its quota counted on its own master`)
    }
  }
})

t.test('shadow mode on the cluster: every request goes on, counted and banned as enforce would', async t => {
  const masters = await cluster.masters()
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  const nameSpace = uniquePrefix()
  const shadowed: boolean[] = []
  await app.register(rateGuard, {
    ...RELAXED,
    redis: cluster.urls,
    nameSpace,
    keyGenerator,
    max: 2,
    timeWindow: '1 minute',
    mode: 'shadow',
    shadow: { ban: true },
    ban: { threshold: 2, duration: '1 minute' },
    onExceeded: (_request, _key, { shadow }) => { shadowed.push(shadow) }
  })
  app.get('/', async () => 'ok')
  app.get('/items', { config: { rateLimit: { max: 1000, mode: 'enforce' } } }, async () => 'ok')
  await app.ready()
  const identity = await identityOn(cluster, masters[masters.length - 1]!, nameSpace, 'shadowed')
  const codes = []
  for (let i = 0; i < 5; i++) codes.push((await send(app, identity, 0)).res.statusCode)
  t.strictSame(codes, [200, 200, 200, 200, 200])
  t.strictSame(shadowed, [true, true, true])
  t.match(await app.rateGuard.peek(identity), { status: 'banned', shadow: true }, 'the ban enforce would have started, recorded on the identity\'s shard')
  const shadowKeys = identityKeys(nameSpace, GLOBAL_SCOPE, identity, undefined, 'shadow')
  t.equal(await cluster.keySlot(shadowKeys.banned), await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, identity).log), 'shadow mode\'s keys in the identity\'s slot')
  const items = []
  for (let i = 0; i < 3; i++) items.push((await send(app, identity, 0, '/items')).res.statusCode)
  t.strictSame(items, [200, 200, 200], 'an enforced route never sees the shadow ban')
  t.strictSame((await app.rateGuard.bans()).map(({ keyHash, shadow }) => ({ keyHash, shadow })), [{ keyHash: hashIdentity(identity), shadow: true }], 'bans() lists it as shadow')
})

t.test('concurrency on the cluster: two instances, an identity on each master, max 2: exactly 2 of each run; an in-flight refusal bans on the identity\'s shard', async t => {
  const masters = await cluster.masters()
  const nameSpace = uniquePrefix()
  let open = (): void => {}
  const held = new Promise<void>(resolve => { open = resolve })
  const running = new Map<string, number>()
  let started = 0
  let allStarted = (): void => {}
  const everyStarted = new Promise<void>(resolve => { allStarted = resolve })
  const apps = await Promise.all([0, 1].map(async () => {
    const app = Fastify()
    t.teardown(async () => { await app.close() })
    await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace, keyGenerator, max: 100, timeWindow: '1 minute', ban: { threshold: 4, duration: '1 minute' } })
    app.get('/stream', { config: { rateLimit: { concurrency: { max: 2 } } } }, async request => {
      const identity = keyGenerator(request)
      running.set(identity, (running.get(identity) ?? 0) + 1)
      if (++started === 2 * masters.length) allStarted()
      await held
      return 'ok'
    })
    await app.ready()
    return app
  }))
  const identities = await Promise.all(masters.map(async (owner, i) => await identityOn(cluster, owner, nameSpace, `streams${i}`)))
  const answers = identities.flatMap(identity => Array.from({ length: 5 }, (_, i) => apps[i % 2]!.inject({ url: '/stream', headers: idHeaders(identity) })))
  await everyStarted
  // Whichever two of each identity's five run, the other three are answered while they are held.
  const refused = await firstFulfilled(answers, 3 * identities.length)
  t.strictSame([...running.values()], identities.map(() => 2), 'two of each identity\'s requests run, across both instances')
  t.ok(refused.every(res => res.statusCode === 429 && /in flight/.test(res.json<{ message: string }>().message)), 'the other three of each are refused, in flight')
  t.ok(refused.some(res => res.statusCode === 429 && res.headers['retry-after'] === '1'), 'in flight: Retry-After 1')
  // Three refusals per identity strike three times (threshold 4): one more refusal bans.
  const fourth = await apps[0]!.inject({ url: '/stream', headers: idHeaders(identities[0]!) })
  t.equal(fourth.statusCode, 403, 'the fourth refusal starts a ban')
  const keys = identityKeys(nameSpace, scopeOf('route', 'GET /stream'), identities[0]!)
  t.equal(await cluster.keySlot(keys.leases), await cluster.keySlot(keys.banned), 'the leases and the ban in the identity\'s slot')
  open()
  t.ok((await Promise.all(answers)).filter(res => res.statusCode === 200).length === 2 * masters.length, 'the held requests end 200')
  const again = await apps[1]!.inject({ url: '/stream', headers: idHeaders(identities[1]!) })
  t.equal(again.statusCode, 200, 'their slots were released: the next request runs')
})

// What five requests sent at once get at 2 per second: the sliding log and the fixed window let two through, and
// two wait a second; the sliding window, where a full window weighs on the next, lets one wait until half of the
// next window has slid by (1.5 s, so maxWait 2 s), and the next would wait into the window after.
const CLUSTER_WAITS = [
  { algorithm: 'sliding-log', maxWait: '1 second', statuses: [200, 200, 200, 200, 429], waited: 2 },
  { algorithm: 'fixed-window', maxWait: '1 second', statuses: [200, 200, 200, 200, 429], waited: 2 },
  { algorithm: 'sliding-window', maxWait: '2 seconds', statuses: [200, 200, 200, 429, 429], waited: 1 }
] as const
for (const { algorithm, maxWait, statuses, waited } of CLUSTER_WAITS) {
  t.test(`maxWait on the cluster (${algorithm}): two instances, an identity on each master, 2 per second, five sent at once: ${waited} of each wait, counted on the identity's shard`, async t => {
    const masters = await cluster.masters()
    const observer = cluster.client()
    await clusterReady(observer)
    const nameSpace = uniquePrefix()
    const apps = await Promise.all([0, 1].map(async () => {
      const app = Fastify()
      t.teardown(async () => { await app.close() })
      await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace, keyGenerator, algorithm, max: 2, timeWindow: '1 second', maxWait })
      app.get('/', async () => 'ok')
      await app.ready()
      return app
    }))
    const identities = await Promise.all(masters.map(async (owner, i) => await identityOn(cluster, owner, nameSpace, `waits${i}`)))
    // The windows are the clock's seconds (Redis's, on this machine) but for the log: the burst starts just after one begins.
    if (algorithm !== 'sliding-log') await sleep(1000 - Date.now() % 1000 + 20)
    const answers = await Promise.all(identities.flatMap(identity => Array.from({ length: 5 }, async (_, i) => await apps[i % 2]!.inject({ url: '/', headers: idHeaders(identity) }))))
    for (const [i, identity] of identities.entries()) {
      const mine = answers.slice(5 * i, 5 * i + 5)
      t.strictSame(mine.map(res => res.statusCode).sort(), statuses, `${identity}: ${statuses.filter(s => s === 200).length} go`)
      t.equal(mine.filter(res => res.headers['x-ratelimit-waited-ms'] !== undefined).length, waited, `${identity}: ${waited} of them waited`)
      const keys = identityKeys(nameSpace, GLOBAL_SCOPE, identity, algorithm)
      t.equal(await cluster.keySlot(keys.log), await cluster.keySlot(keys.banned), `${identity}: its places in its state, in its slot`)
      t.equal(await observer.exists(keys.log), 1, `${identity}: which holds them`)
    }
  })
}

t.test('bans() on the cluster: one index per slot, beside its identities\' keys, read master by master, never a SCAN', async t => {
  const masters = await cluster.masters()
  const observer = cluster.client()
  await clusterReady(observer)
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  const nameSpace = uniquePrefix()
  await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace, keyGenerator, max: 1, ban: { threshold: 1, duration: '30 seconds' } })
  app.get('/', async () => 'ok')
  await app.ready()
  const banned = await Promise.all(masters.map(async (master, i) => await identityOn(cluster, master, nameSpace, `banned-${i}`)))
  for (const [i, identity] of banned.entries()) await app.rateGuard.ban(identity, (i + 1) * 60_000)
  // A ban a decision starts: the script writes the index of the identity's slot (a CROSSSLOT error otherwise).
  const earned = await identityOn(cluster, masters[0]!, nameSpace, 'earned')
  t.strictSame([(await send(app, earned, 0)).status, (await send(app, earned, 0)).status], [200, 403], 'banned by its traffic')

  await Promise.all(masters.map(async master => await master.redis.config('RESETSTAT')))
  const listed = await app.rateGuard.bans()
  const spent = await Promise.all(masters.map(async master => Number(/^cmdstat_zrevrange:.*usec=(\d+)/m.exec(String(await master.redis.info('commandstats')))?.[1])))
  t.comment(`one bans() on ${masters.length} masters: ${spent.reduce((sum, usec) => sum + usec, 0)} µs of Redis CPU in ZREVRANGE`)
  t.strictSame(listed.map(b => b.keyHash), [...banned].reverse().concat(earned).map(identity => hashIdentity(identity)), `${masters.length} bans on ${masters.length} masters and the earned one, the longest first`)
  t.strictSame(await Promise.all(masters.map(async master => await commandCalls(master.redis, 'scan'))), masters.map(() => 0), 'no SCAN on any master')
  t.equal((await app.rateGuard.bans({ limit: 1 })).length, 1, 'bounded by limit')
  for (const identity of [...banned, earned]) {
    const keys = identityKeys(nameSpace, GLOBAL_SCOPE, identity)
    const index = indexOf(keys.banned, true)
    t.equal(await cluster.keySlot(index), await cluster.keySlot(keys.banned), `${identity}: its ban's index is in its slot`)
    t.ok(Number(await observer.zscore(index, keys.banned)) > Date.now(), `${identity}: entered, until the ban ends`)
  }
  await app.rateGuard.unban(earned)
  t.equal(await observer.zscore(indexOf(identityKeys(nameSpace, GLOBAL_SCOPE, earned).banned, true), identityKeys(nameSpace, GLOBAL_SCOPE, earned).banned), null, 'unban takes it out')
})

t.test('keySlot, which groups a batch by master: the slot the cluster computes, hash tag or none', async t => {
  const [master] = await cluster.masters()
  for (const key of ['plain', '{tag}rest', 'x{tag}y', '{}empty', 'open{only', 'a}{b}', '{a}{b}', `${uniquePrefix()}{${hashIdentity('ip:192.0.2.1')}}:log:all`]) {
    t.equal(keySlot(key), Number(await master!.redis.call('CLUSTER', 'KEYSLOT', key)), key)
  }
})

t.test('the slot tags: each of the 16,384 hashes to its own slot, as the cluster computes it', async t => {
  const [master] = await cluster.masters()
  const tags = slotTags()
  const pipeline = master!.redis.pipeline()
  for (const tag of tags) pipeline.call('CLUSTER', 'KEYSLOT', `x{${tag}}:bans`)
  const slots = (await pipeline.exec())!.map(([err, slot]) => err ?? Number(slot))
  t.ok(slots.every((slot, i) => slot === i), 'tag i is in slot i')
  t.ok(tags.every(tag => tag.length <= 3 && /^[0-9a-zA-Z]+$/.test(tag)), 'each of one to three letters and digits: never an identity\'s hash (22) nor a shared budget\'s (s:…)')
})

t.test('bans() on the cluster stops at its deadline: a frozen master is sent nothing after the slots it was already sent', async t => {
  // A lent client with no commandTimeout of its own: the deadline is the operator call's.
  const lent = cluster.client({ redisOptions: { commandTimeout: undefined } })
  await clusterReady(lent)
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  await app.register(rateGuard, { redis: lent, nameSpace: uniquePrefix(), timeout: 100, keyGenerator })
  await app.ready()
  const masters = await cluster.masters()
  const frozen = masters[masters.length - 1]!
  const owned = lent.slots.filter(nodes => nodes[0] === `${frozen.host}:${frozen.port}`).length
  // The control: the same call on the healthy cluster, timed in this run. When the deadline fires, the frozen
  // call may still be reading a pipeline of 1,024 slots from each other master; the rejection waits for what is
  // in flight, so one whole healthy read is allowed past it (beside CPU-bound files the rejection came 140 ms,
  // and once 316 ms, after the deadline, against a share of the read of 110 ms). Without the deadline the call
  // would wait on the frozen master for ever: the bound still tells the two apart.
  const healthy = performance.now()
  await app.rateGuard.bans()
  const control = performance.now() - healthy
  await frozen.redis.config('RESETSTAT')
  frozen.freeze()
  t.teardown(() => { frozen.thaw() })
  const started = performance.now()
  await t.rejects(app.rateGuard.bans(), { code: 'FST_RATE_GUARD_DEADLINE' })
  const took = performance.now() - started
  const bound = allowing(1000 + control, started, started + took)
  t.ok(took >= 1000 && took <= bound, `rejected after ${took.toFixed(0)} ms: the operator calls' deadline (1 s; a healthy read ${control.toFixed(0)} ms; bound ${bound.toFixed(0)})`)
  frozen.thaw()
  await cluster.waitHealthy()
  // What the master had been sent before the deadline is all it reads: not one pipeline more.
  await sleep(200)
  const read = await commandCalls(frozen.redis, 'zrevrange')
  t.ok(read > 0 && read <= 1024 && read < owned, `${read} of its ${owned} slots read`)
})

t.test('bans() on the cluster, the app closed while it reads: a coded error or what was read, nothing escapes', async t => {
  const app = Fastify()
  await app.register(rateGuard, { ...RELAXED, redis: cluster.urls, nameSpace: uniquePrefix(), keyGenerator })
  await app.ready()
  await app.rateGuard.ban('closing', 60_000)
  const listing = app.rateGuard.bans().then(bans => bans.length, (err: { code?: string }) => err.code)
  await app.close()
  const outcome = await listing
  t.ok(outcome === 1 || outcome === 'FST_RATE_GUARD_CLOSED', `outcome: ${String(outcome)}`)
  t.equal(await app.rateGuard.bans().catch((err: { code?: string }) => err.code), 'FST_RATE_GUARD_CLOSED', 'after the close: the coded error')
})

t.test('a slot migrated by hand while its identity is under traffic', async t => {
  const { app, nameSpace, logs } = await makeApp(t, cluster.client(), { timeout: TIMEOUT, failMode: 'closed' })
  const [source, target] = await cluster.masters()
  const identity = await identityOn(cluster, source!, nameSpace, 'migrating')
  const keys = identityKeys(nameSpace, GLOBAL_SCOPE, identity)
  const slot = await cluster.keySlot(keys.log)
  t.ok(await decides(app, identity), 'Redis decides before the migration')

  const origin = performance.now()
  const phases: Array<[string, number]> = []
  const mark = (phase: string): void => { phases.push([phase, performance.now() - origin]) }
  const admin = (node: ClusterNode, ...args: Array<string | number>): Promise<unknown> => node.redis.call(args[0] as string, ...args.slice(1))
  // The migration, step by step as redis-cli --cluster reshard does it; each state is held for 400 ms
  // (on purpose, not to wait for anything) so that traffic meets it.
  const migrate = async (): Promise<void> => {
    await sleep(500)
    await admin(target!, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', source!.id)
    await admin(source!, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', target!.id)
    mark('migrating')
    await sleep(400)
    for (;;) {
      const batch = await admin(source!, 'CLUSTER', 'GETKEYSINSLOT', slot, 100) as string[]
      if (batch.length === 0) break
      await admin(source!, 'MIGRATE', target!.host, target!.port, '', 0, 5000, 'KEYS', ...batch)
    }
    mark('keys moved')
    await sleep(400)
    await admin(target!, 'CLUSTER', 'SETSLOT', slot, 'NODE', target!.id)
    await admin(source!, 'CLUSTER', 'SETSLOT', slot, 'NODE', target!.id)
    mark('owned by target')
  }
  // 50 requests a second for 4 s: the migration runs from 0.5 s to about 1.3 s.
  const [samples] = await Promise.all([paced(200, 20, async () => await send(app, identity, origin)), migrate()])

  allWithin(t, samples, 'during the migration')
  t.same(samples.filter(s => !s.decided && s.status !== 503).map(s => s.status), [], 'every answer is a Redis decision or failMode\'s 503')
  const ownedAt = phases.find(([phase]) => phase === 'owned by target')![1]
  const lastUndecided = Math.max(-Infinity, ...samples.filter(s => !s.decided).map(s => s.at))
  t.ok(Number.isFinite(lastUndecided), 'the migration was felt (TRYAGAIN sent some requests to failMode)')
  const resume = resumeBound(origin + ownedAt, origin + lastUndecided)
  t.ok(lastUndecided - ownedAt <= resume, `Redis decides every request from ${Math.round(lastUndecided - ownedAt)} ms after SETSLOT NODE on (bound ${Math.round(resume)} ms: breaker cool-down + one decision)`)
  t.ok(samples.filter(s => s.at > ownedAt + resume).length > 20, 'the traffic went on long enough to show it')
  t.equal(await cluster.ownerOf(slot), target, 'the slot is served by the target now')
  t.equal(await target!.redis.exists(keys.log), 1, 'the identity\'s log moved with it')
  await checkExact(t, app, identity, 'after the migration')

  const undecided = samples.filter(s => !s.decided).length
  const allowed = samples.filter(s => s.status === 200).length
  const counted = (await app.rateGuard.peek(identity)).count - 1 // the request before the traffic
  t.comment(`migration phases (ms from start): ${phases.map(([p, at]) => `${p} +${Math.round(at)}`).join(', ')}`)
  t.comment(`migration: ${samples.length} requests, worst ${worst(samples).toFixed(1)} ms, ${undecided} answered by failMode ` +
    `(TRYAGAIN), Redis deciding again ${Number.isFinite(lastUndecided) ? Math.round(lastUndecided - ownedAt) : '(never stopped)'} ms after SETSLOT NODE; ` +
    `${allowed} allowed, ${counted} counted (${counted - allowed} ghost hits: commands retried by ioredis after their deadline)`)
  t.same(ownErrors(logs), [], 'the plugin logged no error-level line: TRYAGAIN is transient')
})

t.test('a master SIGKILLed under 50 requests a second', async t => {
  const { app, nameSpace, logs } = await makeApp(t, cluster.urls, { timeout: TIMEOUT, failMode: 'closed' })
  const masters = await cluster.masters()
  const victim = masters[0]!
  const replica = await cluster.replicaOf(victim)
  const onVictim = await identityOn(cluster, victim, nameSpace, 'victim')
  const elsewhere = await identityOn(cluster, masters[1]!, nameSpace, 'bystander')
  for (const identity of [onVictim, elsewhere]) t.ok(await decides(app, identity), 'Redis decides before the kill')

  const origin = performance.now()
  let killedAt = NaN
  let promotedAt = NaN
  const failover = async (): Promise<void> => {
    await sleep(2000)
    killedAt = performance.now() - origin
    await victim.kill()
    // The promotion, as the replica itself reports it.
    await pollUntil('replica promoted', 15_000, async () => await replica.roleNow() === 'master')
    promotedAt = performance.now() - origin
  }
  // 600 requests at 50 a second (12 s), alternating an identity on the victim and one on another master.
  const [samples] = await Promise.all([
    paced(600, 20, async i => await send(app, i % 2 === 0 ? onVictim : elsewhere, origin)),
    failover()
  ])

  allWithin(t, samples, 'through the failover')
  t.same(samples.filter(s => !s.decided && s.status !== 503).map(s => s.status), [], 'every answer is a Redis decision or failMode\'s 503')
  const victims = samples.filter(s => s.identity === onVictim)
  const lastUndecided = Math.max(-Infinity, ...victims.filter(s => !s.decided).map(s => s.at))
  const resumed = Math.max(0, lastUndecided - promotedAt)
  t.ok(Number.isFinite(promotedAt), `the replica was promoted ${Math.round(promotedAt - killedAt)} ms after the kill`)
  t.ok(Number.isFinite(lastUndecided), 'the kill was felt (some requests went to failMode)')
  const resume = resumeBound(origin + promotedAt, origin + lastUndecided)
  t.ok(lastUndecided - promotedAt <= resume, `Redis decides every request for the victim's identity from ${Math.round(lastUndecided - promotedAt)} ms after the promotion (bound ${Math.round(resume)} ms: breaker cool-down + one decision)`)
  const bystanders = samples.filter(s => s.identity === elsewhere)
  t.comment(`failover: kill at +${Math.round(killedAt)} ms, promotion seen at +${Math.round(promotedAt)} ms (${Math.round(promotedAt - killedAt)} ms), ` +
    `victim's identity decided again ${Math.round(resumed)} ms after the promotion; worst decision ${worst(samples).toFixed(1)} ms; ` +
    `failMode answered ${victims.filter(s => !s.decided).length}/${victims.length} on the victim, ${bystanders.filter(s => !s.decided).length}/${bystanders.length} on another master`)

  t.equal(await cluster.ownerOf(await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, onVictim).log)), replica, 'the promoted replica serves the slot')
  // Replication is asynchronous: what the victim counted just before it died may be lost; what ioredis
  // retried after a request's deadline may be counted late (ghost hits). Both are measured, not asserted.
  const allowedOnVictim = victims.filter(s => s.status === 200).length + 1 // + the request before the traffic
  const countedOnVictim = (await app.rateGuard.peek(onVictim)).count
  t.comment(`failover: victim's identity: ${allowedOnVictim} allowed, ${countedOnVictim} counted on the promoted replica (${countedOnVictim - allowedOnVictim} = ghost hits − writes lost with the master)`)
  await checkExact(t, app, onVictim, 'after the failover, on the promoted replica')
  t.same(ownErrors(logs), [], 'the plugin logged no error-level line: a failover is transient')
})

t.test('every node killed: every decision within the deadline; exact again once they are back', async t => {
  const apps = {
    closed: await makeApp(t, cluster.urls, { timeout: TIMEOUT, failMode: 'closed' }),
    open: await makeApp(t, cluster.client(), { timeout: TIMEOUT, failMode: 'open' })
  }
  for (const { app } of Object.values(apps)) t.ok(await decides(app, 'before'), 'Redis decides before the kill')

  const origin = performance.now()
  await Promise.all(cluster.nodes.map(async node => await node.kill()))
  const modes = ['closed', 'open'] as const
  // 3 s at 50 requests a second across both apps, then a burst of 20 on each.
  const fire = async (i: number, identity: string): Promise<Sample & { mode: typeof modes[number] }> => {
    const mode = modes[i % 2]!
    return { ...await send(apps[mode].app, identity, origin), mode }
  }
  const samples = [
    ...await paced(150, 20, async i => await fire(i, `down-${i % 7}`)),
    ...await Promise.all(Array.from({ length: 40 }, async (_, i) => await fire(i, `burst-${i}`)))
  ]
  allWithin(t, samples, 'with every node dead')
  const closed = samples.filter(s => s.mode === 'closed')
  const open = samples.filter(s => s.mode === 'open')
  t.same([...new Set(closed.map(s => `${s.status} ${s.res.json().code}`))], ['503 FST_RATE_GUARD_UNAVAILABLE'], 'failMode closed: every request refused with 503')
  t.ok(open.every(s => s.status === 200 && s.res.headers['x-ratelimit-enforced'] === 'false'), 'failMode open: every request let through, marked unenforced')
  const late = (list: Sample[]): number => worst(list.filter(s => s.at > 1000))
  t.comment(`all nodes down: worst ${worst(samples).toFixed(1)} ms (closed ${worst(closed).toFixed(1)}, open ${worst(open).toFixed(1)}); ` +
    `after the first second: closed ${late(closed).toFixed(1)} ms, open ${late(open).toFixed(1)} ms`)

  // Every node started again from its nodes.conf (empty: persistence is off): the clients reconnect by
  // themselves and limiting is exact again.
  const restarted = performance.now()
  await Promise.all(cluster.nodes.map(async node => await node.restart()))
  const healthyAfter = performance.now() - restarted
  await cluster.waitHealthy()
  const wholeAfter = performance.now() - restarted
  const decidingAfter = await Promise.all(Object.values(apps).map(async ({ app }) =>
    await pollUntil('the plugin decides again', 20_000, async () => (await send(app, 'after-restart', 0)).decided) + wholeAfter))
  for (const [mode, { app }] of Object.entries(apps)) await checkExact(t, app, `back-${mode}`, `failMode ${mode}, after every node restarted`)
  t.comment(`all nodes restarted: processes up in ${Math.round(healthyAfter)} ms, cluster whole in ${Math.round(wholeAfter)} ms, ` +
    `the plugin deciding again after ${decidingAfter.map(Math.round).join(' / ')} ms (closed / open)`)
})

t.test('nothing escaped: no unhandled rejection, no unlistened error event', async t => {
  t.same(escaped.unhandled.map(String), [])
  t.same(escaped.unlistened, [])
})
