// The fixed window's lean path (lua/lean-fixed-window.lua) on states the conformance tables never write: counters
// of another type, and counters lua/fixed-window.lua reads in its own way (a start that is this window's though
// spelled otherwise, this window's count that is no number, requests waiting for the next window). The lean script hands each back (4), writing
// nothing, and RedisStore answers it as lua/fixed-window.lua does; a start of another window it decides itself.
// The conformance and differential suites hold the rest: every request shape through both paths.
import t from 'tap'
import { identityKeys } from '../lib/stores/key-names.js'
import { RedisStore } from '../lib/stores/redis.js'
import { toLeanDecisions } from '../lib/stores/replies.js'
import { LEAN_SCRIPTS, defineScript, leanArgs } from '../lib/stores/scripts.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'
import { decideInput } from './helpers/stores.js'

// A window longer than the epoch so far: the window counted starts at 0 whatever Redis's clock says, so its start
// can be written before the decision.
const WINDOW = 10_000_000_000_000

t.test('the fixed window\'s lean path hands back what lua/fixed-window.lua reads in its own way, and decides another window\'s start', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const lean = defineScript(redis, LEAN_SCRIPTS['fixed-window']!)
  const store = new RedisStore(redis, false)
  // Each state, what the lean script answers (the call's time, then 4: handed back), then what RedisStore answers,
  // and the counters after.
  const cases: Array<{ name: string, write: (key: string) => Promise<unknown>, reply: unknown[], count?: number, answer: object, after?: Record<string, string> }> = [
    { name: 'a value of another type', write: async key => await redis.set(key, 'a foreign string'), reply: [Number, 4], answer: { message: /^WRONGTYPE .* at lua\/fixed-window\.lua:\d+/ } },
    { name: 'this window\'s count that is no number', write: async key => await redis.hset(key, 's1', '0', 'c1', 'many'), reply: [Number, 4], answer: { message: /^lua\/fixed-window\.lua:\d+ .*: attempt to compare number with nil$/ } },
    { name: 'this window\'s start spelled otherwise', write: async key => await redis.hset(key, 's1', '0.0', 'c1', '3'), reply: [Number, 4], answer: { status: 'allowed', count: 4 }, after: { s1: '0', c1: '4' } },
    // Requests wait for the next window (maxWait): lua/fixed-window.lua keeps it in s1 and c1, this window's count in
    // o1, where the lean script, reading another window's start, would count from 0.
    { name: 'the next window, with requests waiting for it', write: async key => await redis.hset(key, 's1', String(WINDOW), 'c1', '1', 'o1', '4'), reply: [Number, 4], answer: { status: 'allowed', count: 5 }, after: { s1: String(WINDOW), c1: '1', o1: '5' } },
    // Decided by the lean script (allowed, the first of a new window: its count and reset packed in one
    // integer), then once more by RedisStore.
    { name: 'another window\'s start, whatever its count', write: async key => await redis.hset(key, 's1', 'yesterday', 'c1', 'many'), reply: [Number, Number], count: 1, answer: { status: 'allowed', count: 2 }, after: { s1: '0', c1: '2' } }
  ]
  for (const { name, write, reply, count, answer, after } of cases) {
    const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.13', 'fixed-window')
    const input = decideInput({ keys, max: 5, windowMs: WINDOW, algorithm: 'fixed-window' })
    await write(keys.log)
    const own = await lean(...leanArgs([input], 'b.')) as unknown[]
    t.match(own, reply, `${name}: the lean script's reply`)
    t.equal(own.length, reply.length, `${name}: and nothing more`)
    if (count !== undefined) t.match(toLeanDecisions(own, ['b.1'], [input]), [{ status: 'allowed', count }], `${name}: the lean script's decision`)
    t.match(await store.decide(input).catch((err: unknown) => err), answer, `${name}: answered as lua/fixed-window.lua answers it`)
    if (after !== undefined) t.strictSame(await redis.hgetall(keys.log), after, `${name}: the counters as lua/fixed-window.lua writes them`)
  }
})
