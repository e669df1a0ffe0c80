// @fastify/rate-limit compatibility, `continueExceeding` and `exponentialBackoff`: what a budget does with the
// requests it denies. Theirs restarts the client's window from each denied request (continueExceeding), or
// from each denied request with a doubling wait (exponentialBackoff), so a client that keeps sending stays
// limited past the window of its first request. Run beside @fastify/rate-limit (both in process) over a short
// real window: the same statuses. A value that is not a boolean is a coded error here.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { appWith } from './helpers.js'
import type { Plugin } from './helpers.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'
const WINDOW = 1000

/**
 * max 1: two requests at once, one 0.6 window later, one 1.2 windows after the first (past its window, but
 * within a window of the denial before it).
 */
async function sequence (t: Parameters<typeof appWith>[0], plugin: Plugin, options: Record<string, unknown>): Promise<number[]> {
  const app = await appWith(t, plugin, { max: 1, timeWindow: WINDOW, ...options })
  const codes: number[] = []
  const send = async (): Promise<void> => { codes.push((await app.inject('/')).statusCode) }
  const start = Date.now()
  await send()
  await send()
  await sleep(start + 0.6 * WINDOW - Date.now())
  await send()
  await sleep(start + 1.2 * WINDOW - Date.now())
  await send()
  return codes
}

t.test('without either option: the first request\'s window ends, and the client is let through', async t => {
  const [theirs, ours] = await Promise.all([sequence(t, 'theirs', {}), sequence(t, 'ours', {})])
  t.strictSame(ours, theirs)
  t.strictSame(ours, [200, 429, 429, 200])
})

for (const option of ['continueExceeding', 'exponentialBackoff']) {
  t.test(`${option}: true: the same statuses as @fastify/rate-limit; a client that keeps sending stays limited`, async t => {
    const [theirs, ours] = await Promise.all([sequence(t, 'theirs', { [option]: true }), sequence(t, 'ours', { [option]: true })])
    t.strictSame(ours, theirs)
    t.strictSame(ours, [200, 429, 429, 429], 'the denial at 0.6 windows holds the client past the first window')
  })

  t.test(`${option}: false, their default, is accepted and changes nothing`, async t => {
    const app = await appWith(t, 'ours', { max: 1, [option]: false })
    t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429])
  })

  t.test(`${option}: a value that is not a boolean is a coded error naming it`, async t => {
    await t.rejects(appWith(t, 'ours', { [option]: 'yes' }), { code: INVALID, message: new RegExp(`"${option}": expected true or false, got "yes"`) })
    await t.rejects(appWith(t, 'ours', {}, { config: { rateLimit: { [option]: 1 } } } as never), { code: INVALID, message: new RegExp(`"config\\.rateLimit\\.${option}": expected true or false, got 1`) })
  })
}
