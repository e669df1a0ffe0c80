// @fastify/rate-limit compatibility, limits: `max` as a number or a sync or async `(request, key)`, `timeWindow`
// as milliseconds, a string such as '1 minute' or '10s', or a function; the refusal's message says the wait in
// @lukeed/ms's long form. Each case runs @fastify/rate-limit beside this plugin: the same statuses, the same
// limit header, the same Retry-After and message for a client's first burst.
import { createRequire } from 'node:module'
import t from 'tap'
import type { FastifyRequest } from 'fastify'
import { formatDuration, toMilliseconds } from '../../lib/duration.js'
import { appWith, statuses, times } from './helpers.js'
import type { Plugin } from './helpers.js'

interface Seen {
  statuses: number[]
  limits: string[]
  retryAfter: string | undefined
  message: string | undefined
}

/** `n` requests of one client (as `plan`), what each answered, and the refusal's wait. */
async function burst (t: Parameters<typeof appWith>[0], plugin: Plugin, options: Record<string, unknown>, n: number, plan = 'free'): Promise<Seen> {
  const app = await appWith(t, plugin, options)
  const seen: Seen = { statuses: [], limits: [], retryAfter: undefined, message: undefined }
  for (let i = 0; i < n; i++) {
    const res = await app.inject({ url: '/', headers: { 'x-plan': plan } })
    seen.statuses.push(res.statusCode)
    seen.limits.push(String(res.headers['x-ratelimit-limit']))
    if (res.statusCode === 429) {
      seen.retryAfter = String(res.headers['retry-after'])
      seen.message = (res.json() as { message: string }).message
    }
  }
  return seen
}

const planMax = (request: FastifyRequest): number => request.headers['x-plan'] === 'pro' ? 3 : 1

const CASES: Array<[string, Record<string, unknown>, number, Partial<Seen>, string?]> = [
  ['max and timeWindow as numbers', { max: 2, timeWindow: 10_000 }, 3, { statuses: [200, 200, 429], retryAfter: '10', message: 'Rate limit exceeded, retry in 10 seconds' }],
  ["timeWindow '1 minute'", { max: 1, timeWindow: '1 minute' }, 2, { retryAfter: '60', message: 'Rate limit exceeded, retry in 1 minute' }],
  ["timeWindow '10s'", { max: 1, timeWindow: '10s' }, 2, { retryAfter: '10' }],
  ["timeWindow '2 minutes'", { max: 1, timeWindow: '2 minutes' }, 2, { message: 'Rate limit exceeded, retry in 2 minutes' }],
  ["timeWindow '1h'", { max: 1, timeWindow: '1h' }, 2, { retryAfter: '3600', message: 'Rate limit exceeded, retry in 1 hour' }],
  ['max as a function of the request', { max: planMax, timeWindow: 10_000 }, 2, { statuses: [200, 429], limits: ['1', '1'] }],
  ['max as a function, another plan', { max: planMax, timeWindow: 10_000 }, 4, { statuses: [200, 200, 200, 429], limits: ['3', '3', '3', '3'] }, 'pro'],
  ['max as an async function', { max: async (request: FastifyRequest) => planMax(request), timeWindow: 10_000 }, 4, { statuses: [200, 200, 200, 429] }, 'pro'],
  ['timeWindow as a function', { max: 1, timeWindow: (request: FastifyRequest) => request.headers['x-plan'] === 'pro' ? 5000 : 20_000 }, 2, { retryAfter: '5' }, 'pro'],
  ['timeWindow as an async function', { max: 1, timeWindow: async () => 30_000 }, 2, { retryAfter: '30', message: 'Rate limit exceeded, retry in 30 seconds' }],
  // A plan's limit read from configuration as a string: theirs counts with it as its number.
  ['max as a function giving a numeric string', { max: () => '2', timeWindow: 10_000 }, 3, { statuses: [200, 200, 429], limits: ['2', '2', '2'] }]
]

for (const [name, options, n, expected, plan] of CASES) {
  t.test(`${name}: the same answers as @fastify/rate-limit`, async t => {
    const theirs = await burst(t, 'theirs', options, n, plan)
    const ours = await burst(t, 'ours', options, n, plan)
    t.strictSame(ours, theirs)
    t.match(ours, expected, 'as their documentation says')
  })
}

t.test('a max function giving a fraction counts to its integer part, as theirs (their headers show the fraction: 2.7, 1.7…)', async t => {
  const theirs = await burst(t, 'theirs', { max: () => 2.7, timeWindow: 10_000 }, 4)
  const ours = await burst(t, 'ours', { max: () => 2.7, timeWindow: 10_000 }, 4)
  t.strictSame(ours.statuses, theirs.statuses)
  t.strictSame(ours.statuses, [200, 200, 429, 429])
  t.strictSame(ours.limits, ['2', '2', '2', '2'], 'whole numbers in the headers')
  t.strictSame((await burst(t, 'ours', { max: () => 0.5, timeWindow: 10_000 }, 1)).statuses, [429], '0.5: nothing, as theirs')
})

t.test('max and timeWindow functions are given the request and the key', async t => {
  for (const plugin of ['theirs', 'ours'] as const) {
    const calls: Array<[string, string]> = []
    const app = await appWith(t, plugin, {
      max: (request: FastifyRequest, key: string) => { calls.push(['max', `${request.url} ${key}`]); return 5 },
      timeWindow: (request: FastifyRequest, key: string) => { calls.push(['timeWindow', `${request.url} ${key}`]); return 1000 }
    })
    await app.inject('/')
    t.strictSame(calls.sort(), [['max', '/ 127.0.0.1'], ['timeWindow', '/ 127.0.0.1']], `${plugin}: the client's address as the key`)
  }
})

t.test('a max or timeWindow function that answers nonsense: theirs counts on as it can (recorded); here a static limit decides, whatever the failMode', async t => {
  // Theirs: max -1 refuses every request, NaN lets every request through, a throw answers 500, a window of
  // 'soon' counts with a reset of NaN. Here: the plugin's static part, else theirs default (1000 a minute).
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ max: () => -1, failMode: 'open' }, '1000'], [{ timeWindow: () => 'soon', failMode: 'open' }, '1000'],
    [{ max: () => Number.NaN }, '1000'], [{ timeWindow: () => 'soon' }, '1000'], [{ max: () => -1, failMode: 'closed' }, '1000'],
    [{ max: 3, timeWindow: () => -1, failMode: 'local' }, '3']
  ]
  for (const [options, limit] of cases) {
    const app = await appWith(t, 'ours', options)
    const name = Object.keys(options).join(', ')
    const res = await app.inject('/')
    t.strictSame([res.statusCode, res.headers['x-ratelimit-limit'], res.headers['x-ratelimit-reset'], res.headers['x-ratelimit-enforced']], [200, limit, '60', undefined], `${name}: limited at ${limit} a minute`)
    t.equal((await app.inject('/')).headers['x-ratelimit-remaining'], String(Number(limit) - 2), `${name}: counted`)
    t.notMatch(res.body, /expected/, 'the client is told nothing of it')
  }
  const theirs = await appWith(t, 'theirs', { max: () => Number.NaN })
  t.strictSame(await statuses(theirs, times(3, '/')), [200, 200, 200], 'theirs: a max of NaN limits nothing (recorded)')
})

t.test('max: 0 refuses every request, as theirs: one window to wait, nothing counted', async t => {
  const theirs = await burst(t, 'theirs', { max: 0, timeWindow: 10_000 }, 3)
  const ours = await burst(t, 'ours', { max: 0, timeWindow: 10_000 }, 3)
  t.strictSame(ours, theirs)
  t.strictSame(ours, { statuses: [429, 429, 429], limits: ['0', '0', '0'], retryAfter: '10', message: 'Rate limit exceeded, retry in 10 seconds' })
  const planned = { max: (request: FastifyRequest) => request.headers['x-plan'] === 'none' ? 0 : 2, timeWindow: 10_000 }
  t.strictSame((await burst(t, 'ours', planned, 2, 'none')).statuses, [429, 429], 'a max function answering 0 for a plan without access')
  t.strictSame((await burst(t, 'ours', planned, 2)).statuses, [200, 200], 'and its limit for the others')
})

t.test('max: 0 with a ban: theirs bans after the denials; here nothing is counted, so nobody is banned (recorded)', async t => {
  const theirs = await burst(t, 'theirs', { max: 0, ban: 1 }, 3)
  const ours = await burst(t, 'ours', { max: 0, ban: 1 }, 3)
  t.strictSame(theirs.statuses, [429, 403, 403])
  t.strictSame(ours.statuses, [429, 429, 429])
})

t.test('max: 0 through createRateLimit and the operator\'s peek', async t => {
  const answers: Record<Plugin, unknown> = { theirs: null, ours: null }
  for (const plugin of ['theirs', 'ours'] as const) {
    const app = await appWith(t, plugin, { global: false }, {}, app => {
      const check = app.createRateLimit({ max: 0, timeWindow: 10_000 })
      app.get('/check', async (request: FastifyRequest) => {
        const { isExceeded, remaining, max } = await check(request) as { isExceeded: boolean, remaining: number, max: number }
        const read = await check(request, { increment: false }) as { remaining: number }
        return { isExceeded, remaining, max, read: read.remaining }
      })
    })
    answers[plugin] = (await app.inject('/check')).json()
  }
  t.strictSame(answers.ours, answers.theirs)
  t.strictSame(answers.ours, { isExceeded: true, remaining: 0, max: 0, read: 0 })
  const app = await appWith(t, 'ours', { max: 0, timeWindow: 10_000 })
  t.match(await app.rateGuard.peek('127.0.0.1'), { status: 'limited', max: 0, remaining: 0, retryMs: 10_000 })
})

t.test('durations read and written as @lukeed/ms (theirs) reads and writes them', async t => {
  const ms = createRequire(import.meta.url)('@lukeed/ms') as { parse: (text: string) => number | undefined, format: (ms: number, long: boolean) => string }
  const texts = ['1 minute', '1minute', '10s', '10 sec', '2 secs', '500ms', '500 msecs', '1 millisecond', '1.5h', '.5h', '2 hrs', '3 days', '1d',
    '1w', '2 wks', '1 week', '1y', '2 yrs', '1 year', '90', '5 MINUTES', '1 Hour']
  for (const text of texts) t.equal(toMilliseconds(text), ms.parse(text), `'${text}'`)
  const waits = [1, 999, 1000, 1499, 1500, 59_499, 59_500, 60_000, 89_999, 90_000, 3_599_999, 5_400_000, 86_400_000, 7 * 86_400_000, 365 * 86_400_000, 31_557_600_000, 2 * 31_557_600_000]
  for (const wait of waits) t.equal(formatDuration(wait), ms.format(wait, true), `${wait} ms`)
})
