// @fastify/rate-limit compatibility: `continueExceeding` and `exponentialBackoff` change how its fixed window
// counts; this plugin's window is exact and never restarts, so it rejects them at register, naming what to
// use instead, rather than ignore them. `false` (their default) is accepted.
import t from 'tap'
import { appWith } from './helpers.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

t.test('continueExceeding: true and exponentialBackoff: true are refused with their replacement', async t => {
  await t.rejects(appWith(t, 'ours', { continueExceeding: true }), { code: INVALID, message: /"continueExceeding": not supported .*ban: \{ threshold, duration \}/ })
  await t.rejects(appWith(t, 'ours', { exponentialBackoff: true }), { code: INVALID, message: /"exponentialBackoff": not supported .*escalate: 2/ })
  await t.rejects(appWith(t, 'ours', {}, { config: { rateLimit: { exponentialBackoff: true } } } as never), { code: INVALID, message: /"config\.rateLimit\.exponentialBackoff": not supported/ })
  await t.rejects(appWith(t, 'ours', { continueExceeding: 'yes' }), { code: INVALID, message: /"continueExceeding": not supported/ })
})

t.test('false, their default, is accepted', async t => {
  const app = await appWith(t, 'ours', { max: 1, continueExceeding: false, exponentialBackoff: false })
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429])
})
