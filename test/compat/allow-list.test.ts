// @fastify/rate-limit compatibility, `allowList`: theirs holds addresses (its keys are the client's IP), or
// keys a keyGenerator of the app's makes. Run beside @fastify/rate-limit: the same clients pass unlimited.
import t from 'tap'
import { appWith, statuses, times } from './helpers.js'

const CASES: Array<[string, Record<string, unknown>]> = [
  ['addresses', { allowList: ['127.0.0.1', '2001:db8::1'] }],
  ['addresses, with a keyGenerator of the app\'s returning them', { allowList: ['127.0.0.1'], keyGenerator: (request: { ip: string }) => request.ip }],
  ['a function', { allowList: (_request: unknown, key: string) => key.endsWith('127.0.0.1') }]
]

for (const [name, options] of CASES) {
  t.test(`allowList as ${name}: the same clients pass as with @fastify/rate-limit`, async t => {
    for (const plugin of ['theirs', 'ours'] as const) {
      const app = await appWith(t, plugin, { max: 1, timeWindow: '1 minute', ...options })
      t.strictSame(await statuses(app, times(3, { url: '/', remoteAddress: '127.0.0.1' })), [200, 200, 200], `${plugin}: allow-listed`)
      t.strictSame(await statuses(app, times(2, { url: '/', remoteAddress: '10.0.0.7' })), [200, 429], `${plugin}: another client is limited`)
    }
  })
}

t.test("an app's keyGenerator returning full IPv6 addresses: its allow list's entries are compared as given, as with @fastify/rate-limit", async t => {
  // Their README's key generator: the proxy's header first, the address it gives written as the proxy wrote it.
  const keyGenerator = (request: { headers: Record<string, unknown>, ip: string }): string => String(request.headers['x-real-ip'] ?? request.ip)
  const allowList = ['2001:db8::5', '::ffff:10.0.0.1']
  for (const plugin of ['theirs', 'ours'] as const) {
    const app = await appWith(t, plugin, { max: 1, timeWindow: '1 minute', keyGenerator, allowList })
    for (const address of allowList) {
      t.strictSame(await statuses(app, times(3, { url: '/', headers: { 'x-real-ip': address } })), [200, 200, 200], `${plugin}: ${address} allow-listed`)
    }
    t.strictSame(await statuses(app, times(2, { url: '/', headers: { 'x-real-ip': '2001:db8::6' } })), [200, 429], `${plugin}: its /64 neighbour is not`)
  }
  const operated = await appWith(t, 'ours', { max: 2, timeWindow: '1 minute', keyGenerator })
  await operated.inject({ url: '/', headers: { 'x-real-ip': '2001:db8::5' } })
  t.equal((await operated.rateGuard.peek('2001:db8::5')).count, 1, 'ours: the operator names the client as the app\'s generator writes it')
  t.equal((await operated.rateGuard.peek('2001:db8::6')).count, 0, 'and its /64 neighbour apart')
  // A route giving its own key generator writes the plugin's allow list as given too.
  const app = await appWith(t, 'ours', { max: 1, timeWindow: '1 minute', allowList }, { config: { rateLimit: { keyGenerator } } })
  t.strictSame(await statuses(app, times(2, { url: '/', headers: { 'x-real-ip': '2001:db8::5' } })), [200, 200], 'ours: on a route with its own keyGenerator')
})
