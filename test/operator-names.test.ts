// The operator page's `clientNames` (lib/operator/page.ts, lib/operator/names.ts): by default its data
// names clients by hash alone; when the app opts in, the clients refused (and banned) are named beside their
// hash as the operator knows them, masked, or whole with 'full', never by an API key. Real traffic through the
// example app on Redis, by address (IPv4 and IPv6), user, API key and the page's own failed logins.
import Fastify from 'fastify'
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify'
import t, { type Test } from 'tap'
import { keyHash } from '../lib/index.js'
import { NAME_LENGTH, identitiesOf, maskAddress, maskId } from '../lib/operator/names.js'
import { operatorPage as page } from '../lib/operator/page.js'
import { buildOperatorApp } from './helpers/operator-app.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const PASSWORD = 'operator-test-password'
const RIGHT = 'Basic ' + Buffer.from(`operator:${PASSWORD}`).toString('base64')

type ClientNames = boolean | 'masked' | 'full'
interface Data {
  clientNames?: string
  top: Array<{ keyHash: string, keyKind: string, refused: number, client?: string }>
  bans: Array<{ keyHash: string, retryMs: number, shadow: boolean, client?: string }>
}

/** The clients the traffic below makes, by their keys: who each is, as the app's users would say. */
const CLIENTS = {
  address: '198.51.100.7',
  ipv6: '2001:db8:1:2::',
  user: 'user:alice-42',
  apiKey: 'apikey:key-acme-0001',
  guesser: 'operator-login:198.51.100.40',
  bannedUnseen: '198.51.100.20'
}

async function app (t: Test, operatorClientNames?: ClientNames): Promise<FastifyInstance> {
  const built = await buildOperatorApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), operatorPassword: PASSWORD, ...(operatorClientNames === undefined ? {} : { operatorClientNames }) })
  t.teardown(() => built.close())
  return built
}

/** Each kind of client past its budget, through the loopback proxy the example trusts; and one ban of the operator's. */
async function traffic (app: FastifyInstance): Promise<void> {
  const from = async (address: string, times: number, headers: Record<string, string> = {}, url = '/items'): Promise<void> => {
    for (let i = 0; i < times; i++) await app.inject({ url, remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': address, ...headers } })
  }
  await from('198.51.100.7', 14) // 10 per window: limited three times, so banned
  await from('2001:db8:1:2::5', 11)
  await from('198.51.100.8', 21, { authorization: 'Bearer user-alice-42' }) // a user: 20
  await from('198.51.100.9', 41, { 'x-api-key': 'key-acme-0001' }) // an API key: 40
  await from('198.51.100.40', 6, { authorization: 'Basic ' + Buffer.from('operator:guess').toString('base64') }, '/rate-guard')
  await app.rateGuard.ban(CLIENTS.bannedUnseen, '1 hour')
}

async function pageData (app: FastifyInstance): Promise<{ body: string, data: Data }> {
  const response = await app.inject({ url: '/rate-guard/data', remoteAddress: '127.0.0.1', headers: { authorization: RIGHT, 'x-forwarded-for': '198.51.100.99' } })
  return { body: response.body, data: response.json() }
}

/** Each client's name in the page's data, by its key (null: counted, no name; undefined: not there). */
function namesIn ({ top, bans }: Data): { top: Record<string, string | null | undefined>, bans: Record<string, string | null | undefined> } {
  const by = (rows: Array<{ keyHash: string, client?: string }>): Record<string, string | null | undefined> => Object.fromEntries(Object.entries(CLIENTS).map(([who, key]) => {
    const row = rows.find(r => r.keyHash === keyHash(key))
    return [who, row === undefined ? undefined : row.client ?? null]
  }))
  return { top: by(top), bans: by(bans) }
}

/** What must never be in the page's data: an API key; and, masked, any identity whole. */
const SECRET = 'key-acme-0001'
const WHOLE = ['198.51.100.7', '2001:db8:1:2', 'alice-42', 'acme', '198.51.100.40']

t.test('off by default: the page\'s data names clients by hash alone', async t => {
  const page = await app(t)
  await traffic(page)
  const { body, data } = await pageData(page)
  t.ok(data.top.length >= 5, 'the clients refused are counted')
  t.ok(data.top.every(row => Object.keys(row).join() === 'keyHash,keyKind,refused'), 'each by its hash, kind and count alone')
  t.ok(data.bans.every(ban => Object.keys(ban).join() === 'keyHash,retryMs,shadow'), 'each ban by its hash alone')
  t.notOk('clientNames' in data, 'no naming said')
  for (const name of [SECRET, ...WHOLE, '198.51.100.x', 'a…2']) t.notOk(body.includes(name), `no ${name}`)
})

t.test('clientNames: true, masked: each client beside its hash, as the operator knows it, masked', async t => {
  const page = await app(t, true)
  await traffic(page)
  const { body, data } = await pageData(page)
  t.equal(data.clientNames, 'masked')
  t.strictSame(namesIn(data).top, {
    address: '198.51.100.x',
    ipv6: '2001:db8:1::/48',
    user: 'a…2',
    apiKey: 'a…e', // its owner, acme, masked
    guesser: '198.51.100.x', // limited by the page's own key: named by its address
    bannedUnseen: undefined
  }, 'the clients refused most')
  t.strictSame(namesIn(data).bans, {
    address: '198.51.100.x',
    ipv6: undefined,
    user: undefined,
    apiKey: undefined,
    guesser: '198.51.100.x',
    bannedUnseen: null // banned by the operator and never seen since: the page knows no name, and says none
  }, 'the bans, where the page knows the client')
  t.equal(data.top.find(row => row.keyHash === keyHash(CLIENTS.guesser))?.keyKind, 'custom')
  for (const name of [SECRET, ...WHOLE]) t.notOk(body.includes(name), `never ${name} whole`)

  // Unbanned from the page: the client's count is forgotten, and its name with it.
  const unban = await page.inject({ method: 'POST', url: '/rate-guard/unban', remoteAddress: '127.0.0.1', headers: { authorization: RIGHT, 'x-forwarded-for': '198.51.100.99' }, payload: { keyHash: keyHash(CLIENTS.address) } })
  t.equal(unban.statusCode, 200)
  t.equal(namesIn((await pageData(page)).data).top.address, undefined, 'unbanned: forgotten, name and all')
})

t.test('clientNames: \'full\': each client whole, an API key still as its owner', async t => {
  const page = await app(t, 'full')
  await traffic(page)
  const { body, data } = await pageData(page)
  t.equal(data.clientNames, 'full')
  t.strictSame(namesIn(data).top, {
    address: '198.51.100.7',
    ipv6: '2001:db8:1:2::/64',
    user: 'alice-42',
    apiKey: 'acme',
    guesser: '198.51.100.40',
    bannedUnseen: undefined
  })
  t.equal(namesIn(data).bans.address, '198.51.100.7')
  t.notOk(body.includes(SECRET), 'never the API key')
})

t.test('clientNames: anything else is refused at register, naming what it takes', async t => {
  const operatorPage = page as FastifyPluginAsync<{ credentials: { user: string, password: string }, clientNames: unknown }>
  const bare = Fastify()
  t.teardown(() => bare.close())
  await t.rejects(async () => { await bare.register(operatorPage, { credentials: { user: 'operator', password: PASSWORD }, clientNames: 'yes' }) },
    { name: 'TypeError', message: /clientNames is false, true, 'masked' or 'full', got "yes"/ })
})

t.test('how a name is masked, or cut', async t => {
  t.equal(maskAddress('203.0.113.250'), '203.0.113.x', 'IPv4: the last octet hidden')
  t.equal(maskAddress('2001:db8:abcd:12::'), '2001:db8:abcd::/48', 'IPv6: its /48')
  t.equal(maskAddress('not-an-address'), 'n…s', 'anything else: as an id')
  t.equal(maskId('alice'), 'a…e', 'an id: its first and last characters')
  t.equal(maskId('😀bob😀'), '😀…😀', 'characters, not UTF-16 units')
  t.equal(maskId('bob'), 'b…', 'three: its first character')
  t.equal(maskId('42'), '4…', 'user 42: its first character, not a bare …')
  t.equal(maskId('7'), '…', 'one character: nothing')

  const request = (headers: Record<string, string>, user?: unknown): FastifyRequest => ({ headers, ip: '203.0.113.9', user } as unknown as FastifyRequest)
  const names = (naming: Parameters<typeof identitiesOf>[0], of: FastifyRequest): Record<string, string> =>
    Object.fromEntries(identitiesOf(naming)(of).map(({ key, name }) => [key, name()]))
  t.strictSame(names({ full: true }, request({ 'x-api-key': 'sk-live-0123456789' }, { id: 7 })), {
    'apikey:sk-live-0123456789': 's…9',
    'user:7': '7',
    '203.0.113.9': '203.0.113.9'
  }, 'full: an API key without an owner is masked all the same')
  const long = 'x'.repeat(NAME_LENGTH * 2)
  t.equal(names({ full: true }, request({}, { id: long }))[`user:${long}`], `${'x'.repeat(NAME_LENGTH - 1)}…`, `full: cut at ${NAME_LENGTH} characters`)
  t.strictSame(Object.keys(names({ full: false }, request({ 'x-api-key': '' }, { id: '' }))), ['203.0.113.9'], 'an empty key or id is no identity')
})
