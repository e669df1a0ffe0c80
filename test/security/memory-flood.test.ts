// Attack: with the in-process store (no Redis, or failMode: 'local'), flood it with fresh identities so that
// newcomers find no room (and share one budget: an honest client's first request refused), or so that it
// grows without bound, or so that a banned client's ban is pushed out. Defence (lib/stores/memory.ts): the
// least recently used logs under their limits make room; clients at their limits and bans are kept; strikes,
// offences and bans count toward `cache`; newcomers share hashed buckets only when nothing can be dropped,
// with a warning.
import v8 from 'node:v8'
import vm from 'node:vm'
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'
import { identityKeys } from '../../lib/stores/key-names.js'
import { MemoryStore } from '../../lib/stores/memory.js'
import { OVERFLOW_BUCKETS } from '../../lib/stores/memory-table.js'
import type { DecideInput } from '../../lib/stores/store.js'

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void

// Pure CPU, so the file most slowed by other work on the machine's 2 cores: about 8 s on a quiet machine;
// the flood of 100,000 over HTTP it once sent took 30 s there, and past tap's default of 60 s for a file
// (.taprc) beside two CPU-bound processes.
t.setTimeout(120_000)

const CACHE = 10_000
/** The store's own flood: large, for the heap it may grow. */
const FLOOD = 100_000
/** Over HTTP (about 0.2 ms a request): enough to turn the whole cache over three times. */
const HTTP_FLOOD = 3 * CACHE
const address = (i: number): string => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`

t.test(`over HTTP, a flood of ${HTTP_FLOOD.toLocaleString('en')} fresh identities at cache ${CACHE.toLocaleString('en')}: each is counted, a newcomer is let in, a banned client stays banned, one at its limit stays there`, async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { cache: CACHE, max: 3, timeWindow: '1 minute', ban: { threshold: 2, duration: '10 minutes', escalate: 2, maxDuration: '1 day' } })
  app.get('/', async () => 'ok')
  await app.ready()
  const ask = async (remoteAddress: string): Promise<number> => (await app.inject({ url: '/', remoteAddress })).statusCode
  const asks = async (remoteAddress: string, n: number): Promise<number[]> => {
    const out: number[] = []
    for (let i = 0; i < n; i++) out.push(await ask(remoteAddress))
    return out
  }
  const [abuser, spent] = ['192.0.2.66', '192.0.2.67']
  t.same(await asks(abuser, 5), [200, 200, 200, 429, 403], 'the abuser is banned')
  t.same(await asks(spent, 3), [200, 200, 200], 'another client spends its budget')

  let refused = 0
  for (let i = 0; i < HTTP_FLOOD; i++) if (await ask(address(i)) !== 200) refused++
  t.equal(refused, 0, 'every fresh identity of the flood is counted on a log of its own (the least recently used make room)')
  t.equal(await ask('198.51.100.1'), 200, 'an honest newcomer after the flood: allowed')
  t.equal(await ask(abuser), 403, 'the banned client: still banned')
  t.equal(await ask(spent), 429, 'the client at its limit: still at it, no fresh budget')
  t.equal(await ask(address(0)), 200, 'the flood\'s oldest identity was dropped to make room: a fresh count')
})

t.test(`the store under a flood of ${FLOOD.toLocaleString('en')}: at most cache keys, and a few MB of heap`, async t => {
  const store = new MemoryStore({ cache: CACHE })
  t.teardown(() => store.close())
  const input = (key: string, threshold = 0): DecideInput => ({
    keys: identityKeys('flood:', 'all', key),
    limits: [{ max: 3, windowMs: 60_000, burst: 3 }],
    ban: threshold === 0 ? null : { threshold, ladder: [600_000, 1_200_000], forgetMs: 3_600_000 },
    peek: false
  })
  // Bans (with their offences) and clients at their limits first: they are kept whatever comes.
  for (let i = 0; i < 100; i++) for (let n = 0; n < 5; n++) store.decide(input(`192.0.${i >> 8}.${i & 255}`, 2))
  gc()
  const before = process.memoryUsage().heapUsed
  for (let i = 0; i < FLOOD; i++) store.decide(input(address(i)))
  gc()
  const grownMb = (process.memoryUsage().heapUsed - before) / 1024 / 1024
  t.ok(store.size <= CACHE + OVERFLOW_BUCKETS, `${store.size} keys tracked for a cache of ${CACHE} (and at most ${OVERFLOW_BUCKETS} shared logs, made while the oldest logs were kept ones)`)
  t.ok(grownMb < 32, `the heap grew ${grownMb.toFixed(1)} MB over the flood (bound: 32 MB)`)
  t.equal(store.decide(input('192.0.0.7', 2)).status, 'banned', 'the banned stay banned')
})

t.test('a table full of clients at their limits: a newcomer shares a budget, and the app is warned', async t => {
  const warnings: string[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { cache: 2, max: 1, timeWindow: '1 minute' })
  app.get('/', async () => 'ok')
  await app.ready()
  for (const remoteAddress of ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4']) await app.inject({ url: '/', remoteAddress })
  t.equal(warnings.filter(w => /in-process store is full/.test(w)).length, 1, 'warned once')
})
