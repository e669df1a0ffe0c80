// One batch decides its requests in order: a ban started by one of its requests holds for the same identity's
// later requests in the call, and an identity with an override gets its own limits beside others without one
// (held while lua/decide.lua's ban and override check was reworked, issue 29).
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
