// An X-Forwarded-For entry that is no address (see forwarded-ports.test.ts), on an app without a logger:
// Fastify's request.log says nothing then, so the warning that names the fix is a process warning, once
// per process (alone in its file: the warning is said once per process, and that file's app has a logger).
// Over real HTTP, in process.
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import t from 'tap'
import { request } from 'undici'
import rateGuard from '../../lib/index.js'

t.test('without a logger, the warning is a process warning, once, and the entry is the proxy\'s', async t => {
  const warnings: Array<Error & { code?: string }> = []
  const onWarning = (warning: Error & { code?: string }): void => { warnings.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => process.off('warning', onWarning))
  const app = Fastify({ trustProxy: '127.0.0.1' })
  t.teardown(() => app.close())
  const keys: string[] = []
  await app.register(rateGuard, { max: (_request, key) => { keys.push(key); return 3 }, timeWindow: '1 minute' })
  app.get('/', async () => 'ok')
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  const statuses: number[] = []
  for (const entry of ['0x7f.1', 'garbage', '1.2.3', '0x7f.2']) {
    const res = await request(`http://127.0.0.1:${port}/`, { headers: { 'x-forwarded-for': entry } })
    await res.body.dump()
    statuses.push(res.statusCode)
  }
  t.same(statuses, [200, 200, 200, 429], 'four entries, one client: the proxy')
  t.same([...new Set(keys)], ['127.0.0.1'])
  // A process warning is emitted on the next tick.
  await new Promise(resolve => setImmediate(resolve))
  const ours = warnings.filter(warning => warning.code === 'FST_RATE_GUARD_UNREADABLE_FORWARDED_FOR')
  t.equal(ours.length, 1, 'one warning')
  t.equal(ours[0]?.name, 'RateGuardWarning')
  t.match(ours[0]?.message, /"0x7f\.1"/, 'quoting the entry')
  t.match(ours[0]?.message, /trustProxy/, 'naming Fastify\'s trustProxy')
  t.match(ours[0]?.message, /make the proxy write plain addresses/, 'and the proxy\'s own setting')
})
