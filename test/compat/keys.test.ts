// @fastify/rate-limit compatibility, `keyGenerator(request)`: sync or async, a string or a number, on the plugin
// or one route; the key it makes is the client (what the callbacks and the allow list see). Run beside
// @fastify/rate-limit: the same clients, the same keys.
import t from 'tap'
import type { FastifyRequest } from 'fastify'
import { normalizeIP } from '../../lib/index.js'
import { appWith } from './helpers.js'
import type { Plugin } from './helpers.js'

const tenant = (request: FastifyRequest): string => String(request.headers['x-tenant'])

const CASES: Array<[string, (request: FastifyRequest) => unknown]> = [
  ['sync, a string', tenant],
  ['async, a string', async request => tenant(request)],
  ['a number', request => Number(request.headers['x-tenant']) || 0],
  ['async, a number', async request => Number(request.headers['x-tenant']) || 0]
]

/** Requests of tenants 1, 2, 1 and 2 (max 1): the statuses, and the keys onExceeded was given. */
async function seen (t: Parameters<typeof appWith>[0], plugin: Plugin, options: Record<string, unknown>, route = {}): Promise<[number[], string[]]> {
  const exceeded: string[] = []
  const app = await appWith(t, plugin, { max: 1, timeWindow: '1 minute', onExceeded: (_request: unknown, key: unknown) => { exceeded.push(`${typeof key} ${String(key)}`) }, ...options }, route)
  const codes: number[] = []
  for (const id of ['1', '2', '1', '2']) codes.push((await app.inject({ url: '/', headers: { 'x-tenant': id } })).statusCode)
  return [codes, exceeded]
}

for (const [name, keyGenerator] of CASES) {
  t.test(`keyGenerator ${name}: the same clients and keys as @fastify/rate-limit`, async t => {
    const theirs = await seen(t, 'theirs', { keyGenerator })
    const ours = await seen(t, 'ours', { keyGenerator })
    t.strictSame(ours[0], theirs[0], 'statuses')
    t.strictSame(ours[0], [200, 200, 429, 429], 'one budget per tenant')
    // The callbacks are given the key as it came, as theirs: a number stays a number.
    t.strictSame(ours[1], theirs[1], 'keys')
    t.strictSame(ours[1], name.includes('number') ? ['number 1', 'number 2'] : ['string 1', 'string 2'])
  })
}

t.test('a route\'s keyGenerator over the plugin\'s, as theirs', async t => {
  const route = { config: { rateLimit: { keyGenerator: tenant } } }
  const theirs = await seen(t, 'theirs', { keyGenerator: () => 'everyone' }, route)
  const ours = await seen(t, 'ours', { keyGenerator: () => 'everyone' }, route)
  t.strictSame(ours, theirs)
  t.strictSame(ours[0], [200, 200, 429, 429])
})

t.test('a key that is not a string or a number: the request is counted under the default key, and the app logs why (theirs counts it as its string)', async t => {
  const app = await appWith(t, 'ours', { max: 1, keyGenerator: () => ({ id: 1 }) })
  const [first, second] = [await app.inject('/'), await app.inject('/')]
  t.strictSame([first.statusCode, second.statusCode], [200, 429], 'counted, by the client\'s address')
  t.notMatch(second.body, /keyGenerator/, 'the client is told nothing of it')
})

t.test('the default key is the address as theirs writes it; keyGenerator: normalizeIP(request.ip) gives the same keys', async t => {
  const keysSeen = async (plugin: Plugin, options: Record<string, unknown>): Promise<string[]> => {
    const keys: string[] = []
    const app = await appWith(t, plugin, { timeWindow: '1 minute', max: (_request: unknown, key: string) => { keys.push(key); return 5 }, ...options })
    for (const remoteAddress of ['10.0.0.1', '2001:db8::1', '::ffff:10.0.0.2']) await app.inject({ url: '/', remoteAddress })
    return keys
  }
  const theirs = await keysSeen('theirs', {})
  t.strictSame(theirs, ['10.0.0.1', '2001:db8::', '10.0.0.2'])
  t.strictSame(await keysSeen('ours', {}), theirs, 'the default: theirs')
  t.strictSame(await keysSeen('ours', { keyGenerator: (request: FastifyRequest) => normalizeIP(request.ip) }), theirs, 'with normalizeIP: theirs')
})

t.test('a number and its decimal string are one client; the callbacks are given each as it came', async t => {
  const exceeded: unknown[] = []
  const app = await appWith(t, 'ours', {
    max: 1,
    timeWindow: '1 minute',
    keyGenerator: (request: FastifyRequest) => request.headers['x-as'] === 'number' ? 42 : '42',
    onExceeded: (_request: unknown, key: unknown) => { exceeded.push(key) }
  })
  const codes: number[] = []
  for (const as of ['number', 'string', 'number']) codes.push((await app.inject({ url: '/', headers: { 'x-as': as } })).statusCode)
  t.strictSame(codes, [200, 429, 429], '42 and \'42\' share one budget')
  t.strictSame(exceeded, ['42', 42])
})
