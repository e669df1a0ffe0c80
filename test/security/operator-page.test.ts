// Attack: the operator page (lib/operator/page.ts, mounted as examples/app.js does: test/helpers/operator-app.ts)
// took unlimited password guesses (3,000 wrong Basic passwords in 5 s from one address, all 401), could be
// framed (its unban button clickjacked), was cacheable, and took an unban POST from any origin. Defence, each checked over real
// HTTP against the example app, on Redis and in process:
//   - failed logins are counted by the plugin itself, per client address, before the password is checked:
//     5 per 15 minutes, then a ban of an hour, refused even with the right password;
//   - a neighbour behind the operator's address (a NAT, an office, a proxy) made five wrong guesses and the
//     operator's right password got 403 for an hour: a browser that logged in once carries a signed device
//     cookie and counts its failed logins on that device, so the neighbour's ban does not reach it, and a
//     forged cookie counts on the address;
//   - every response of the page says no-store, no framing, no sniffing, no referrer, and a CSP that lets in
//     only the page's own script and style (by hash);
//   - a state-changing request from another origin (Origin, Sec-Fetch-Site) is refused, and changes nothing.
// Clients are told apart by X-Forwarded-For, which the example believes from loopback only (as here).
import { createHash } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import rateGuard from '../../lib/index.js'
import { operatorPage } from '../../lib/operator/page.js'
import { hashIdentity } from '../../lib/stores/key-names.js'
import { buildOperatorApp } from '../helpers/operator-app.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

const PASSWORD = 'operator-test-password'
const RIGHT = 'Basic ' + Buffer.from(`operator:${PASSWORD}`).toString('base64')
const WRONG = (n: number): string => 'Basic ' + Buffer.from(`operator:guess-${n}`).toString('base64')

interface Served { app: FastifyInstance, origin: string, ask: (path: string, from: string, init?: RequestInit & { headers?: Record<string, string> }) => Promise<Response> }

async function serve (t: Test, redis: string | undefined): Promise<Served> {
  const app = await buildOperatorApp({ redis, nameSpace: uniquePrefix(), operatorPassword: PASSWORD })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const ask = async (path: string, from: string, init: RequestInit & { headers?: Record<string, string> } = {}): Promise<Response> => {
    const response = await fetch(`${origin}${path}`, { ...init, headers: { 'x-forwarded-for': from, ...init.headers } })
    await response.arrayBuffer()
    return response
  }
  return { app, origin, ask }
}

const stores: Array<[string, (t: Test) => Promise<string | undefined>]> = [
  ['Redis', async t => (await getRedis(t)).url],
  ['in process', async () => undefined]
]

for (const [store, redisOf] of stores) {
  t.test(`${store}: failed logins are limited, then banned, per client, before the password is checked`, async t => {
    const { ask } = await serve(t, await redisOf(t))
    const guesser = '198.51.100.50'
    const statuses: number[] = []
    for (let i = 0; i < 30; i++) statuses.push((await ask('/rate-guard', guesser, { headers: { authorization: WRONG(i) } })).status)
    t.strictSame(statuses.slice(0, 5), [401, 401, 401, 401, 401], 'five wrong passwords are answered 401')
    t.ok(statuses.slice(5).every(status => status === 403), `then every guess is refused by the ban: ${statuses.slice(5).join(' ')}`)
    t.equal((await ask('/rate-guard', guesser, { headers: { authorization: RIGHT } })).status, 403, 'a banned client is refused even with the right password')
    t.equal((await ask('/rate-guard/data', guesser, { headers: { authorization: RIGHT } })).status, 403, 'on every route of the page')
    t.equal((await ask('/items', guesser)).status, 200, 'the ban is on the operator page only: the API still answers that address')
    t.equal((await ask('/rate-guard', '198.51.100.51', { headers: { authorization: RIGHT } })).status, 200, 'another client with the right password gets in')

    // At once: the limit is taken before the password is checked, so a burst gets no more than five tries.
    const burst = await Promise.all(Array.from({ length: 40 }, async (_, i) => (await ask('/rate-guard/data', '198.51.100.52', { headers: { authorization: WRONG(i) } })).status))
    t.ok(burst.filter(status => status === 401).length <= 5, `a burst of 40 guesses: ${burst.filter(status => status === 401).length} checked, at most 5`)
    t.ok(burst.every(status => status === 401 || status === 403 || status === 429), 'the others refused')

    // What does not count: a visit without credentials (a browser's first request) and a successful login.
    const operator = '198.51.100.53'
    for (let i = 0; i < 10; i++) t.equal((await ask('/rate-guard', operator)).status, 401)
    for (let i = 0; i < 10; i++) t.equal((await ask('/rate-guard/data', operator, { headers: { authorization: RIGHT } })).status, 200)
    const after = []
    for (let i = 0; i < 5; i++) after.push((await ask('/rate-guard', operator, { headers: { authorization: WRONG(i) } })).status)
    t.strictSame(after, [401, 401, 401, 401, 401], 'no credentials and right ones count nothing: five guesses are still left')
    t.equal((await ask('/rate-guard', operator, { headers: { authorization: WRONG(5) } })).status, 403, 'the sixth bans')
  })
}

for (const [store, redisOf] of stores) {
  t.test(`${store}: a neighbour sharing the operator's address cannot lock the operator out`, async t => {
    const { ask } = await serve(t, await redisOf(t))
    const office = '198.51.100.80'
    // The operator logs in once from this browser, and is given its device cookie.
    const first = await ask('/rate-guard', office, { headers: { authorization: RIGHT } })
    t.equal(first.status, 200, 'the operator logs in')
    const set = first.headers.get('set-cookie') ?? ''
    t.match(set, /^rate-guard-device=[\w-]+\.[\w-]+; Path=\/rate-guard; Max-Age=\d+; HttpOnly; SameSite=Strict$/, `a device cookie: ${set}`)
    const cookie = set.split(';')[0]!
    const again = await ask('/rate-guard/data', office, { headers: { authorization: RIGHT, cookie } })
    t.equal(again.headers.get('set-cookie'), null, 'a browser that has one is not given another')

    // A neighbour behind the same address guesses: five wrong passwords, then the address is banned.
    const guesses: number[] = []
    for (let i = 0; i < 8; i++) guesses.push((await ask('/rate-guard', office, { headers: { authorization: WRONG(i) } })).status)
    t.strictSame(guesses, [401, 401, 401, 401, 401, 403, 403, 403], 'the neighbour: five guesses, then banned')
    t.equal((await ask('/rate-guard', office, { headers: { authorization: RIGHT } })).status, 403,
      'a browser that never logged in is refused with its address, even with the right password')

    // The operator's browser is not the address: the right password still gets in, on every route.
    t.equal((await ask('/rate-guard', office, { headers: { authorization: RIGHT, cookie } })).status, 200, 'the operator gets in')
    t.equal((await ask('/rate-guard/data', office, { headers: { authorization: RIGHT, cookie } })).status, 200, 'and reads the data')

    // A cookie that does not verify is no device: it counts on the (banned) address, never on a fresh budget.
    const [name, value] = cookie.split('=') as [string, string]
    const forged = [
      `${name}=${value.split('.')[0]!}.${'A'.repeat(43)}`,
      `${name}=made-up.${value.split('.')[1]!}`,
      `${name}=${value.split('.')[0]!}`,
      `${name}=.`,
      `${name}=${'x'.repeat(9000)}`
    ]
    for (const other of forged) {
      t.equal((await ask('/rate-guard', office, { headers: { authorization: WRONG(99), cookie: other } })).status, 403, `a forged cookie counts on the address: ${other.slice(0, 40)}`)
    }

    // The device's own guesses are limited and banned like any client's: a stolen cookie guesses no faster.
    const mine: number[] = []
    for (let i = 0; i < 7; i++) mine.push((await ask('/rate-guard', office, { headers: { authorization: WRONG(i), cookie } })).status)
    t.strictSame(mine, [401, 401, 401, 401, 401, 403, 403], 'wrong passwords with the device cookie: five, then the device is banned')
    t.equal((await ask('/rate-guard', office, { headers: { authorization: RIGHT, cookie } })).status, 403, 'a banned device is refused with the right password')
  })
}

t.test('the page keeps its limit whatever the app\'s plugin-wide options (shadow, preHandler, an allow list)', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { nameSpace: uniquePrefix(), hook: 'preHandler', mode: 'shadow', allowList: () => true, max: 1000 })
  await app.register(operatorPage, { credentials: { user: 'operator', password: PASSWORD } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const statuses: number[] = []
  for (let i = 0; i < 8; i++) statuses.push((await fetch(`${origin}/rate-guard`, { headers: { authorization: WRONG(i) } })).status)
  t.strictSame(statuses, [401, 401, 401, 401, 401, 403, 403, 403], 'five guesses, then banned')
})

const HEADERS = {
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin'
}

t.test('every response of the page carries the security headers, and a CSP its own script passes', async t => {
  const { app, origin, ask } = await serve(t, (await getRedis(t)).url)
  await app.rateGuard.ban('198.51.100.60', '1 hour')
  for (let i = 0; i < 5; i++) await ask('/rate-guard', '198.51.100.61', { headers: { authorization: WRONG(i) } })
  const json = { 'content-type': 'application/json' }
  const kinds: Array<[string, number, () => Promise<Response>]> = [
    ['the page', 200, async () => await ask('/rate-guard', '198.51.100.62', { headers: { authorization: RIGHT } })],
    ['its HEAD', 200, async () => await ask('/rate-guard', '198.51.100.62', { method: 'HEAD', headers: { authorization: RIGHT } })],
    ['its data', 200, async () => await ask('/rate-guard/data', '198.51.100.62', { headers: { authorization: RIGHT } })],
    ['an unban', 200, async () => await ask('/rate-guard/unban', '198.51.100.62', { method: 'POST', headers: { authorization: RIGHT, origin, ...json }, body: JSON.stringify({ keyHash: hashIdentity('198.51.100.60') }) })],
    ['no credentials', 401, async () => await ask('/rate-guard', '198.51.100.62')],
    ['wrong ones', 401, async () => await ask('/rate-guard/data', '198.51.100.62', { headers: { authorization: WRONG(0) } })],
    ['a banned client', 403, async () => await ask('/rate-guard', '198.51.100.61', { headers: { authorization: WRONG(9) } })],
    ['another origin', 403, async () => await ask('/rate-guard/unban', '198.51.100.62', { method: 'POST', headers: { authorization: RIGHT, origin: 'https://evil.example', ...json }, body: '{}' })]
  ]
  // One after the other: a client's requests in flight hold the budget until they are answered.
  for (const [kind, status, answer] of kinds) {
    const response = await answer()
    t.equal(response.status, status, `${kind}: ${status}`)
    for (const [name, value] of Object.entries(HEADERS)) t.equal(response.headers.get(name), value, `${kind}: ${name}`)
    const csp = response.headers.get('content-security-policy') ?? ''
    t.match(csp, /(^|; )frame-ancestors 'none'(;|$)/, `${kind}: frame-ancestors 'none'`)
    t.match(csp, /(^|; )default-src 'none'(;|$)/, `${kind}: default-src 'none'`)
    t.notMatch(csp, /unsafe-inline|unsafe-eval/, `${kind}: nothing unsafe`)
  }

  // The CSP names the page's inline script and style by their SHA-256, and nothing else runs.
  const page = await fetch(`${origin}/rate-guard`, { headers: { authorization: RIGHT, 'x-forwarded-for': '198.51.100.62' } })
  const html = await page.text()
  const csp = page.headers.get('content-security-policy') ?? ''
  const hash = (source: string): string => `'sha256-${createHash('sha256').update(source).digest('base64')}'`
  const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map(m => m[1]!)
  const styles = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map(m => m[1]!)
  t.equal(scripts.length, 1, 'one inline script')
  t.equal(styles.length, 1, 'one inline style')
  t.match(csp, new RegExp(`(^|; )script-src ${hash(scripts[0]!).replace(/[+/]/g, '\\$&')}(;|$)`), 'script-src: its hash alone')
  t.match(csp, new RegExp(`(^|; )style-src ${hash(styles[0]!).replace(/[+/]/g, '\\$&')}(;|$)`), 'style-src: its hash alone')
  t.match(csp, /(^|; )connect-src 'self'(;|$)/, 'it may fetch its data from its own origin')
})

t.test('an unban from another origin is refused and the ban stays; from the page\'s own origin it works', async t => {
  const { app, origin, ask } = await serve(t, (await getRedis(t)).url)
  const client = '198.51.100.70'
  await app.rateGuard.ban(client, '1 hour')
  const keyHash = hashIdentity(client)
  const unban = async (headers: Record<string, string>): Promise<number> =>
    (await ask('/rate-guard/unban', '198.51.100.71', { method: 'POST', headers: { authorization: RIGHT, 'content-type': 'application/json', ...headers }, body: JSON.stringify({ keyHash }) })).status
  const banned = async (): Promise<boolean> => (await app.rateGuard.bans()).some(ban => ban.keyHash === keyHash)

  const refused: Array<[string, Record<string, string>]> = [
    ['another origin', { origin: 'https://evil.example' }],
    ['another port of the same host', { origin: origin.replace(/:\d+$/, ':1') }],
    ['the other scheme', { origin: origin.replace('http:', 'https:') }],
    ['an opaque origin', { origin: 'null' }],
    ['a cross-site fetch', { 'sec-fetch-site': 'cross-site' }],
    ['a same-site one', { 'sec-fetch-site': 'same-site' }],
    ['the right origin, but fetched from another site', { origin, 'sec-fetch-site': 'cross-site' }],
    ['same-origin metadata, but another origin', { origin: 'https://evil.example', 'sec-fetch-site': 'same-origin' }]
  ]
  for (const [what, headers] of refused) {
    t.equal(await unban(headers), 403, `${what}: 403`)
    t.ok(await banned(), `${what}: the ban stays`)
  }
  t.equal((await ask('/rate-guard', '198.51.100.71', { headers: { authorization: RIGHT } })).status, 200, 'refused origins count no failed login')

  t.equal(await unban({ origin, 'sec-fetch-site': 'same-origin' }), 200, 'the page\'s own origin: unbanned')
  t.notOk(await banned(), 'the ban is lifted')

  await app.rateGuard.ban(client, '1 hour')
  t.equal(await unban({}), 200, 'a client that is not a browser (neither Origin nor Sec-Fetch-Site, as curl): allowed with credentials')
  t.notOk(await banned(), 'the ban is lifted')
})
