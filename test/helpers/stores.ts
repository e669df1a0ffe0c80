// Both stores behind one small interface, on a clock the test moves, so one
// table of cases (and a differential test) can run against each:
//
//   const redis = await redisStore(t)     // the Lua script, time injected
//   const memory = memoryStore(t)         // MemoryStore with `now: () => clock`
//   const decision = await redis.decide(input, nowMs)
//
// Redis: `timeVariant(SCRIPTS[algorithm].lua)` (one per algorithm, chosen by the input's) takes "now" as its last argv, but
// Redis expires keys (and answers PTTL) on its own clock, which a test cannot
// move. So this adapter keeps every key it touched without a TTL between
// steps and remembers each key's expiry on the test's clock; a step then runs
// as one MULTI:
//
//   TIME; per key: DEL if expired | PEXPIRE remaining; <the step>;
//   per key: PTTL, PERSIST; TIME
//
// Everything inside sees Redis's clock as if it stood at `nowMs`, as long as
// Redis's millisecond does not change during the EXEC: both TIMEs must agree,
// otherwise the keys are restored from a DUMP taken before and the step runs
// again. Redis keeps a key alive through its expiry millisecond (expired only
// when now > expiry, with PTTL 0): such a key is left without a TTL for that
// millisecond's steps (PTTL -1, which the script treats as PTTL 0: not > 0,
// < window), and deleted by the first step after it unless a step gave it a
// new TTL. A key the script
// writes without any TTL fails the step: the script promises a TTL on every key.
import type { ChainableCommander, Redis } from 'ioredis'
import { MemoryStore } from '../../lib/stores/memory.js'
import { ALGORITHMS, DEFAULT_ALGORITHM } from '../../lib/algorithms/index.js'
import type { Algorithm } from '../../lib/algorithms/index.js'
import type { IdentityKeys } from '../../lib/stores/key-names.js'
import { LEAN_ALGORITHMS, LEAN_SCRIPTS, SCRIPTS, isLean, leanArgs, scriptArgs } from '../../lib/stores/scripts.js'
import { members } from '../../lib/stores/member-ids.js'
import { HANDED_BACK, toDecision, toLeanDecisions } from '../../lib/stores/replies.js'
import type { DecideInput, Decision, SettleInput } from '../../lib/stores/store.js'
import { client, getRedis, timeVariant, type Teardownable } from './redis.js'

export type StoreKind = 'redis' | 'memory'

/** A decision's input in the one-limit spelling most tests use (`ladder` / `limits` for the rest). */
export interface Simple {
  keys: IdentityKeys
  max?: number
  windowMs?: number
  burst?: number
  limits?: Array<{ max: number, windowMs: number, burst?: number }>
  banThreshold?: number
  banMs?: number
  ladder?: number[]
  forgetMs?: number
  peek?: boolean
  algorithm?: Algorithm
  overLimit?: DecideInput['overLimit']
  cost?: number
}

export function decideInput ({ keys, max = 1, windowMs = 1000, burst, limits, banThreshold = 0, banMs = 1000, ladder, forgetMs = 0, peek = false, algorithm, overLimit, cost }: Simple): DecideInput {
  return {
    keys,
    limits: (limits ?? [{ max, windowMs, burst }]).map(l => ({ max: l.max, windowMs: l.windowMs, burst: l.burst ?? l.max })),
    ban: banThreshold === 0 ? null : { threshold: banThreshold, ladder: ladder ?? [banMs], forgetMs },
    peek,
    algorithm,
    ...(overLimit === undefined ? {} : { overLimit }),
    ...(cost === undefined ? {} : { cost })
  }
}

/** The fields of a decision most tests state: status, the binding limit's count and reset, retry, banStarted. */
export function summary ({ status, count, resetMs, retryMs, banStarted }: Decision): Pick<Decision, 'status' | 'count' | 'resetMs' | 'retryMs' | 'banStarted'> {
  return { status, count, resetMs, retryMs, banStarted }
}

export interface StoreUnderTest {
  readonly kind: StoreKind
  /** One decision at `nowMs` on the test's clock. */
  decide (input: DecideInput, nowMs: number): Promise<Decision>
  /** Gives back a request counted at `input.at`, at `nowMs`. */
  settle (input: SettleInput, nowMs: number): Promise<void>
  /** The admin override: `key` set to `value` for `ms` (null: no TTL) from `nowMs`. */
  setValue (key: string, value: string, ms: number | null, nowMs: number): Promise<void>
  /** The admin ban: `bannedKey` banned for `ms` from `nowMs`. */
  setBan (bannedKey: string, ms: number, nowMs: number): Promise<void>
  /** The admin unban/reset: deletes `keys` at `nowMs`. */
  delete (keys: readonly string[], nowMs: number): Promise<void>
  /** Redis only: what is stored for one key at `nowMs` (after expiry), without running the script. */
  inspect? (key: string, nowMs: number): Promise<Stored>
}

export type Stored =
  | { readonly type: 'none' }
  | { readonly type: 'zset', readonly scores: number[], readonly members: string[], readonly ttl: number }
  | { readonly type: 'string', readonly value: string, readonly ttl: number }
  | { readonly type: 'hash', readonly fields: Record<string, string>, readonly ttl: number }

/** The test-only command name of an algorithm's time-injected script (`lean`: the sliding log's lean path). */
export const timedCommand = (algorithm: string): string => `rateGuardTestAt_${algorithm}`
const leanName = (algorithm: string): string => `lean-${algorithm}`

const RETRIES = 100

type Command = (...args: Array<string | number>) => ChainableCommander

/** The in-process twin on a clock the test sets; closed at teardown. */
export function memoryStore (t: Teardownable, cache = 100_000): StoreUnderTest {
  let clock = 0
  const store = new MemoryStore({ cache, now: () => clock })
  t.teardown(() => store.close())
  return {
    kind: 'memory',
    async decide (input, nowMs) {
      clock = nowMs
      return store.decide(input)
    },
    async settle (input, nowMs) {
      clock = nowMs
      store.settle(input)
    },
    async setValue (key, value, ms, nowMs) {
      clock = nowMs
      await store.setValue(key, value, ms)
    },
    async setBan (bannedKey, ms, nowMs) {
      clock = nowMs
      await store.setBan(bannedKey, ms)
    },
    async delete (keys, nowMs) {
      clock = nowMs
      await store.delete(keys)
    }
  }
}

export interface TimedRedisStore extends StoreUnderTest {
  /**
   * The latest expiry, at or before `nowMs`, of any key this store has held. Stepping the clock back to
   * before it is ambiguous: whether that key comes back depends on whether anything touched it since (Redis
   * deletes an expired key when a command reads it, or when its active expiry samples it; the twin when it
   * reads it or sweeps), not on the rules under test.
   */
  lastExpiry (nowMs: number): number
}

/**
 * The Redis scripts with time injected, on the file's shared Redis, with its own client. As RedisStore does, a
 * request the lean script takes (`isLean`) goes to it, and back to its algorithm's script when handed back;
 * `lean: false` sends every request to its algorithm's script, so a suite can run both paths.
 */
export async function redisStore (t: Teardownable, redis?: Redis, { lean = true } = {}): Promise<TimedRedisStore> {
  const r = redis ?? client(t, (await getRedis(t)).url)
  return new TimedRedis(r, lean)
}

/**
 * Every Redis path of `algorithm`, as stores under test: its lean script (the default) and its general one,
 * when it has a lean path (`LEAN_ALGORITHMS`); else its one script.
 */
export async function redisPaths (t: Teardownable, algorithm: Algorithm = DEFAULT_ALGORITHM): Promise<TimedRedisStore[]> {
  const store = await redisStore(t)
  return LEAN_ALGORITHMS.includes(algorithm) ? [store, await redisStore(t, undefined, { lean: false })] : [store]
}

function milliseconds (reply: unknown): number {
  const [seconds, micros] = reply as [string | number, string | number]
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}

class TimedRedis implements TimedRedisStore {
  readonly #redis: Redis
  /** Expiry of every key this adapter has seen with a TTL, on the test's clock. Absent: the key does not exist. */
  readonly #expiries = new Map<string, number>()
  /** The latest expiry of a key deleted because it expired. */
  #expired = -Infinity
  #member = 0
  /** Keys written without a TTL on purpose (a permanent override). */
  readonly #permanent = new Set<string>()

  readonly #lean: boolean
  readonly kind = 'redis'

  constructor (redis: Redis, lean: boolean) {
    this.#redis = redis
    this.#lean = lean
    for (const [name, lua] of [...ALGORITHMS.map(algorithm => [timedCommand(algorithm), SCRIPTS[algorithm].lua]), ...Object.entries(LEAN_SCRIPTS).map(([algorithm, { lua }]) => [timedCommand(leanName(algorithm)), lua])]) {
      if (!(name! in redis)) redis.defineCommand(name!, { lua: timeVariant(lua!) })
    }
  }

  async decide (input: DecideInput, nowMs: number): Promise<Decision> {
    const algorithm = input.algorithm ?? DEFAULT_ALGORITHM
    if (this.#lean && isLean(input, algorithm)) {
      const base = this.#base()
      const [answer] = toLeanDecisions(await this.#script(input, leanName(algorithm), leanArgs([input], base), nowMs), members(base, 1), [input])
      if (answer !== HANDED_BACK) return answer!
    }
    const base = this.#base()
    return toDecision(await this.#script(input, algorithm, scriptArgs([input], input.peek ? 'peek' : 'decide', base), nowMs), members(base, 1)[0]!, input.limits)
  }

  async settle (input: SettleInput, nowMs: number): Promise<void> {
    await this.#script(input, input.algorithm, scriptArgs([input], 'settle', ''), nowMs)
  }

  #base (): string {
    return `m${(this.#member++).toString(36)}.`
  }

  /** Runs the time-injected script `script` (an algorithm's, or its lean one: `lean-<algorithm>`) with `args` at `nowMs`. */
  async #script (input: DecideInput | SettleInput, script: string, args: Array<string | number>, nowMs: number): Promise<unknown> {
    const { keys } = input
    return await this.#step(nowMs, [keys.log, keys.strikes, keys.banned, keys.offences, keys.override, keys.backoff, keys.quota], (multi) => {
      const command = (multi as unknown as Record<string, Command>)[timedCommand(script)]!
      command.call(multi, ...args, nowMs)
    })
  }

  async setValue (key: string, value: string, ms: number | null, nowMs: number): Promise<void> {
    if (ms === null) this.#permanent.add(key)
    else this.#permanent.delete(key)
    await this.#step(nowMs, [key], (multi) => { if (ms === null) multi.set(key, value); else multi.set(key, value, 'PX', ms) })
  }

  // RedisStore.setBan's ban (it also enters the ban in the ban index, on Redis's own clock, which the tests
  // of this adapter never read) and RedisStore.delete, run inside the step.
  async setBan (bannedKey: string, ms: number, nowMs: number): Promise<void> {
    await this.#step(nowMs, [bannedKey], (multi) => { multi.set(bannedKey, '1', 'PX', ms) })
  }

  async delete (keys: readonly string[], nowMs: number): Promise<void> {
    await this.#step(nowMs, keys, (multi) => { multi.del(...keys) })
  }

  lastExpiry (nowMs: number): number {
    let latest = this.#expired
    for (const at of this.#expiries.values()) if (at <= nowMs && at > latest) latest = at
    return latest
  }

  async inspect (key: string, nowMs: number): Promise<Stored> {
    const at = this.#expiries.get(key)
    if (at === undefined || at < nowMs) return { type: 'none' }
    const type = await this.#redis.type(key)
    if (type === 'zset') {
      const flat = await this.#redis.zrange(key, '0', '-1', 'WITHSCORES')
      return { type, scores: flat.filter((_, i) => i % 2 === 1).map(Number), members: flat.filter((_, i) => i % 2 === 0), ttl: at - nowMs }
    }
    if (type === 'string') return { type, value: (await this.#redis.get(key))!, ttl: at - nowMs }
    if (type === 'hash') return { type, fields: await this.#redis.hgetall(key), ttl: at - nowMs }
    throw new Error(`inspect: ${key} is a ${type}`)
  }

  /** Runs `op` at `nowMs` inside one MULTI (see the top of this file); resolves to op's reply. */
  async #step (nowMs: number, keyList: readonly string[], op: (multi: ChainableCommander) => void): Promise<unknown> {
    const keys = [...new Set(keyList)]
    for (let attempt = 1; ; attempt++) {
      const dumps = await Promise.all(keys.map(key => this.#redis.dumpBuffer(key)))
      const atExpiry = new Set<string>()
      const multi = this.#redis.multi().time()
      let opIndex = 1
      for (const key of keys) {
        const at = this.#expiries.get(key)
        if (at === undefined) continue
        if (at === nowMs) {
          atExpiry.add(key)
          continue
        }
        if (at < nowMs) multi.del(key)
        else multi.pexpire(key, at - nowMs)
        opIndex++
      }
      op(multi) // exactly one command
      const ttlIndex = opIndex + 1
      for (const key of keys) multi.pttl(key).persist(key)
      multi.time()
      const replies = (await multi.exec())!
      for (const [err] of replies) if (err !== null) throw err
      const values = replies.map(([, value]) => value)

      if (milliseconds(values[0]) !== milliseconds(values[values.length - 1])) {
        // Redis's millisecond changed during the EXEC: TTLs may be off by one. Put the keys back and redo.
        if (attempt === RETRIES) throw new Error(`Redis's clock kept changing millisecond during ${RETRIES} tries`)
        const undo = this.#redis.multi()
        for (const [i, key] of keys.entries()) {
          undo.del(key)
          const dump = dumps[i]
          if (dump !== null && dump !== undefined) undo.restore(key, 0, dump)
        }
        await undo.exec()
        continue
      }

      for (const key of keys) {
        const at = this.#expiries.get(key)
        if (at !== undefined && at < nowMs) this.#expired = Math.max(this.#expired, at)
      }
      for (const [i, key] of keys.entries()) {
        const ttl = values[ttlIndex + 2 * i] as number
        if (ttl === -2) {
          this.#expiries.delete(key)
        } else if (ttl >= 0) {
          this.#expiries.set(key, nowMs + ttl)
        } else if (this.#permanent.has(key)) {
          // No TTL, by design.
          this.#expiries.delete(key)
        } else if (atExpiry.has(key)) {
          // Alive through its expiry millisecond, untouched by this step: kept for any other step at this
          // millisecond, as Redis keeps it, and deleted by the first step after it (the `at < nowMs` branch).
        } else {
          throw new Error(`${key} was written without a TTL at ${nowMs}`)
        }
      }
      return values[opIndex]
    }
  }
}
