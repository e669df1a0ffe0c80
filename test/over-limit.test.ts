// overLimit 'continue' and 'backoff' at the store level: the seeded differential (both stores, step by step,
// under each option), how a batch of mixed policies lays out its keys in one script call, what a request
// costs Redis with and without overLimit, replays, and what the in-process store does for strangers sharing
// an overflow log. The behaviour of each algorithm under each option, step by step on both stores, is in
// test/conformance-algorithm-tables.test.ts.
import t from 'tap'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import type { Limit } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { MemoryStore } from '../lib/stores/memory.js'
import { RedisStore } from '../lib/stores/redis.js'
import { defineScript, scriptArgs } from '../lib/stores/scripts.js'
import { toDecision } from '../lib/stores/replies.js'
import type { DecideInput, Decision } from '../lib/stores/store.js'
import type { BanPolicy } from '../lib/types.js'
import { differential } from './helpers/differential.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'
import { decideInput } from './helpers/stores.js'

const T0 = 1_700_000_000_000

// A fixed seed whose traffic reaches every kind of answer (a doubled backoff wait too), and a fresh one each
// run to explore further. CONFORMANCE_SEED=<n> replays one.
const FIXED_SEED = 1
const seeds = process.env.CONFORMANCE_SEED !== undefined
  ? [Number(process.env.CONFORMANCE_SEED)]
  : [FIXED_SEED, Math.floor(Math.random() * 2 ** 32)]

for (const algorithm of ALGORITHMS) {
  for (const overLimit of ['continue', 'backoff'] as const) {
    for (const seed of seeds) {
      t.test(`differential (${algorithm}, overLimit '${overLimit}'): random traffic gets identical decisions from both stores (seed ${seed})`, async t => {
        await differential(t, algorithm, seed, seed === FIXED_SEED || seeds.length === 1, { overLimit, steps: 400 })
      })
    }
  }
}

t.test('the hot path: without overLimit a request sends its three keys (six under a ban policy: strikes, offences, the ban index); overLimit adds its over-limit key', async t => {
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.9')
  const count = (inputs: DecideInput[], mode: 'decide' | 'peek'): unknown => scriptArgs(inputs, mode, 'b.')[0]
  t.equal(count([decideInput({ keys })], 'decide'), 3)
  t.equal(count([decideInput({ keys, banThreshold: 2 })], 'decide'), 6)
  t.equal(scriptArgs([decideInput({ keys, banThreshold: 2 })], 'decide', 'b.')[6], `${keys.banned.slice(0, keys.banned.indexOf('{'))}bans`, 'the ban index, last')
  t.equal(count([decideInput({ keys, peek: true })], 'peek'), 3)
  for (const overLimit of ['continue', 'backoff'] as const) {
    t.equal(count([decideInput({ keys, overLimit })], 'decide'), 4, overLimit)
    t.equal(count([decideInput({ keys, overLimit, banThreshold: 2 })], 'decide'), 7, `${overLimit}, under a ban policy`)
    t.equal(count([decideInput({ keys, overLimit, banThreshold: 2, peek: true })], 'peek'), 4, `${overLimit}: a peek reads the over-limit key, and counts no strike`)
  }
  const args = scriptArgs([decideInput({ keys, max: 2, windowMs: 1000 })], 'decide', 'b.')
  t.strictSame(args.slice(4), ['decide', 'b.', 1, 1, 0, '0', 0, 'none', 0, 0, 1, 2, 1000, 2, 1], 'the policy: threshold, ladder, forget, over, wait, queue, n, then each limit')
  const undo = scriptArgs([{ keys, limits: [{ max: 2, windowMs: 1000, burst: 2 }], algorithm: 'sliding-log', member: 'm1', at: T0, final: 0 }], 'settle', '')
  t.strictSame(undo, [3, keys.log, keys.banned, keys.override, 'settle', '', 1, 1, 0, '0', 0, 'none', 0, 0, 1, 2, 1000, 2, 1, 'm1', T0, 0], 'an undo sends no over-limit key')
})

t.test('what a decision costs Redis: without overLimit, not one command more; with it, a PTTL of its key (and a SET on a denial)', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  // lua/decide.lua's cost, which overLimit's requests pay: without the lean path (the one-limit requests
  // without overLimit of the sliding log and the fixed window go there, with its own commands: checked last).
  const store = new RedisStore(redis, false, '', { lean: false })
  const lean = new RedisStore(redis, false)
  const monitor = await redis.monitor()
  t.teardown(() => monitor.disconnect())
  const seen: Array<{ args: string[], source: string }> = []
  monitor.on('monitor', (_time: string, args: string[], source: string) => { seen.push({ args, source }) })
  // The commands the script ran for one decision: each as its name (lower case) and its first argument.
  const commands = async (input: DecideInput, by = store): Promise<string[]> => {
    const marker = `marker-${uniquePrefix()}`
    seen.length = 0
    await by.decide(input)
    await redis.echo(marker)
    while (!seen.some(({ args }) => args[1] === marker)) await new Promise(resolve => setImmediate(resolve))
    return seen.filter(({ source }) => source === 'lua').map(({ args }) => `${args[0]!.toLowerCase()} ${args[1] ?? ''}`)
  }
  for (const algorithm of ALGORITHMS) {
    const plain = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.10', algorithm)
    const over = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.10', algorithm)
    const input = (keys: typeof plain, overLimit?: DecideInput['overLimit']): DecideInput => decideInput({ keys, max: 1, windowMs: 60_000, algorithm, overLimit })
    // Another identity's keys, spelled as `plain`'s.
    const same = (command: string): string => command.replace(over.log, plain.log).replace(over.banned, plain.banned).replace(over.override, plain.override)
    for (const [name, extra] of [['allowed', ['pttl']], ['denied', ['pttl', 'set']]] as const) {
      const without = await commands(input(plain))
      const withOver = await commands(input(over, 'continue'))
      t.ok(without.length > 0, `${algorithm}, ${name}: the script's commands were seen`)
      t.strictSame(withOver.filter(command => !command.endsWith(over.backoff)).map(same), without, `${algorithm}, ${name}: overLimit changes none of the other commands`)
      t.strictSame(withOver.filter(command => command.endsWith(over.backoff)).map(command => command.split(' ')[0]), extra, `${algorithm}, ${name}: it only adds ${extra.join(' and ')} on its key`)
    }
  }
  // The lean path (lua/README.md): one EXISTS for the batch, the clock, the oldest entry; a new log is added to
  // and given its TTL; a full one is counted, and its denial checked for a replay.
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.11')
  const names = async (): Promise<string[]> => (await commands(decideInput({ keys, max: 1, windowMs: 60_000 }), lean)).map(command => command.split(' ')[0]!)
  t.strictSame(await names(), ['exists', 'time', 'zrange', 'zadd', 'pexpire'], 'the lean path, allowed on a new log')
  t.strictSame(await names(), ['exists', 'time', 'zrange', 'zcard', 'zscore'], 'the lean path, denied')
  // Windows aligned to the epoch, one of them from 1970 to 2286: none ends between these calls.
  const EPOCH_WINDOW = 10_000_000_000_000
  // The fixed window's: one HMGET of the window's start and count; new counters are written and given their TTL,
  // a counted window its count and, when its TTL is shorter than the window (PTTL), the TTL; a denial writes nothing.
  const fixedCounters = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.12', 'fixed-window')
  const fixed = async (): Promise<string[]> => (await commands(decideInput({ keys: fixedCounters, max: 2, windowMs: EPOCH_WINDOW, algorithm: 'fixed-window' }), lean)).map(command => command.split(' ')[0]!)
  t.strictSame(await fixed(), ['exists', 'time', 'hmget', 'hset', 'pexpire'], 'the fixed window\'s lean path, allowed in a new window')
  t.strictSame(await fixed(), ['exists', 'time', 'hmget', 'hset', 'pttl'], 'the fixed window\'s lean path, allowed in a counted window')
  t.strictSame(await fixed(), ['exists', 'time', 'hmget'], 'the fixed window\'s lean path, denied')
  // A counted window's TTL holds though the script's clock read and Redis's PTTL may see the clock a millisecond
  // (or a pause) apart: no request of the window sets it again.
  const ticking = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.13', 'fixed-window')
  const tick = async (): Promise<string[]> => (await commands(decideInput({ keys: ticking, max: 1000, windowMs: EPOCH_WINDOW, algorithm: 'fixed-window' }), lean)).map(command => command.split(' ')[0]!)
  await tick()
  const again: string[][] = []
  for (let i = 0; i < 300; i++) again.push(await tick())
  t.strictSame(again.filter(names => names.includes('pexpire')), [], '300 requests of a counted window: none gives the counters their TTL again')
  // The sliding window's: its counters read in one HMGET; new ones written whole and given their TTL, then c1
  // alone in the same window; a denial writes nothing.
  const counters = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.12', 'sliding-window')
  const windowed = async (): Promise<string[]> => (await commands(decideInput({ keys: counters, max: 2, windowMs: EPOCH_WINDOW, algorithm: 'sliding-window' }), lean)).map(command => command.split(' ')[0]!)
  const written = (): string[] => seen.find(({ args, source }) => source === 'lua' && args[0]!.toLowerCase() === 'hset')!.args.slice(2)
  t.strictSame(await windowed(), ['exists', 'time', 'hmget', 'hset', 'pexpire'], 'the sliding window\'s lean path, allowed on new counters')
  t.strictSame(written().filter((_, i) => i % 2 === 0), ['w1', 'p1', 'c1'], '...written whole')
  t.strictSame(await windowed(), ['exists', 'time', 'hmget', 'hset', 'pexpire'], 'the sliding window\'s lean path, allowed in the same window')
  t.strictSame(written(), ['c1', '2'], '...its count alone')
  t.strictSame(await windowed(), ['exists', 'time', 'hmget'], 'the sliding window\'s lean path, denied')
  // The token bucket's: its TAT read; allowed, written with the TTL until the bucket is full; denied, nothing more.
  const bucket = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.12', 'token-bucket')
  const bucketNames = async (): Promise<string[]> => (await commands(decideInput({ keys: bucket, max: 1, windowMs: 60_000, algorithm: 'token-bucket' }), lean)).map(command => command.split(' ')[0]!)
  t.strictSame(await bucketNames(), ['exists', 'time', 'hmget', 'hset', 'pexpire'], 'the token bucket\'s lean path, allowed on a new bucket')
  t.strictSame(await bucketNames(), ['exists', 'time', 'hmget'], 'the token bucket\'s lean path, denied')
})

t.test('one batch of mixed policies (RedisStore.decideMany): each request finds its own keys, and policies differing only in overLimit stay apart', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const store = new RedisStore(redis, false)
  const WINDOW = 60_000
  for (const algorithm of ALGORITHMS) {
    const prefix = uniquePrefix()
    const [a, b, c, d, e] = ['a', 'b', 'c', 'd', 'e'].map(id => identityKeys(prefix, 'all', `ip:${id}`, algorithm))
    // a and b share their limits and ban policy (the same objects): only overLimit tells their policies apart.
    const limits: Limit[] = [{ max: 1, windowMs: WINDOW, burst: 1 }]
    const ban: BanPolicy = { threshold: 2, ladder: [WINDOW], forgetMs: 0 }
    const inputs: DecideInput[] = [
      { keys: a!, limits, ban, peek: false, algorithm, overLimit: 'backoff' },
      { keys: b!, limits, ban, peek: false, algorithm },
      { keys: c!, limits, ban: null, peek: false, algorithm, overLimit: 'backoff' },
      { keys: d!, limits, ban: null, peek: false, algorithm, overLimit: 'continue' },
      { keys: e!, limits, ban: null, peek: false, algorithm }
    ]
    t.equal(scriptArgs(inputs, 'decide', 'x.')[0], 7 + 6 + 4 + 4 + 3, `${algorithm}: the keys of the five requests`)
    const round = async (): Promise<Decision[]> => (await store.decideMany(inputs, algorithm)) as Decision[]

    t.ok((await round()).every(decision => decision.status === 'allowed'), `${algorithm}: all five allowed`)
    const [a2, b2, c2, d2, e2] = await round()
    t.match(a2, { status: 'limited', retryMs: WINDOW }, `${algorithm}: a's first denial waits the window`)
    t.match(c2, { status: 'limited', retryMs: WINDOW }, `${algorithm}: so does c's`)
    t.match(d2, { status: 'limited', retryMs: WINDOW, count: 1, resetMs: WINDOW }, `${algorithm}: and d's (continue)`)
    for (const [name, decision] of [['b', b2], ['e', e2]] as const) {
      t.equal(decision!.status, 'limited', `${algorithm}: ${name} is limited, for what its algorithm says`)
    }
    const [a3, b3, c3, d3] = await round()
    t.match(a3, { status: 'banned', banStarted: true }, `${algorithm}: a's backoff denial is its second strike: banned`)
    t.match(b3, { status: 'banned', banStarted: true }, `${algorithm}: b's second denial (its algorithm's) bans it too`)
    t.match(c3, { status: 'limited', retryMs: 2 * WINDOW }, `${algorithm}: c backs off twice as long`)
    t.match(d3, { status: 'limited', retryMs: WINDOW }, `${algorithm}: d is held a window again`)
    t.ok(await redis.pttl(c!.backoff) > WINDOW, `${algorithm}: c's over-limit key lives its wait`)
    t.ok(await redis.pttl(a!.backoff) > WINDOW, `${algorithm}: so does a's`)
    t.strictSame([await redis.get(d!.backoff), await redis.pttl(d!.backoff) <= WINDOW], ['2', true], `${algorithm}: d's, a window`)
    for (const [name, keys] of [['b', b], ['e', e]] as const) {
      t.equal(await redis.exists(keys!.backoff), 0, `${algorithm}: ${name} has no over-limit key`)
    }
  }
})

t.test('a replay under overLimit (the sliding log): a replayed denial is one strike, but is held once more; nothing is logged for it', async t => {
  const redis = client(t, (await getRedis(t)).url)
  const script = defineScript(redis, 'sliding-log')
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.1')
  const input = decideInput({ keys, max: 2, windowMs: 60_000, overLimit: 'backoff', banThreshold: 5 })
  // A call's one request has the member `<base>1`: the same base is the same request, sent again.
  const decide = async (base: string): Promise<Decision> => toDecision(await script(...scriptArgs([input], 'decide', base)), `${base}1`, input.limits)

  t.match(await decide('a'), { status: 'allowed', count: 1 })
  t.match(await decide('b'), { status: 'allowed', count: 2 })
  t.match(await decide('b'), { status: 'allowed', count: 2 }, 'the replay of an allowed request is still allowed, and counted once')
  t.match(await decide('c'), { status: 'limited', count: 2, retryMs: 60_000 }, 'denied: held a window')
  t.match(await decide('c'), { status: 'limited', count: 2, retryMs: 120_000 }, 'its replay is held again (the key keeps no members)...')
  t.strictSame(await redis.smembers(keys.strikes), ['c1'], '...but is the same strike')
  t.strictSame(await redis.zrange(keys.log, '0', '-1'), ['a1', 'b1'], 'no denial is logged')
  t.match(await decide('b'), { status: 'limited', retryMs: 240_000 }, 'while held, even the replay of an allowed request is held')
})

for (const overLimit of ['continue', 'backoff'] as const) {
  t.test(`MemoryStore, ${overLimit}: strangers sharing an overflow log are limited by it, but none of them is held off`, async t => {
    let clock = T0
    const store = new MemoryStore({ cache: 2, now: () => clock })
    t.teardown(() => store.close())
    const prefix = uniquePrefix()
    const keys = (i: number): ReturnType<typeof identityKeys> => identityKeys(prefix, 'all', `ip:10.1.0.${i}`)
    const input = (i: number): DecideInput => decideInput({ keys: keys(i), max: 3, windowMs: 1000, overLimit })
    // Two clients at their limits fill the table, and are kept: a newcomer is counted on an overflow log.
    for (const i of [0, 1]) for (let n = 0; n < 3; n++) store.decide(input(i))
    clock = T0 + 10
    t.strictSame([0, 1, 2].map(() => store.decide(input(100)).status), ['allowed', 'allowed', 'allowed'], 'the shared log lets max through')
    const size = store.size
    t.match(store.decide(input(100)), { status: 'limited', count: 3, resetMs: 1000, retryMs: 1000 }, 'then limits, for what the log says (its oldest leaves at 1010)')
    t.match(store.decide(input(100)), { status: 'limited', retryMs: 1000 }, 'not held: no longer wait')
    t.equal(store.size, size, 'no over-limit key was stored for the stranger')
    t.match(store.decide(input(0)), { status: 'limited', retryMs: 1000 }, 'a client with a log of its own is held: the window...')
    t.match(store.decide(input(0)), { status: 'limited', retryMs: overLimit === 'backoff' ? 2000 : 1000 }, `...then ${overLimit === 'backoff' ? 'twice that' : 'the window again'}`)
  })
}
