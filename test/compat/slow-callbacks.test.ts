// @fastify/rate-limit compatibility, the app's own code taking its time: theirs waits for a key generator, an
// allow list, a limit function or a store however long it takes. Here each has `callbackTimeout` (10 s by
// default), not the decision's 100 ms deadline, which measures Redis: a lookup of 150 ms in the app's database
// is waited for, and the answers are theirs. Past `callbackTimeout` the fallbacks of test/security/callbacks
// take over.
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyRequest } from 'fastify'
import t from 'tap'
import { appWith, statuses, times } from './helpers.js'
import type { Plugin } from './helpers.js'

/** As long as a slow lookup in the app's database: past the decision's 100 ms deadline. */
const LOOKUP_MS = 150

const slowly = async <T>(value: T): Promise<T> => { await sleep(LOOKUP_MS); return value }

type Callback = (err: Error | null, result?: { current: number, ttl: number }) => void

/** A store counting in process, answering each call after a slow lookup. */
class SlowStore {
  readonly #counts = new Map<unknown, number>()
  incr (key: unknown, callback: Callback, timeWindow: number): void {
    const current = (this.#counts.get(key) ?? 0) + 1
    this.#counts.set(key, current)
    setTimeout(() => callback(null, { current, ttl: timeWindow }), LOOKUP_MS)
  }

  child (): SlowStore { return new SlowStore() }
}

const user = (request: FastifyRequest): string => String(request.headers['x-user'])

t.test('slow app code with the default options: waited for, with the same answers as theirs', async t => {
  const cases: Array<[string, Record<string, unknown>, Array<{ url: string, headers?: Record<string, string> }>, number[]]> = [
    // Two users behind one address: each their own budget of 1, as the slow key generator says.
    ['keyGenerator', { max: 1, keyGenerator: async (request: FastifyRequest) => await slowly(user(request)) },
      [{ url: '/', headers: { 'x-user': 'alice' } }, { url: '/', headers: { 'x-user': 'bob' } }, { url: '/', headers: { 'x-user': 'alice' } }], [200, 200, 429]],
    ['allowList', { max: 1, allowList: async () => await slowly(true) }, times(3, { url: '/' }), [200, 200, 200]],
    ['max', { max: async () => await slowly(2) }, times(3, { url: '/' }), [200, 200, 429]],
    ['timeWindow', { max: 1, timeWindow: async () => await slowly(60_000) }, times(2, { url: '/' }), [200, 429]],
    ['store', { max: 1, store: SlowStore }, times(2, { url: '/' }), [200, 429]]
  ]
  for (const [what, options, requests, expected] of cases) {
    const seen: Partial<Record<Plugin, number[]>> = {}
    for (const plugin of ['theirs', 'ours'] as const) {
      const app = await appWith(t, plugin, { timeWindow: 60_000, ...options })
      seen[plugin] = await statuses(app, requests)
    }
    t.strictSame(seen.ours, seen.theirs, `a ${LOOKUP_MS} ms ${what}: the same answers`)
    t.strictSame(seen.ours, expected, `a ${LOOKUP_MS} ms ${what}: as it says`)
  }
})
