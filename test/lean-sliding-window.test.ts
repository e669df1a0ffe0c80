// The sliding window's lean path (lua/lean-sliding-window.lua) on counters with requests waiting for the next
// window (maxWait's n1), which the conformance tables reach only through lua/sliding-window.lua: the lean
// script hands them back (4), writing nothing, and RedisStore answers as lua/sliding-window.lua does, counting
// the requests that waited for this window in it (the lean script, reading the window before, would not).
import t from 'tap'
import { identityKeys } from '../lib/stores/key-names.js'
import { RedisStore } from '../lib/stores/redis.js'
import { LEAN_SCRIPTS, defineScript, leanArgs } from '../lib/stores/scripts.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'
import { decideInput } from './helpers/stores.js'

// A window longer than the epoch so far: the current window starts at 0 whatever Redis's clock says, and the
// previous one at -WINDOW, so the counters can be written before the decision.
const WINDOW = 10_000_000_000_000

t.test('the sliding window\'s lean path hands back counters with requests waiting for the next window', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const lean = defineScript(redis, LEAN_SCRIPTS['sliding-window']!)
  const store = new RedisStore(redis, false)
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.14', 'sliding-window')
  const input = decideInput({ keys, max: 5, windowMs: WINDOW, algorithm: 'sliding-window' })
  // The window before this one counted 1; 1 more waited for this one.
  await redis.hset(keys.log, 'w1', String(-WINDOW), 'p1', '0', 'c1', '1', 'n1', '1')
  const own = await lean(...leanArgs([input], 'b.')) as unknown[]
  t.match(own, [Number, 4], 'the lean script hands them back')
  t.equal(own.length, 2, 'and answers nothing more')
  t.match(await store.decide(input), { status: 'allowed', count: 3 }, 'counted as lua/sliding-window.lua counts: the one that waited in this window, the previous one\'s weighing')
  t.strictSame(await redis.hgetall(keys.log), { w1: '0', p1: '1', c1: '2' }, 'the counters as lua/sliding-window.lua writes them: the waiting one now this window\'s')
})
