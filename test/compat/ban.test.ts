// @fastify/rate-limit compatibility, `ban: N`: theirs answers 403 from the (N + 1)th denial within a window
// until that window ends. Here it is a ban of one window from the (N + 1)th denial, on every route of the
// registration (theirs: on the route that counted). Run beside @fastify/rate-limit for the sequence a client sees.
import t from 'tap'
import { appWith, statuses, times } from './helpers.js'

for (const ban of [0, 1, 3]) {
  t.test(`ban: ${ban}: the same answers as @fastify/rate-limit within a window`, async t => {
    const options = { max: 2, timeWindow: '1 minute', ban }
    const theirs = await statuses(await appWith(t, 'theirs', options), times(8, '/'))
    const ours = await statuses(await appWith(t, 'ours', options), times(8, '/'))
    t.strictSame(ours, theirs, `${ban} denials answered 429, then 403`)
    t.strictSame(ours.slice(0, 2 + ban + 1), [200, 200, ...Array(ban).fill(429), 403])
  })
}

t.test('ban: N bans for one window of the budget that banned, with 403 and its Retry-After', async t => {
  // The app's error handler sees the coded error; it hands it on to Fastify's default, which writes the body.
  const thrown: unknown[] = []
  // Windows of seconds, not a few hundred ms: the ban must still hold when it is read, on a loaded machine too.
  const app = await appWith(t, 'ours', { max: 1, timeWindow: 3000, ban: 1 }, { config: { rateLimit: { timeWindow: 2000 } } }, app => {
    app.setErrorHandler(async (err: { code?: string }) => { thrown.push(err.code); throw err })
  })
  const codes = await statuses(app, times(3, '/'))
  t.strictSame(codes, [200, 429, 403])
  const banned = await app.inject('/')
  t.equal(banned.statusCode, 403)
  t.strictSame(Object.keys(banned.json()).sort(), ['error', 'message', 'statusCode'], 'the body as theirs: no code')
  t.match(banned.json(), { statusCode: 403, error: 'Forbidden' })
  t.strictSame(thrown, ['FST_RATE_GUARD_TOO_MANY_REQUESTS', 'FST_RATE_GUARD_BANNED', 'FST_RATE_GUARD_BANNED'], 'the thrown errors keep their codes')
  t.equal(banned.headers['retry-after'], '2', 'the route\'s window (2 s), in whole seconds, rounded up')
  const peek = await app.rateGuard.peek('127.0.0.1', { route: 'GET /' })
  t.equal(peek.status, 'banned')
  t.ok(peek.retryMs > 0 && peek.retryMs <= 2000, `banned for the route's window, not the plugin's 3 s (${peek.retryMs} ms left)`)
})

t.test('ban: N over a timeWindow function bans for the window of the request that starts it, with the same answers as theirs', async t => {
  const seen: Partial<Record<'theirs' | 'ours', unknown[]>> = {}
  for (const plugin of ['theirs', 'ours'] as const) {
    const app = await appWith(t, plugin, { max: 1, timeWindow: async () => 30_000, ban: 1 })
    seen[plugin] = []
    for (let i = 0; i < 4; i++) {
      const res = await app.inject('/')
      seen[plugin].push([res.statusCode, res.headers['retry-after']])
    }
  }
  t.strictSame(seen.ours, seen.theirs)
  t.strictSame(seen.ours, [[200, undefined], [429, '30'], [403, '30'], [403, '30']])
  for (const shadow of [{ ban: false }, { ban: true }]) {
    const bans: unknown[] = []
    const watched = await appWith(t, 'ours', { max: 1, timeWindow: () => 30_000, ban: 1, mode: 'shadow', shadow, onBanReach: (_request: unknown, _key: unknown, info: unknown) => bans.push(info) })
    t.strictSame(await statuses(watched, times(4, '/')), [200, 200, 200, 200], `shadow, ban ${String(shadow.ban)}: never refused`)
    t.match(bans, shadow.ban ? [{ durationMs: 30_000, shadow: true }] : [], shadow.ban ? 'a ban of the window, recorded' : 'no ban struck')
  }
})

t.test('a ban theirs reads another way is read as theirs (below 0: none, a fraction: its integer part)', async t => {
  for (const ban of [-1, -2, 1.5, Number.NaN]) {
    const seen: Partial<Record<'theirs' | 'ours', number[]>> = {}
    for (const plugin of ['theirs', 'ours'] as const) {
      seen[plugin] = await statuses(await appWith(t, plugin, { max: 1, timeWindow: '1 minute', ban }), times(4, '/'))
    }
    t.strictSame(seen.ours, seen.theirs, `ban ${ban}: the same answers`)
    t.strictSame(seen.ours, ban === 1.5 ? [200, 429, 403, 403] : [200, 429, 429, 429], `ban ${ban}: ${ban === 1.5 ? 'ban 1' : 'no ban'}`)
  }
  const seen: Partial<Record<'theirs' | 'ours', number[]>> = {}
  for (const plugin of ['theirs', 'ours'] as const) {
    seen[plugin] = await statuses(await appWith(t, plugin, { max: 1, timeWindow: '1 minute', ban: 0 }, { config: { rateLimit: { ban: -1 } } }), times(3, '/'))
  }
  t.strictSame(seen.ours, seen.theirs, "a route's ban: -1 turns the plugin's off")
  t.strictSame(seen.ours, [200, 429, 429])
})

t.test('onBanReach: once per ban here; theirs on every request answered 403 (recorded)', async t => {
  const calls: Record<'theirs' | 'ours', number> = { theirs: 0, ours: 0 }
  for (const plugin of ['theirs', 'ours'] as const) {
    const app = await appWith(t, plugin, { max: 1, timeWindow: '1 minute', ban: 1, onBanReach: () => { calls[plugin]++ } })
    t.strictSame(await statuses(app, times(6, '/')), [200, 429, 403, 403, 403, 403], plugin)
  }
  t.equal(calls.theirs, 4, 'theirs: each of the four 403s')
  t.equal(calls.ours, 1, 'ours: the request that started the ban')
})
