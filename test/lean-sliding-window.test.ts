// The sliding window's lean path (lua/lean-sliding-window.lua) on counters with requests waiting for the next
// window (maxWait: w1 is then the next window's start, p1 this window's count, c1 the waiting ones', o1 the
// previous window's), which the conformance tables reach only through lua/sliding-window.lua: the lean script
// hands them back (4), writing nothing, and RedisStore answers as lua/sliding-window.lua does, counting the
// requests waiting in this window's estimate (the lean script, reading another window's start, would count
// from 0 and overwrite them).
import t from 'tap'
import { identityKeys } from '../lib/stores/key-names.js'
import { RedisStore } from '../lib/stores/redis.js'
import { LEAN_SCRIPTS, defineScript, leanArgs } from '../lib/stores/scripts.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'
import { decideInput } from './helpers/stores.js'

// A window longer than the epoch so far: the current window starts at 0 whatever Redis's clock says, and the
// next one at WINDOW, so the counters can be written before the decision.
const WINDOW = 10_000_000_000_000

t.test('the sliding window\'s lean path hands back counters with requests waiting for the next window', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const lean = defineScript(redis, LEAN_SCRIPTS['sliding-window']!)
  const store = new RedisStore(redis, false)
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.14', 'sliding-window')
  const input = decideInput({ keys, max: 5, windowMs: WINDOW, algorithm: 'sliding-window' })
  // This window counted 1, and 1 waits for the next.
  await redis.hset(keys.log, 'w1', String(WINDOW), 'p1', '1', 'c1', '1', 'o1', '0')
  const own = await lean(...leanArgs([input], 'b.')) as unknown[]
  t.match(own, [Number, 4], 'the lean script hands them back')
  t.equal(own.length, 2, 'and answers nothing more')
  t.match(await store.decide(input), { status: 'allowed', count: 3 }, 'counted as lua/sliding-window.lua counts: this window\'s two and the one waiting')
  t.strictSame(await redis.hgetall(keys.log), { w1: String(WINDOW), p1: '2', c1: '1', o1: '0' }, 'the counters as lua/sliding-window.lua writes them: this window\'s count in p1 while one waits')
})
