// Redis out of memory under noeviction (issue 27): what needs no write still refuses (a client at its limit,
// a banned client), and a request that would have to be recorded goes to failMode, said on the trouble
// channel with the reason 'oom'. Limiting does not go on past maxmemory, and nothing is let through silently.
import diagnostics from 'node:diagnostics_channel'
import t from 'tap'
import { CHANNELS } from '../lib/index.js'
import type { FailMode, TroubleMessage } from '../lib/index.js'
import { makeApp, outcome } from './helpers/faults.js'
import { client, startRedisServer } from './helpers/redis.js'

const MODES: readonly FailMode[] = ['open', 'closed']

t.test('out of memory: refusals that need no write still refuse; what must be written goes to failMode, with the reason oom', async t => {
  const server = await startRedisServer(t, ['--maxmemory-policy', 'noeviction'])
  const admin = client(t, server.url)
  const troubles: TroubleMessage[] = []
  const onTrouble = (message: unknown): void => { troubles.push(message as TroubleMessage) }
  diagnostics.subscribe(CHANNELS.trouble, onTrouble)
  t.teardown(() => diagnostics.unsubscribe(CHANNELS.trouble, onTrouble))
  for (const mode of MODES) {
    const { app, nameSpace } = await makeApp(t, { redis: server.url, failMode: mode, max: 3, timeout: 1000 })
    const send = async (key: string): Promise<Awaited<ReturnType<typeof app.inject>>> => await app.inject({ url: '/', headers: { 'x-api-key': key } })
    for (let i = 0; i < 3; i++) t.equal((await send('full')).statusCode, 200, `${mode}: 'full' spends its budget while Redis has room`)
    await app.rateGuard.ban('apikey:banned', '1 hour')
    await admin.config('SET', 'maxmemory', '1')
    t.teardown(async () => await admin.config('SET', 'maxmemory', '0'))

    t.equal((await send('full')).statusCode, 429, `${mode}: a client at its limit is still refused`)
    t.equal((await send('banned')).statusCode, 403, `${mode}: a banned client is still refused`)
    const before = troubles.length
    const fresh = await send('fresh')
    t.equal(outcome(mode, fresh), 'failMode', `${mode}: a client Redis cannot record is answered by failMode (${fresh.statusCode}), never counted silently`)
    t.ok(troubles.slice(before).some(m => m.reason === 'oom' && m.nameSpace === nameSpace && m.failMode === mode), `${mode}: the trouble channel says oom`)
    await admin.config('SET', 'maxmemory', '0')
    t.equal((await send('fresh')).statusCode, 200, `${mode}: with room again, Redis decides`)
  }
})
