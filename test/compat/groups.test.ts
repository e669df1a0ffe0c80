// @fastify/rate-limit compatibility, `groupId`: routes given the same group id are meant to share a limit.
// Theirs keeps a counter per route anyway (each route's store is its own; their issue #463): here the routes
// of a group share one budget per client, and a group's budget is apart from the plugin's and other groups'.
// Run beside @fastify/rate-limit, and what it does recorded.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { appWith, statuses } from './helpers.js'
import type { Plugin } from './helpers.js'

const routes = (app: FastifyInstance): void => {
  const otp = { config: { rateLimit: { max: 3, timeWindow: '1 minute', groupId: 'otp' } } }
  app.get('/otp/send', otp, async () => 'sent')
  app.get('/otp/resend', otp, async () => 'resent')
  app.get('/login', { config: { rateLimit: { max: 1, timeWindow: '1 minute', groupId: 'login' } } }, async () => 'in')
}

async function seen (t: Parameters<typeof appWith>[0], plugin: Plugin): Promise<number[]> {
  const app = await appWith(t, plugin, { max: 1, timeWindow: '1 minute' }, {}, routes)
  return await statuses(app, ['/otp/send', '/otp/resend', '/otp/send', '/otp/resend', '/login', '/login', '/'])
}

t.test('the routes of a group share one budget per client (theirs count each route apart: recorded)', async t => {
  t.strictSame(await seen(t, 'ours'), [200, 200, 200, 429, 200, 429, 200], 'three requests across the group, then refused; other groups and the plugin\'s budget apart')
  t.strictSame(await seen(t, 'theirs'), [200, 200, 200, 200, 200, 429, 200], 'theirs: four requests pass a group of max 3')
})

t.test('a group id must be a string, as theirs requires', async t => {
  await t.rejects(appWith(t, 'theirs', {}, { config: { rateLimit: { groupId: 7 } } } as never), { message: 'groupId must be a string' })
  await t.rejects(appWith(t, 'ours', {}, { config: { rateLimit: { groupId: 7 } } } as never), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: 'groupId must be a string' }, 'the same message, and a code')
})
