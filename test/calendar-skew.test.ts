// Calendar quotas over real HTTP with two app instances on one Redis whose clocks differ (issue 41): the period
// that holds Redis's clock decides, whichever side of the boundary each instance's clock is. Redis's TIME cannot
// be moved, so the boundary is brought to it: the next (or last) whole hour of Redis's clock is midnight in the
// fixed-offset zone Etc/GMT±h, and one instance's clock is moved past it, the time to it plus a minute away from
// Redis's (6 to 66 minutes); the other keeps Redis's time. Each instance runs in a process of its own with its
// `Date.now` moved (test/fixtures/skewed-app.ts); the handlers count what ran, the observer. (Skews of 18 minutes and 2 s either
// way, at a boundary the test places, on both stores: test/conformance-quotas.test.ts.)
import { fork } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

// Four app processes, each loading TypeScript: 20 s quiet, more beside CPU-bound files (.taprc).
t.setTimeout(120_000)

const APP = fileURLToPath(new URL('./fixtures/skewed-app.ts', import.meta.url))
const HOUR = 3_600_000
const MINUTE = 60_000

/** An instance of the app in a process of its own, its clock `skewMs` off the machine's: its address, and the handlers it ran. */
async function instance (t: Test, url: string, nameSpace: string, skewMs: number, limits: unknown): Promise<{ base: string, ran: () => Promise<number> }> {
  const env = { ...process.env, REDIS_URL: url, NAME_SPACE: nameSpace, SKEW_MS: String(skewMs), LIMITS: JSON.stringify(limits) }
  const child: ChildProcess = fork(APP, [], { execArgv: process.execArgv, env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const [{ port }] = await once(child, 'message') as [{ port: number }]
  const ran = async (): Promise<number> => {
    child.send('ran')
    const [answer] = await once(child, 'message') as [{ ran: number }]
    return answer.ran
  }
  return { base: `http://127.0.0.1:${port}`, ran }
}

/** The fixed-offset zone whose midnight is the whole hour `at` (ms, UTC): Etc/GMT+h is h hours behind UTC. */
function zoneOfMidnight (at: number): string {
  const hour = new Date(at).getUTCHours()
  return hour === 0 ? 'Etc/GMT' : hour <= 12 ? `Etc/GMT+${hour}` : `Etc/GMT-${24 - hour}`
}

const cases = [
  // Redis at least 5 minutes before the next whole hour; one instance a minute past it.
  { name: 'ahead of Redis, past the next midnight', boundary: (now: number) => Math.ceil((now + 5 * MINUTE) / HOUR) * HOUR, skew: (now: number, boundary: number) => boundary - now + MINUTE },
  // Redis at least a minute past the last whole hour; one instance a minute before it.
  { name: 'behind Redis, before the midnight Redis is past', boundary: (now: number) => Math.floor((now - MINUTE) / HOUR) * HOUR, skew: (now: number, boundary: number) => boundary - now - MINUTE }
]

for (const { name, boundary, skew } of cases) {
  t.test(`max 5 a day, two instances alternating, one ${name}: 5 of 40 admitted in Redis's day`, async t => {
    const { url } = await getRedis(t)
    const redis = client(t, url)
    const redisNow = async (): Promise<number> => {
      const [seconds, micros] = await redis.time()
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
    }
    const before = await redisNow()
    // Each instance's clock is set against Redis's, whatever the machine's is.
    const offset = before - Date.now()
    const midnight = boundary(before)
    const skewMs = skew(before, midnight)
    const zone = zoneOfMidnight(midnight)
    const limits = [{ max: 5, per: 'day', timeZone: zone }]
    const nameSpace = uniquePrefix()
    const [onTime, skewed] = await Promise.all([instance(t, url, nameSpace, offset, limits), instance(t, url, nameSpace, offset + skewMs, limits)])
    const statuses: number[] = []
    for (let i = 0; i < 40; i++) statuses.push((await fetch(`${(i % 2 === 0 ? onTime : skewed).base}/`)).status)
    const after = await redisNow()
    t.equal(after < midnight, before < midnight, `Redis's clock stayed on one side of midnight in ${zone} (${new Date(midnight).toISOString()}) throughout`)
    const admitted = statuses.filter(status => status === 200).length
    const ran = await onTime.ran() + await skewed.ran()
    t.equal(ran, admitted, 'the handlers ran as often as 200s were sent')
    t.equal(ran, 5, `one instance ${Math.round(skewMs / 1000)} s off Redis's clock, across midnight in ${zone}: ${ran} of 40 ran (max 5)`)
    t.strictSame(statuses.slice(0, 5), [200, 200, 200, 200, 200], 'the first five, from both instances, admitted')
  })
}
