// A command whose reply was lost can run twice (a client re-sending it after a reconnect). The script is
// safe to replay: the same member never counts twice, and one denial is one strike.
import t from 'tap'
import { identityKeys } from '../lib/stores/key-names.js'
import { RedisStore } from '../lib/stores/redis.js'
import { LEAN_SCRIPTS, defineScript, leanArgs, scriptArgs } from '../lib/stores/scripts.js'
import { memberBases, members } from '../lib/stores/member-ids.js'
import { toDecision, toLeanDecisions } from '../lib/stores/replies.js'
import { decideInput } from './helpers/stores.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

// The sliding log's script, and its lean path's (the request is of the lean shape: one limit, a cost of 1).
for (const lean of [false, true]) {
  t.test(`replaying a decision with the same member counts nothing twice (${lean ? 'the lean script' : 'lua/decide.lua'})`, async t => {
    const redis = client(t, (await getRedis(t)).url)
    const script = defineScript(redis, lean ? LEAN_SCRIPTS['sliding-log']! : 'sliding-log')
    const keys = identityKeys(uniquePrefix(), 'all', '192.0.2.1')
    // max 2, window 60 s, ban after 2 denials for 60 s
    const input = decideInput({ keys, max: 2, windowMs: 60_000, banThreshold: 2, banMs: 60_000 })
    // A call's one request has the member `<base>1`: the same base is the same request, sent again.
    const decide = async (base: string) => lean
      ? toLeanDecisions(await script(...leanArgs([input], base)), [`${base}1`], [input])[0]
      : toDecision(await script(...scriptArgs([input], 'decide', base)), `${base}1`, input.limits)

    t.match(await decide('a'), { status: 'allowed', count: 1 })
    t.match(await decide('a'), { status: 'allowed', count: 1 }, 'the replay of an allowed request adds no entry')
    t.equal(await redis.zcard(keys.log), 1)

    t.match(await decide('b'), { status: 'allowed', count: 2 })
    t.match(await decide('a'), { status: 'allowed', count: 2 }, 'replayed once the log is full: still allowed, no strike')
    t.equal(await redis.exists(keys.strikes), 0, 'no strike was counted for it')

    t.match(await decide('c'), { status: 'limited', count: 2 }, 'a new request is denied: strike 1')
    t.match(await decide('c'), { status: 'limited', count: 2 }, 'its replay is the same denial, not strike 2')
    t.equal(await redis.scard(keys.strikes), 1)
    t.match(await decide('d'), { status: 'banned', banStarted: true }, 'a second request denied: the ban starts')
    t.equal(await redis.exists(keys.strikes), 0, 'the strikes are gone once the ban starts')
    t.ok(await redis.pttl(keys.banned) > 59_000, 'banned for the ban duration')
  })
}

t.test('members: integers below 2^63 (what Redis keeps as 8 bytes), one base per call, unique across calls and stores', async t => {
  const next = memberBases()
  const [first, second] = [next(), next()]
  t.match(first, /^[1-8]\d{16}$/, 'a base: 17 digits, the first 1 to 8')
  t.equal(BigInt(second), BigInt(first) + 1n, 'the next call\'s: one more')
  t.strictSame(members(first, 3), [`${first}1`, `${first}2`, `${first}3`])

  const redis = client(t, (await getRedis(t)).url)
  const keys = identityKeys(uniquePrefix(), 'all', '192.0.2.2')
  const stores = [new RedisStore(redis, false), new RedisStore(redis, false), new RedisStore(redis, false, '', { lean: false })]
  for (let i = 0; i < 4; i++) {
    for (const store of stores) t.match(await store.decide(decideInput({ keys, max: 100, windowMs: 60_000 })), { status: 'allowed', count: 3 * i + stores.indexOf(store) + 1 })
  }
  const logged = await redis.zrange(keys.log, '0', '-1')
  t.equal(new Set(logged).size, 12, 'every request its own entry')
  for (const member of logged) t.ok(/^[1-8]\d{17,18}$/.test(member) && BigInt(member) < 2n ** 63n, `${member}: an integer below 2^63`)
})
