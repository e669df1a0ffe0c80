// What each failMode answers while Redis cannot decide, for test/fail-modes.test.ts and test/servers/: apps on
// one Redis under every failMode, and the check of what each answers (within the decision deadline, plus the
// lag measured while it was out: lag.ts).
import type { Test } from 'tap'
import type { RateGuardOptions } from '../../lib/index.js'
import { makeApp as appOf, timed } from './faults.js'
import type { App } from './faults.js'
import { allowing, inTime, overdue } from './lag.js'
import type { Span } from './lag.js'

/** The decision deadline of the apps: every answer is held to it plus the lag measured while it was out. */
export const TIMEOUT = 100

/** An app with the plugin on `GET /` under `options`, deciding within TIMEOUT unless they say otherwise. */
export async function makeApp (t: Test, options: RateGuardOptions): Promise<App> {
  return await appOf(t, { timeout: TIMEOUT, ...options })
}

/** Holds an answer to the decision deadline plus the lag measured while it was out. */
export function within (t: Test, answer: Span, what: string): void {
  t.ok(inTime(TIMEOUT, answer), `${what}: answered in ${answer.ms.toFixed(1)} ms (bound ${allowing(TIMEOUT, answer.at, answer.at + answer.ms).toFixed(0)} ms)`)
}

/** Checks what each failMode answers while Redis cannot decide. */
export async function checkDegraded (t: Test, apps: Record<string, App>, label: string): Promise<void> {
  for (const name of ['open', 'skipOnError: true']) {
    for (let i = 0; i < 5; i++) {
      const answer = await timed(apps[name]!.app)
      const { res } = answer
      t.equal(res.statusCode, 200, `${label}, ${name}: let through`)
      t.equal(res.headers['x-ratelimit-enforced'], 'false', `${label}, ${name}: marked unenforced`)
      t.notOk('x-ratelimit-remaining' in res.headers, `${label}, ${name}: no counts are claimed`)
      within(t, answer, `${label}, ${name}`)
    }
  }
  for (const name of ['closed', 'skipOnError: false']) {
    for (let i = 0; i < 3; i++) {
      const answer = await timed(apps[name]!.app)
      const { res } = answer
      t.equal(res.statusCode, 503, `${label}, ${name}: refused`)
      t.equal(res.headers['retry-after'], '1', `${label}, ${name}: Retry-After, one deadline rounded up to a second`)
      t.match(res.json(), { statusCode: 503, code: 'FST_RATE_GUARD_UNAVAILABLE' })
      within(t, answer, `${label}, ${name}`)
    }
  }
  const codes = []
  for (let i = 0; i < 4; i++) {
    const answer = await timed(apps.local!.app)
    const { res } = answer
    codes.push(res.statusCode)
    if (res.statusCode === 429) {
      // @fastify/rate-limit's body, exactly: no code (the thrown error keeps it, for the app's error handler).
      const body = res.json()
      t.strictSame(Object.keys(body).sort(), ['error', 'message', 'statusCode'], `${label}, local: the 429 body has their fields alone`)
      t.match(body, { statusCode: 429, error: 'Too Many Requests', message: /^Rate limit exceeded, retry in / })
    }
    within(t, answer, `${label}, local`)
  }
  t.same(codes, [200, 200, 200, 429], `${label}, local: the in-process twin limits, max + 1 gives exactly one 429`)

  // A burst in parallel is bounded the same way.
  const burst = await Promise.all(Array.from({ length: 20 }, async () => await timed(apps.open!.app)))
  t.ok(burst.every(({ res }) => res.statusCode === 200), `${label}: a burst of 20 is let through`)
  t.same(overdue(TIMEOUT, burst), [], `${label}: a burst of 20 answered within the deadline (slowest ${Math.max(...burst.map(({ ms }) => ms)).toFixed(1)} ms)`)
}

/** Every failMode, and the two that @fastify/rate-limit's `skipOnError` names. */
export const MODES: Record<string, RateGuardOptions> = {
  open: { failMode: 'open' },
  closed: { failMode: 'closed' },
  'skipOnError: true': { skipOnError: true },
  'skipOnError: false': { skipOnError: false },
  local: { failMode: 'local' }
}
