// The IETF fields say what is true (draft-ietf-httpapi-ratelimit-headers-10), on every algorithm and both
// stores, over real HTTP, parsed with a real RFC 9651 parser: a policy's `t` is the seconds until additional
// quota is available (§4.1.2: one unit more than `r` says), so after waiting `t` one more request passes than
// `r` allowed; on a 429, `Retry-After` points no earlier than the `t` of a policy that refused (§6). Real
// clocks (Redis's own for the scripts), short windows.
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import { parseList } from 'structured-headers'
import type { Item } from 'structured-headers'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import type { Algorithm } from '../lib/algorithms/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

type Where = 'redis' | 'memory'

interface Policy { q: number, w: number }
interface Limit { r: number, t: number }

interface Answer {
  status: number
  retryAfter: number | undefined
  /** `X-RateLimit-Remaining` and `-Reset`: the binding limit's. */
  remaining: number
  reset: number
  policies: Map<string, Policy>
  limits: Map<string, Limit>
}

type Ask = (cost?: number) => Promise<Answer>

async function serve (t: Test, where: Where, options: RateGuardOptions): Promise<Ask> {
  const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), standardHeaders: 'draft-10', ...options })
  app.get('/', async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  return async (cost = 1) => {
    const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { 'x-cost': String(cost) } })
    await res.arrayBuffer()
    const header = (name: string): string => {
      const value = res.headers.get(name)
      if (value === null) throw new Error(`no ${name}`)
      return value
    }
    const items = (name: string): Array<[string, Map<string, unknown>]> => parseList(header(name)).map(member => {
      const [value, params] = member as Item
      if (typeof value !== 'string') throw new Error(`${name}: ${String(value)} is not a String`)
      return [value, params]
    })
    const integer = (value: unknown): number => {
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw new Error(`${String(value)} is not a non-negative Integer`)
      return value
    }
    const retryAfter = res.headers.get('retry-after')
    return {
      status: res.status,
      retryAfter: retryAfter === null ? undefined : Number(retryAfter),
      remaining: Number(header('x-ratelimit-remaining')),
      reset: Number(header('x-ratelimit-reset')),
      policies: new Map(items('ratelimit-policy').map(([name, p]) => [name, { q: integer(p.get('q')), w: integer(p.get('w')) }])),
      limits: new Map(items('ratelimit').map(([name, p]) => [name, { r: integer(p.get('r')), t: integer(p.get('t')) }]))
    }
  }
}

/**
 * What holds on every answer: one item per policy, `t` within the policy's window (the sliding-window counter
 * counts a request through the next window, so its `t` can reach two), and `t` at least a second while
 * anything is counted. On a refusal, `Retry-After` is no earlier than the `t` of each policy that refused the
 * request (fewer units left than it cost), and for a request of one unit no later either: its wait is until one
 * unit is back.
 */
function check (t: Test, label: string, algorithm: Algorithm, answer: Answer, cost = 1): void {
  t.same([...answer.limits.keys()], [...answer.policies.keys()], `${label}: one RateLimit item per policy`)
  for (const [name, { r, t: reset }] of answer.limits) {
    const { q, w } = answer.policies.get(name)!
    const longest = algorithm === 'sliding-window' ? 2 * w : w
    t.ok(reset <= longest, `${label}: ${name} t=${reset} is at most ${longest} s (w=${w})`)
    if (r < q) t.ok(reset >= 1, `${label}: ${name} t=${reset} is at least 1 s while r=${r} < q=${q}`)
    if (answer.status === 429 && r < cost) {
      t.ok(answer.retryAfter !== undefined && answer.retryAfter >= reset, `${label}: Retry-After ${answer.retryAfter} >= t=${reset} of ${name}, which refused`)
      if (cost === 1 && answer.limits.size === 1) t.equal(answer.retryAfter, reset, `${label}: a request of one unit waits exactly until one unit is back`)
    }
  }
}

/** Waits `seconds` after the answer came, and a little more: a reset counts from the decision, before it. */
async function wait (seconds: number): Promise<void> {
  await sleep(seconds * 1000 + 30)
}

/**
 * A fixed window is aligned to the epoch (on Redis's clock, which is this machine's): the steps of a case that
 * expect one window must not straddle its end. Starts them in the first half of a window of `windowMs` (of
 * every window dividing it); the other algorithms start at once.
 */
async function inFirstHalf (algorithm: Algorithm, windowMs: number): Promise<void> {
  if (algorithm !== 'fixed-window') return
  const into = Date.now() % windowMs
  if (into > windowMs / 2) await sleep(windowMs - into + 20)
}

async function oneLimit (t: Test, where: Where, algorithm: Algorithm): Promise<void> {
  const label = `${where} ${algorithm}`
  const ask = await serve(t, where, { algorithm, max: 2, timeWindow: 2000 })
  await inFirstHalf(algorithm, 2000)

  // One unit in use, one left: after t, one more than that passes, two.
  const first = await ask()
  check(t, `${label}, first`, algorithm, first)
  t.equal(first.status, 200)
  const { r, t: reset } = first.limits.get('default')!
  t.equal(r, 1, `${label}: one of two left`)
  t.equal(first.reset, reset, `${label}: X-RateLimit-Reset is the binding policy's t`)
  await wait(reset)
  const again = [await ask(), await ask()]
  again.forEach((answer, i) => check(t, `${label}, after t #${i + 1}`, algorithm, answer))
  t.same(again.map(answer => answer.status), [200, 200], `${label}: after t=${reset}, r + 1 = 2 requests pass`)

  // None left: refused, Retry-After no earlier than t; after t, one more passes.
  const refused = await ask()
  check(t, `${label}, refused`, algorithm, refused)
  t.equal(refused.status, 429, `${label}: the third is refused`)
  const { t: wait429 } = refused.limits.get('default')!
  await wait(wait429)
  const after = await ask()
  check(t, `${label}, after the refusal's t`, algorithm, after)
  t.equal(after.status, 200, `${label}: after the refusal's t=${wait429}, one more passes`)
}

t.test('one policy: t is when one more unit than r is available; a 429 waits no less than t', async t => {
  await Promise.all((['redis', 'memory'] as const).flatMap(where => ALGORITHMS.map(async algorithm => await oneLimit(t, where, algorithm))))
})

async function twoLimits (t: Test, where: Where, algorithm: Algorithm): Promise<void> {
  const label = `${where} ${algorithm}`
  const ask = await serve(t, where, {
    algorithm,
    limits: [{ max: 1, timeWindow: 1000, name: 'fast' }, { max: 3, timeWindow: 2000, name: 'slow' }]
  })
  await inFirstHalf(algorithm, 2000)
  const first = await ask()
  check(t, `${label}, first`, algorithm, first)
  t.same([first.status, first.limits.get('fast')!.r, first.limits.get('slow')!.r], [200, 0, 2])

  // Refused by 'fast' alone: Retry-After is its wait, and no earlier than its t ('slow' has units left).
  const refused = await ask()
  check(t, `${label}, refused`, algorithm, refused)
  t.equal(refused.status, 429, `${label}: 'fast' refuses the second`)
  t.equal(refused.retryAfter, refused.limits.get('fast')!.t, `${label}: Retry-After is the t of 'fast', which binds`)
  t.equal(refused.reset, refused.limits.get('fast')!.t, `${label}: X-RateLimit-Reset is the binding policy's t`)
  await wait(refused.limits.get('fast')!.t)
  const after = await ask()
  check(t, `${label}, after t`, algorithm, after)
  t.equal(after.status, 200, `${label}: after the t of 'fast', one more passes`)
}

t.test('several policies: each t is its own, and a 429 waits no less than the t of the policy that refused', async t => {
  await Promise.all((['redis', 'memory'] as const).flatMap(where => ALGORITHMS.map(async algorithm => await twoLimits(t, where, algorithm))))
})

async function costly (t: Test, where: Where, algorithm: Algorithm): Promise<void> {
  const label = `${where} ${algorithm}`
  const ask = await serve(t, where, { algorithm, max: 3, timeWindow: 2000, cost: request => Number(request.headers['x-cost']) })
  await inFirstHalf(algorithm, 2000)
  const first = await ask(2)
  check(t, `${label}, first`, algorithm, first, 2)
  t.equal(first.limits.get('default')!.r, 1)
  // Two units asked for, one left: refused; the wait for both is no earlier than the wait for one more.
  const refused = await ask(2)
  check(t, `${label}, refused`, algorithm, refused, 2)
  t.equal(refused.status, 429)
  await wait(refused.limits.get('default')!.t)
  const one = await ask(1)
  t.equal(one.status, 200, `${label}: after t, r + 1 = 2 units: one...`)
  t.equal((await ask(1)).status, 200, `${label}: ...and another`)
}

t.test('costs: a refusal of several units waits no less than t, and after t one unit more than r passes', async t => {
  await Promise.all((['redis', 'memory'] as const).flatMap(where => ALGORITHMS.map(async algorithm => await costly(t, where, algorithm))))
})
