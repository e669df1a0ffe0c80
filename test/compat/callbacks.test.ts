// @fastify/rate-limit compatibility, callbacks: `onExceeding(request, key)` on each request that did not exceed
// the limit, `onExceeded(request, key)` on each that did. Run beside @fastify/rate-limit: called as often, with
// the request and the key (the client's address by default, for both).
import t from 'tap'
import { appWith } from './helpers.js'

for (const plugin of ['theirs', 'ours'] as const) {
  t.test(`${plugin}: onExceeding on each allowed request, onExceeded on each refused one`, async t => {
    const calls: Array<[string, string, boolean]> = []
    const app = await appWith(t, plugin, {
      max: 2,
      timeWindow: '1 minute',
      onExceeding: (request: { url: string }, key: string) => { calls.push(['onExceeding', key, request.url === '/']) },
      onExceeded: (request: { url: string }, key: string) => { calls.push(['onExceeded', key, request.url === '/']) }
    })
    for (let i = 0; i < 4; i++) await app.inject('/')
    const key = '127.0.0.1'
    t.strictSame(calls, [['onExceeding', key, true], ['onExceeding', key, true], ['onExceeded', key, true], ['onExceeded', key, true]])
  })
}
