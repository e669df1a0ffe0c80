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
