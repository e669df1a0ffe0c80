// Under the app's own load, the limiter judges Redis, not the app's event loop. The app (test/fixtures/busy-app.ts)
// runs in a child process, its handler burning CPU; this process keeps 100 keep-alive connections busy, as
// clients of 50 identities (each allowed 20 an hour, banned after 5 denials), against a redis-server of the
// test's own. How many requests a run sends is set by what it must reach, never by how fast the machine is:
// - Redis healthy, failMode open and closed: 30 requests from each identity, every one answered, none let
//   through unenforced, no 503; each identity exactly 20 allowed, 4 limited and 6 banned, and Redis's logs
//   hold exactly the requests answered as allowed (nothing counted that nobody waited for); the app logged no
//   Redis trouble (so the breaker never opened).
// - Redis frozen (SIGSTOP) in the middle: every request answered by failMode, each waiting for the limiter no
//   longer than the deadline + the loop's own delay during that wait (see TURNS and lagAround) + 100 ms. Redis
//   back (SIGCONT) is an event: the first answer Redis decides comes within the breaker's cool-down + one
//   decision's bound, and the requests sent after it are all decided by Redis. The run goes on until a
//   second has passed after that and 6 s in all, and its last second is all decided by Redis too.
import { fork } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import http from 'node:http'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { DEFAULTS } from '../lib/options/table.js'
import { identityKeys, scopeOf } from '../lib/stores/key-names.js'
import { client, startRedisServer, uniquePrefix } from './helpers/redis.js'
import type { RedisProcess } from './helpers/redis.js'

const APP = fileURLToPath(new URL('./fixtures/busy-app.ts', import.meta.url))
const CONNECTIONS = 100
const IDENTITIES = 50
const MAX = 20
const CPU_MS = 3
/** The slack on "within the deadline plus the loop's own lag": the machine is shared and noisy. */
const SLACK_MS = 100
/** Requests from each identity when Redis is healthy: past its max, its denials and into its ban. */
const PER_IDENTITY = 30
/** What each identity's 30 get: max allowed, then denials, the fifth starting the ban (threshold 5). */
const EXPECTED = { 200: MAX, 429: 4, 403: PER_IDENTITY - MAX - 4 }
/** The least the frozen-Redis case sends requests for (Redis freezes for 2 s of it), and the most. */
const LOAD_MS = 6000
const LOAD_LIMIT_MS = 30_000
/**
 * Turns of the event loop a decision waits through besides the deadline, each as long as the loop's lag
 * while that decision waited (lagAround) at most: the rest of the turn the request arrived in (its batch is sent at that turn's end), the turn
 * in which the deadline's timer fires late, and the poll phase it gives a turn, to read a reply that may be
 * waiting. A healthy decision waits through the first and the turn that reads the reply too.
 */
const TURNS = 3

interface Answer {
  readonly client: string
  readonly path: string
  readonly status: number
  readonly enforced: boolean
  readonly limiterMs: number
  /** When its wait for the limiter began, in ms since the epoch (the app's clock; see lagAround). */
  readonly limiterStart: number
  /** When it was sent, and when its answer came, in ms since the load started. */
  readonly sentAt: number
  readonly answeredAt: number
}

interface Stats {
  maxLagMs: number
  slowestLimiterMs: number
  logLines: string[]
  /** Each stretch the app's loop held its timers back: [when the timer ran, how late] in ms since the epoch. */
  lateTimers: Array<[number, number]>
}

/**
 * The lag around one stretch of the app's time (ms since the epoch, from `from` to `to`): the longest the
 * loop held its timers back in any stretch overlapping it, one still running at `to` included (it is told
 * only when it ends, so it is read after the run).
 */
function lagAround (lateTimers: Stats['lateTimers'], from: number, to: number): number {
  let worst = 0
  for (const [ranAt, late] of lateTimers) if (ranAt >= from && ranAt - late <= to && late > worst) worst = late
  return worst
}

/** This process's clock as ms since the epoch, comparable with the app's. */
const epochMs = (at: number): number => performance.timeOrigin + at

async function startApp (t: Test, env: Record<string, string>): Promise<{ port: number, child: ChildProcess }> {
  const child = fork(APP, [], { execArgv: process.execArgv, env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  t.teardown(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill('SIGKILL')
    await once(child, 'exit')
  })
  const [message] = await once(child, 'message') as [{ port: number }]
  return { port: message.port, child }
}

function get (agent: http.Agent, port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: number, headers: http.IncomingHttpHeaders, body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent, headers }, res => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }))
    })
    req.on('error', reject)
  })
}

async function stats (port: number): Promise<Stats> {
  const agent = new http.Agent()
  try {
    return JSON.parse((await get(agent, port, '/stats?reset=1')).body) as Stats
  } finally {
    agent.destroy()
  }
}

/**
 * `CONNECTIONS` keep-alive connections, each sending its next request when the last is answered, while `more`
 * says so (given the requests sent so far, the answers so far, and the ms since the start); the clients
 * `prefix`0 to `prefix`<identities - 1> in turn, on `paths` in turn. `during` runs alongside (a fault).
 */
async function load (port: number, prefix: string, paths: readonly string[], identities: number, more: (sent: number, answers: readonly Answer[], elapsed: number) => boolean, during?: (since: number) => Promise<void>): Promise<Answer[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS })
  const answers: Answer[] = []
  const since = performance.now()
  let n = 0
  const worker = async (): Promise<void> => {
    while (more(n, answers, performance.now() - since)) {
      const i = n++
      const who = `${prefix}${i % identities}`
      const path = paths[i % paths.length]!
      const sentAt = performance.now() - since
      const res = await get(agent, port, path, { 'x-client': who })
      answers.push({ client: who, path, status: res.status, enforced: res.headers['x-ratelimit-enforced'] !== 'false', limiterMs: Number(res.headers['x-limiter-ms']), limiterStart: Number(res.headers['x-limiter-start']), sentAt, answeredAt: performance.now() - since })
    }
  }
  await Promise.all([...Array.from({ length: CONNECTIONS }, worker), during?.(since)])
  agent.destroy()
  return answers
}

function summary (answers: readonly Answer[], lag: Stats): string {
  const statuses: Record<number, number> = {}
  for (const a of answers) statuses[a.status] = (statuses[a.status] ?? 0) + 1
  const slowest = Math.max(...answers.map(a => a.answeredAt - a.sentAt))
  return `${answers.length} requests ${JSON.stringify(statuses)}, ${answers.filter(a => !a.enforced).length} unenforced, ` +
    `app's max loop lag ${lag.maxLagMs.toFixed(0)} ms, slowest wait for the limiter ${lag.slowestLimiterMs.toFixed(0)} ms, slowest answer ${slowest.toFixed(0)} ms`
}

async function healthy (t: Test, redis: RedisProcess, port: number, nameSpace: string, path: string): Promise<void> {
  await stats(port)
  const requests = IDENTITIES * PER_IDENTITY
  const answers = await load(port, `${path.slice(1)}-`, [path], IDENTITIES, sent => sent < requests)
  const measured = await stats(port)
  t.comment(`healthy Redis, ${path}: ${summary(answers, measured)}`)

  t.ok(measured.maxLagMs > DEFAULTS.timeout, `the app was under pressure: its loop lagged up to ${measured.maxLagMs.toFixed(0)} ms, past the ${DEFAULTS.timeout} ms deadline`)
  t.equal(answers.length, requests, `every request answered (${PER_IDENTITY} from each of ${IDENTITIES} identities)`)
  t.equal(answers.filter(a => !a.enforced).length, 0, 'none let through unenforced')
  t.equal(answers.filter(a => a.status === 503).length, 0, 'no 503')
  t.same(answers.filter(a => ![200, 429, 403].includes(a.status)).map(a => a.status), [], 'only allowed, limited and banned answers')
  t.same(measured.logLines, [], 'no Redis trouble logged: the breaker never opened')

  const redisClient = client(t, redis.url)
  const over: string[] = []
  const miscounted: string[] = []
  const inexact: string[] = []
  for (let i = 0; i < IDENTITIES; i++) {
    const who = `${path.slice(1)}-${i}`
    const allowed = answers.filter(a => a.client === who && a.status === 200).length
    if (allowed > MAX) over.push(`${who}: ${allowed}`)
    const got = { 200: allowed, 429: answers.filter(a => a.client === who && a.status === 429).length, 403: answers.filter(a => a.client === who && a.status === 403).length }
    if (got[200] !== EXPECTED[200] || got[429] !== EXPECTED[429] || got[403] !== EXPECTED[403]) inexact.push(`${who}: ${JSON.stringify(got)}`)
    const logged = await redisClient.zcard(identityKeys(nameSpace, scopeOf('route', `GET ${path}`), who).log)
    if (logged !== allowed) miscounted.push(`${who}: ${allowed} allowed, ${logged} in Redis`)
  }
  t.same(over, [], `no identity allowed past its max of ${MAX}`)
  t.same(inexact, [], `each identity's ${PER_IDENTITY}: exactly ${EXPECTED[200]} allowed, ${EXPECTED[429]} limited, ${EXPECTED[403]} banned`)
  t.same(miscounted, [], 'Redis counted exactly the requests it allowed')
}

// Its runs end on what they must reach, not on the clock: allow for a slow machine.
t.setTimeout(180_000)

t.test('a CPU-bound app under 100 connections: Redis judged, not the app\'s event loop', async t => {
  const redis = await startRedisServer(t)
  const nameSpace = uniquePrefix()
  const { port } = await startApp(t, { REDIS_URL: redis.url, NAME_SPACE: nameSpace, MAX: String(MAX), CPU_MS: String(CPU_MS) })

  await t.test('healthy Redis, failMode open', async t => { await healthy(t, redis, port, nameSpace, '/open') })
  await t.test('healthy Redis, failMode closed', async t => { await healthy(t, redis, port, nameSpace, '/closed') })

  await t.test('Redis frozen for 2 s, then back: failMode answers each request within the deadline and the loop\'s lag around it, then Redis decides again', async t => {
    await stats(port)
    let frozeAt = 0
    let thawedAt = 0
    let origin = 0
    const byRedis = (a: Answer): boolean => a.enforced && a.status === 200
    // The run ends once it has lasted LOAD_MS, Redis has decided again after the thaw, CONNECTIONS requests
    // have been answered since, and a second more has passed (for the last second below): whenever that is,
    // however fast the machine is (LOAD_LIMIT_MS, should Redis never come back).
    let back: Answer | undefined
    let answeredSince = 0
    let scanned = 0
    const more = (_sent: number, answers: readonly Answer[], elapsed: number): boolean => {
      for (; scanned < answers.length; scanned++) {
        const a = answers[scanned]!
        if (back === undefined && thawedAt > 0 && a.answeredAt > thawedAt && byRedis(a)) back = a
        else if (back !== undefined && a.sentAt > back.answeredAt) answeredSince++
      }
      const done = elapsed >= LOAD_MS && back !== undefined && answeredSince >= CONNECTIONS && elapsed >= back.answeredAt + 2000
      return !done && elapsed < LOAD_LIMIT_MS
    }
    // So many identities that none reaches its limit: every answer is Redis's allowance or failMode's.
    const answers = await load(port, 'frozen-', ['/open', '/closed'], 100_000, more, async since => {
      origin = epochMs(since)
      await new Promise(resolve => setTimeout(resolve, 1500))
      redis.freeze()
      frozeAt = performance.now() - since
      await new Promise(resolve => setTimeout(resolve, 2000))
      redis.thaw()
      thawedAt = performance.now() - since
    })
    const measured = await stats(port)
    t.comment(`Redis frozen from ${frozeAt.toFixed(0)} to ${thawedAt.toFixed(0)} ms: ${summary(answers, measured)}`)

    const during = answers.filter(a => a.sentAt > frozeAt && a.answeredAt < thawedAt)
    t.ok(during.some(a => a.path === '/open') && during.some(a => a.path === '/closed'), `requests were sent on both routes while Redis was frozen (${during.length})`)
    t.ok(during.filter(a => a.path === '/open').every(a => a.status === 200), 'failMode open: every one let through')
    t.ok(during.filter(a => a.path === '/open').every(a => !a.enforced), 'and marked unenforced')
    t.ok(during.filter(a => a.path === '/closed').every(a => a.status === 503), 'failMode closed: every one refused with 503')

    // Each request against its own bound: the deadline, plus TURNS turns of the loop at the longest lag the
    // app's loop had while that request waited for the limiter, plus the slack.
    const judged = answers.map(a => {
      const lag = lagAround(measured.lateTimers, a.limiterStart, a.limiterStart + a.limiterMs)
      return { a, lag, bound: DEFAULTS.timeout + TURNS * lag + SLACK_MS }
    })
    t.ok(judged.every(({ a }) => Number.isFinite(a.limiterMs) && Number.isFinite(a.limiterStart)), 'every answer says how long it waited for the limiter, and from when')
    const widest = judged.reduce((w, j) => j.bound > w.bound ? j : w)
    const closest = judged.reduce((c, j) => j.a.limiterMs - j.bound > c.a.limiterMs - c.bound ? j : c)
    t.comment(`per-request bounds: widest ${widest.bound.toFixed(0)} ms (lag ${widest.lag.toFixed(0)} ms around it, waited ${widest.a.limiterMs} ms); ` +
      `closest to its bound: waited ${closest.a.limiterMs} ms of ${closest.bound.toFixed(0)} ms (lag ${closest.lag.toFixed(0)} ms); the run's worst lag ${measured.maxLagMs.toFixed(0)} ms`)
    t.same(judged.filter(({ a, bound }) => a.limiterMs > bound).map(({ a, lag, bound }) => `${a.path} at ${a.sentAt.toFixed(0)} ms waited ${a.limiterMs} ms, past ${bound.toFixed(0)} ms (lag around it ${lag.toFixed(0)} ms)`), [],
      `no request waited for the limiter past ${DEFAULTS.timeout} ms + ${TURNS} × the loop's lag during its own wait + ${SLACK_MS} ms`)

    // Redis back, an event: the breaker, open, probes once its cool-down (started at the latest at the thaw)
    // is over, and that decision is bounded as any other. The first answer Redis decides after the thaw comes
    // within those, and the requests sent once it has come are decided by Redis.
    const first = answers.filter(a => a.answeredAt > thawedAt && byRedis(a)).sort((x, y) => x.answeredAt - y.answeredAt)[0]
    if (first === undefined) {
      t.fail('Redis decided no request after the thaw')
      return
    }
    const recoveryMs = first.answeredAt - thawedAt
    const lagThen = lagAround(measured.lateTimers, origin + thawedAt, origin + first.answeredAt)
    const recoveryBound = DEFAULTS.breaker.coolDown + DEFAULTS.timeout + TURNS * lagThen + SLACK_MS
    t.ok(recoveryMs <= recoveryBound, `Redis decided again ${recoveryMs.toFixed(0)} ms after the thaw, within ${DEFAULTS.breaker.coolDown} ms (the cool-down) + ${DEFAULTS.timeout} ms + ${TURNS} × ${lagThen.toFixed(0)} ms (the loop's lag meanwhile) + ${SLACK_MS} ms`)
    const next = answers.filter(a => a.sentAt > first.answeredAt).sort((x, y) => x.sentAt - y.sentAt).slice(0, CONNECTIONS)
    t.equal(next.length, CONNECTIONS, `${CONNECTIONS} requests were sent after it`)
    t.same(next.filter(a => !byRedis(a)).map(a => `${a.path} at ${a.sentAt.toFixed(0)} ms: ${a.status}${a.enforced ? '' : ' unenforced'}`), [], `the first ${CONNECTIONS} requests sent after it (one per connection), all decided by Redis`)

    // And still at the end: every request of the run's last second (a second or more after Redis decided
    // again) is enforced by Redis.
    const end = Math.max(...answers.map(a => a.sentAt))
    const last = answers.filter(a => a.sentAt > end - 1000)
    t.ok(last.length > 0 && end - 1000 >= first.answeredAt, `requests were sent in the run's last second, ${((end - 1000 - thawedAt) / 1000).toFixed(1)} s after the thaw (${last.length})`)
    t.same(last.filter(a => !byRedis(a)).map(a => `${a.path} at ${a.sentAt.toFixed(0)} ms: ${a.status}`), [], 'all of them enforced by Redis')
  })
})
