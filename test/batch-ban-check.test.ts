// lua/decide.lua asks one EXISTS over a whole batch's banned and override keys: this holds that the answer stays
// exact when a ban starts inside the call (a later request of the same identity is found banned) and when one
// identity of the batch has an override (it alone gets its limits).
import t from 'tap'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { RedisStore } from '../lib/stores/redis.js'
import type { Decision, DecideInput } from '../lib/stores/store.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

t.test('one batch: a ban started by its own request, and an override of one of its identities', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const store = new RedisStore(redis, false)
  for (const algorithm of ALGORITHMS) {
    const prefix = uniquePrefix()
    const [a, b, c] = ['a', 'b', 'c'].map(id => identityKeys(prefix, 'all', `ip:${id}`, algorithm))
    const limits = [{ max: 1, windowMs: 60_000, burst: 1 }]
    const input = (keys: typeof a): DecideInput => ({ keys: keys!, limits, ban: { threshold: 2, ladder: [60_000], forgetMs: 0 }, peek: false, algorithm })
    await redis.set(c!.override, '3 60000 3')
    const decisions = (await store.decideMany([input(b), input(a), input(a), input(a), input(a), input(c), input(c)], algorithm)) as Decision[]
    t.strictSame(decisions.map(d => d.status), ['allowed', 'allowed', 'limited', 'banned', 'banned', 'allowed', 'allowed'], `${algorithm}: a's ban holds from the request that started it`)
    t.strictSame([decisions[3]!.banStarted, decisions[4]!.banStarted, decisions[4]!.at], [true, false, 0], `${algorithm}: the next request is found banned`)
    t.strictSame(decisions.slice(5).map(d => [d.limit, d.count]), [[3, 1], [3, 2]], `${algorithm}: c counts against its override`)
  }
})
