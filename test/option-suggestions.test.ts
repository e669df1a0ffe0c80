// Option errors that suggest the fix: an unknown name is told the nearest name taken where it was given, or
// what another rate limiter's name is here and how to write it, or that a limit's own field belongs in
// `limits`; a route's error names its method and URL; `rateLimit: true` is told what to write; and every link
// to the docs in lib/ points at a page and a heading that exist. No Redis: the in-process store.
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import type { FastifyError, FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { docsUrl } from '../lib/docs-links.js'
import { resolveOptions } from '../lib/options/plugin.js'
import { FOREIGN, nearest } from '../lib/options/suggestions.js'
import { OPTIONS, PLUGIN_ONLY } from '../lib/options/table.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'
const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }
const DOCS = `https://github.com/fastify-rate-guard/fastify-rate-guard/blob/v${version}/docs/`
const OPTIONS_LINK = `Every option: ${DOCS}options.md#options`

/** The message the plugin's options are refused with (a warning fails the test). */
function refusal (options: Record<string, unknown>): string {
  try {
    resolveOptions(options, (_code, message) => { throw new Error(`unexpected warning: ${message}`) })
  } catch (err) {
    if ((err as FastifyError).code !== INVALID) throw err
    return (err as Error).message
  }
  throw new Error(`${JSON.stringify(options)} was accepted`)
}

async function app (t: Test): Promise<FastifyInstance> {
  const made = Fastify({ logger: false })
  t.teardown(async () => { await made.close() })
  await made.register(rateGuard, { max: 5 })
  return made
}

/** The error declaring a route with `rateLimit` throws (`method`, `url`: the route's). */
function declaring (server: FastifyInstance, rateLimit: unknown, url = '/search', method: string | string[] = 'GET') {
  try {
    server.route({ method, url, config: { rateLimit: rateLimit as never }, handler: async () => 'ok' })
  } catch (err) {
    return err as FastifyError
  }
  throw new Error(`${url}: ${JSON.stringify(rateLimit)} was accepted`)
}

t.test('a near name: the nearest option taken there (an edit or two, a case, a swap)', async t => {
  const cases: Array<[string, string]> = [['maxx', 'max'], ['timewindow', 'timeWindow'],
    ['keygenerator', 'keyGenerator'], ['cots', 'cost'], ['time_window', 'timeWindow'], ['alowList', 'allowList'],
    ['namespace', 'nameSpace']]
  for (const [given, meant] of cases) {
    const says = `Invalid rate-guard option "${given}": no such option; did you mean \`${meant}\`? ${OPTIONS_LINK}`
    t.equal(refusal({ [given]: 1 }), says, given)
  }
})

t.test('a name far from every option: no suggestion, the list of options', async t => {
  for (const given of ['zebra', 'colour', 'x']) {
    t.equal(refusal({ [given]: 1 }), `Invalid rate-guard option "${given}": no such option. ${OPTIONS_LINK}`, given)
  }
  t.equal(nearest('m', ['max']), undefined, 'a one-letter name is two edits from max: too far')
})

t.test('other libraries\' names: ours, and how to write it', async t => {
  const cases: Array<[string, RegExp]> = [
    ['windowMs', /express-rate-limit's `windowMs` is `timeWindow` here: timeWindow: 15 \* 60_000/],
    ['limit', /express-rate-limit's `limit` is `max` here: max: 100/],
    ['skip', /express-rate-limit's `skip` is `allowList` here: allowList: \(request, key\) => boolean/],
    ['message', /`message` is `errorResponseBuilder` here: errorResponseBuilder: \(request, context\) =>/],
    ['handler', /express-rate-limit's `handler` is `errorResponseBuilder` or `onExceeded` here/],
    ['passOnStoreError', /`failMode` here: failMode: 'open'/],
    ['points', /rate-limiter-flexible's `points` is `max` here: max: 5/],
    ['duration', /rate-limiter-flexible's `duration` is `timeWindow` here: .*duration counts seconds/],
    ['blockDuration', /rate-limiter-flexible's `blockDuration` is `ban` here: ban: \{ threshold: 1, duration: /],
    ['keyPrefix', /rate-limiter-flexible's `keyPrefix` is `nameSpace` here: nameSpace: 'my-app:'\. /],
    ['validate', /express-rate-limit's `validate` has no equivalent here: every option is checked at register/],
    ['execEvenly', /rate-limiter-flexible's `execEvenly` has no equivalent here/]
  ]
  for (const [given, says] of cases) {
    const message = refusal({ [given]: 1 })
    t.match(message, new RegExp(`^Invalid rate-guard option "${given}": no such option: `), given)
    t.match(message, says, given)
    t.ok(message.endsWith(OPTIONS_LINK), `${given}: ends with the list of options`)
  }
})

t.test('the map of other libraries\' names suggests only options that exist, for names that are not ours', async t => {
  const ours = new Set(Object.keys(OPTIONS))
  for (const [name, { ours: mapped }] of Object.entries(FOREIGN)) {
    t.notOk(ours.has(name), `${name} is not an option of ours (else it would never be told)`)
    t.strictSame(mapped.filter(option => !ours.has(option)), [], `${name} maps to options of the table`)
  }
  // The names theirs and ours share are taken as they are.
  const same = ['keyGenerator', 'store', 'standardHeaders', 'legacyHeaders', 'skipSuccessfulRequests', 'skipFailedRequests']
  for (const name of same) {
    t.ok(ours.has(name), `${name} is ours`)
  }
})

t.test('a limit\'s own field beside the limits: it belongs in limits, with an example', async t => {
  const limits = `See ${DOCS}options.md#limits`
  t.equal(refusal({ per: 'day' }), 'Invalid rate-guard option "per": no such option here: `per` belongs in a limit of ' +
    `\`limits\`: limits: [{ max: 1000, per: 'day' }]. ${limits}`)
  t.match(refusal({ timeZone: 'UTC' }), /`timeZone` belongs in a limit of `limits`: limits: \[\{ max: 1000, per: 'day', timeZone: /)
  t.match(refusal({ name: 'api' }), /`name` belongs in a limit of `limits`: limits: \[\{ max: 100, timeWindow: '1 minute', name: /)
  const server = await app(t)
  t.match(declaring(server, { max: 10, per: 'month' }).message,
    /^GET \/search: Invalid rate-guard option "config\.rateLimit\.per": no such option here: `per` belongs in a limit of/)
})

t.test('a route\'s error names its method and URL; a limiter\'s its call', async t => {
  const server = await app(t)
  const typo = declaring(server, { maxx: 3 })
  t.equal(typo.code, INVALID, 'the code is kept')
  const typed = 'GET /search: Invalid rate-guard option "config.rateLimit.maxx": no such option; did you mean `max`?'
  t.equal(typo.message, `${typed} ${OPTIONS_LINK}`)
  t.match(typo.stack, /^FastifyError: GET \/search: Invalid rate-guard option "config\.rateLimit\.maxx"/, 'the stack says it too')
  t.match(declaring(server, { max: '2' }, '/v1/items/:id', ['GET', 'POST']).message,
    /^GET,POST \/v1\/items\/:id: Invalid rate-guard option "config\.rateLimit\.max": expected .* got "2"$/, 'a bad value too, every method')
  t.match(declaring(server, { ban: { treshold: 1, duration: '1s' } }).message,
    /^GET \/search: Invalid rate-guard option "config\.rateLimit\.ban\.treshold": no such option; did you mean `threshold`\?/, 'nested too')
  t.match(declaring(server, { redis: 'redis://x' }).message,
    /^GET \/search: Invalid rate-guard option "config\.rateLimit\.redis": expected it at register only/)
  const prefixed = Fastify({ logger: false })
  t.teardown(async () => { await prefixed.close() })
  await prefixed.register(rateGuard)
  await prefixed.register(async scope => {
    t.match(declaring(scope, { skip: () => true }, '/users').message, /^GET \/api\/users: .*`skip` is `allowList` here/, 'with its prefix')
  }, { prefix: '/api' })
  t.equal(declaring(server, { groupId: 7 }).message, 'groupId must be a string', '@fastify/rate-limit\'s words, as they are')

  const call = `Invalid rate-guard option "createRateLimit.maxx": no such option; did you mean \`max\`? ${OPTIONS_LINK}`
  t.throws(() => server.createRateLimit({ maxx: 3 } as never), { code: INVALID, message: call })
  t.throws(() => server.rateLimit({ windowMs: 1000 } as never),
    { code: INVALID, message: /^Invalid rate-guard option "rateLimit\.windowMs": no such option: express-rate-limit's `windowMs` is `timeWindow`/ })
})

t.test('where the near option is not taken, it is not suggested', async t => {
  const server = await app(t)
  const message = declaring(server, { nameSpac: 'app:' }).message
  t.notMatch(message, /did you mean/, 'nameSpace is not a route\'s option')
  t.match(message, /"config\.rateLimit\.nameSpac": no such option; `nameSpace` is given at register only \(it holds for the whole plugin\)\. /)
  t.match(declaring(server, { keyPrefix: 'app:' }).message,
    /`keyPrefix` is `nameSpace` here: nameSpace: 'my-app:'; `nameSpace` is given at register only/)
  const ban = refusal({ ban: { threshold: 1, duration: '1s', maxx: 2 } })
  t.equal(ban, `Invalid rate-guard option "ban.maxx": no such option. ${OPTIONS_LINK}`, 'a ban has no max')
  t.match(refusal({ concurrency: { max: 2, leas: 1000 } }), /"concurrency\.leas": no such option; did you mean `lease`\?/, 'its own nearest')
  t.ok(PLUGIN_ONLY.has('nameSpace'))
})

t.test('rateLimit: true on a route: their words, then what to write instead', async t => {
  const server = await app(t)
  const err = declaring(server, true, '/reports')
  t.equal(err.code, 'FST_RATE_GUARD_INVALID_ROUTE_CONFIG')
  t.equal(err.message, 'Unknown value for route rate-limit configuration: GET /reports gives config: { rateLimit: true }, ' +
    'which is not a configuration. Leave rateLimit out (or null) to count on the plugin\'s budget; write ' +
    'rateLimit: {} for a budget of the route\'s own with the plugin\'s options (how to limit a route under ' +
    `global: false), or rateLimit: false for no limit. See ${DOCS}options.md#per-route-configuration`)
  // Theirs compares the message of a function word for word (route-rate-limit.test.js): any other value keeps it.
  for (const config of [() => {}, 'yes', 1, []]) {
    t.equal(declaring(server, config).message, 'Unknown value for route rate-limit configuration', typeof config)
  }
  const writes = server.get('/written', { config: { rateLimit: {} } }, async () => 'ok')
  t.ok(writes, 'rateLimit: {} registers, as the message says')
})

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as '-', repeats numbered. */
function anchors (page: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const [, heading] of page.replace(/```[\s\S]*?```/g, '').matchAll(/^#{1,6} (.+)$/gm)) {
    const slug = heading!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')
    const count = seen.get(slug) ?? 0
    seen.set(slug, count + 1)
    out.add(count === 0 ? slug : `${slug}-${count}`)
  }
  return out
}

t.test('every link to the docs in lib/ points at a page and a heading that exist', async t => {
  const lib = join(ROOT, 'lib')
  const files = (readdirSync(lib, { recursive: true }) as string[]).filter(file => file.endsWith('.ts'))
  const links: Array<[string, string, string]> = []
  for (const file of files) {
    const source = readFileSync(join(lib, file), 'utf8')
    for (const [, page, anchor] of source.matchAll(/docsUrl\('([^']*)', '([^']*)'\)/g)) {
      links.push([file, page!, anchor!])
    }
    // A message names no file of docs/, which the package does not ship: it links (comments aside).
    const code = source.split('\n').filter(line => !/^\s*(\/\/|\*|\/\*\*)/.test(line)).join('\n')
    t.notMatch(code, /docs\/\w+\.md/, `${file}: no docs/ path in its code`)
  }
  t.ok(links.length >= 3, `found ${links.length} links`)
  for (const [file, page, anchor] of links) {
    const text = readFileSync(join(ROOT, 'docs', `${page}.md`), 'utf8')
    t.ok(anchors(text).has(anchor), `${file}: docs/${page}.md#${anchor} is a heading there`)
  }
  t.equal(docsUrl('options', 'limits'), `${DOCS}options.md#limits`, 'the version is package.json\'s')
  t.ok(anchors('# A\n## `maxWait`: wait, don\'t 429').has('maxwait-wait-dont-429'), 'backticks and punctuation dropped')
  t.ok(anchors('# A\n# A').has('a-1'), 'a repeated heading is numbered')
})

t.test('docs/migrating.md\'s table of other libraries\' names agrees with the map', async t => {
  const page = readFileSync(join(ROOT, 'docs', 'migrating.md'), 'utf8')
  const found = page.matchAll(/^\| `(\w+)` \((express-rate-limit|rate-limiter-flexible)\) \| (.*) \|$/gm)
  const rows = new Map([...found].map(([, name, library, here]) => [name!, { library, here: here! }]))
  for (const [name, { library, ours }] of Object.entries(FOREIGN)) {
    const row = rows.get(name)
    t.equal(row?.library, library, `${name}: a row of ${library}'s`)
    for (const option of ours) t.match(row?.here, new RegExp(`\`${option}\\b`), `${name}: the row names ${option}`)
    if (ours.length === 0) t.match(row?.here, /no equivalent/, `${name}: the row says there is no equivalent`)
  }
  t.strictSame([...rows.keys()].filter(name => !(name in FOREIGN)), [], 'the table names only names of the map')
})
