// @fastify/rate-limit compatibility, headers: `enableDraftSpec` (RateLimit-Limit / -Remaining / -Reset instead
// of X-RateLimit-*), and the per-header switches `addHeadersOnExceeding` (allowed requests) and `addHeaders`
// (refusals). Each case runs @fastify/rate-limit beside this plugin: the same headers are sent, with the same
// limit and remaining (the reset differs by design: a fixed window's end against the oldest request's leaving).
import t from 'tap'
import { resolveOptions } from '../../lib/options/plugin.js'
import { appWith, rateLimitHeaders } from './helpers.js'
import type { Plugin } from './helpers.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

/** Two allowed requests and one refused, with max 2: the headers of the second and the third. */
async function headersOf (t: Parameters<typeof appWith>[0], plugin: Plugin, options: Record<string, unknown>, route = {}): Promise<{ allowed: Record<string, string>, refused: Record<string, string> }> {
  const app = await appWith(t, plugin, { max: 2, timeWindow: '1 minute', ...options }, route)
  await app.inject('/')
  const allowed = rateLimitHeaders((await app.inject('/')).headers)
  const refused = rateLimitHeaders((await app.inject('/')).headers)
  return { allowed, refused }
}

const CASES: Array<[string, Record<string, unknown>, Record<string, unknown>?]> = [
  ['defaults', {}],
  ['enableDraftSpec', { enableDraftSpec: true }],
  ['addHeaders: no reset, no retry-after', { addHeaders: { 'x-ratelimit-reset': false, 'retry-after': false } }],
  ['addHeadersOnExceeding: only the limit', { addHeadersOnExceeding: { 'x-ratelimit-remaining': false, 'x-ratelimit-reset': false } }],
  ['enableDraftSpec with switches', { enableDraftSpec: true, addHeaders: { 'ratelimit-limit': false }, addHeadersOnExceeding: { 'ratelimit-reset': false } }]
]

for (const [name, options, route] of CASES) {
  t.test(`${name}: the same headers as @fastify/rate-limit`, async t => {
    const theirs = await headersOf(t, 'theirs', options, route)
    const ours = await headersOf(t, 'ours', options, route)
    for (const kind of ['allowed', 'refused'] as const) {
      t.strictSame(Object.keys(ours[kind]), Object.keys(theirs[kind]), `${kind}: the same header names`)
      for (const header of Object.keys(theirs[kind]).filter(h => /limit$|remaining$/.test(h))) {
        t.equal(ours[kind][header], theirs[kind][header], `${kind}: ${header}`)
      }
    }
    t.comment(`ours: ${JSON.stringify(ours)}`)
  })
}

t.test('a route\'s switches take the place of the plugin\'s: a header the route does not name is not sent, as with @fastify/rate-limit', async t => {
  const route = { config: { rateLimit: { addHeaders: { 'x-ratelimit-reset': true, 'retry-after': true } } } }
  const seen: Record<string, unknown> = {}
  for (const plugin of ['theirs', 'ours'] as const) {
    const named = await headersOf(t, plugin, { addHeaders: { 'retry-after': false } }, route)
    t.strictSame(Object.keys(named.refused), ['retry-after', 'x-ratelimit-reset'], `${plugin}: the route's two, the plugin's retry-after: false replaced`)
    t.strictSame(Object.keys(named.allowed), ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'], `${plugin}: allowed requests keep the plugin's`)
    const off = await headersOf(t, plugin, {}, { config: { rateLimit: { addHeaders: { 'x-ratelimit-reset': false } } } })
    seen[plugin] = Object.keys(off.refused)
  }
  t.strictSame(seen.ours, seen.theirs, 'a route that turns one header off sends the same as theirs')
  t.strictSame(seen.ours, [], 'none at all')
})

t.test("a switch naming a header theirs take but never send there (the other style's, retry-after on an allowed request): the same headers, and a warning", async t => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ enableDraftSpec: true, addHeaders: { 'x-ratelimit-limit': false } }, 'addHeaders.x-ratelimit-limit'],
    [{ addHeaders: { 'ratelimit-reset': false } }, 'addHeaders.ratelimit-reset'],
    [{ addHeadersOnExceeding: { 'retry-after': false } }, 'addHeadersOnExceeding.retry-after']
  ]
  for (const [options, named] of cases) {
    const seen: Partial<Record<Plugin, unknown>> = {}
    for (const plugin of ['theirs', 'ours'] as const) seen[plugin] = await headersOf(t, plugin, options)
    t.strictSame(seen.ours, seen.theirs, `${named}: the same headers`)
    const warnings: string[] = []
    resolveOptions(options, (_name, message) => { warnings.push(message) })
    t.strictSame(warnings, [`rate-guard: ${named} is not used: no such header is sent there (as with @fastify/rate-limit)`])
  }
})

t.test('switches name headers this plugin sends, as booleans; enableDraftSpec is a plugin option', async t => {
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ addHeaders: { 'x-ratelimit-limit': 'no' } }, /"addHeaders\.x-ratelimit-limit": expected true or false/],
    [{ addHeaders: { 'x-ratelimit-policy': false } }, /"addHeaders\.x-ratelimit-policy": no such option/],
    [{ addHeaders: true }, /"addHeaders": expected an object/],
    [{ enableDraftSpec: 'yes' }, /"enableDraftSpec": expected true or false/]
  ]
  for (const [options, message] of bad) {
    await t.rejects(appWith(t, 'ours', options), { code: INVALID, message }, JSON.stringify(options))
  }
  await t.rejects(appWith(t, 'ours', {}, { config: { rateLimit: { enableDraftSpec: true } } } as never), { code: INVALID, message: /"config\.rateLimit\.enableDraftSpec"/ })
})
