import { toDecision } from './store.js'
import type { DecideInput, Decision, RawDecision, Store } from './store.js'

/**
 * The in-process twin of `lua/sliding-log.lua`: the same steps on the same key names, over `Date.now()`.
 * Bounded: at most `cache` logs are tracked (plus the strikes and bans of their identities, and bans set by
 * an operator); expired keys are swept. When the table is full of live logs, a new identity is counted in one
 * shared overflow log per budget instead of pushing anyone else's log out, so flooding the table with new
 * identities can never reset an existing client's budget, nor keep an existing abuser from being banned.
 */

interface Log { times: number[], expiresAt: number }
interface Mark { value: number, expiresAt: number }

export interface MemoryStoreOptions {
  /** Most keys tracked at once. */
  cache: number
  /** The clock; tests move it. */
  now?: () => number
  /** How often expired keys are swept (ms). */
  sweepInterval?: number
}

const OVERFLOW = 'overflow'

export class MemoryStore implements Store {
  readonly #logs = new Map<string, Log>()
  readonly #marks = new Map<string, Mark>()
  readonly #cache: number
  readonly #now: () => number
  readonly #timer: NodeJS.Timeout
  #lastFullSweep = -Infinity

  constructor ({ cache, now = Date.now, sweepInterval = 30_000 }: MemoryStoreOptions) {
    this.#cache = cache
    this.#now = now
    this.#timer = setInterval(() => this.sweep(), sweepInterval).unref()
  }

  /** Keys tracked now (expired ones included until the next sweep). */
  get size (): number {
    return this.#logs.size + this.#marks.size
  }

  decide (input: DecideInput): Decision {
    return toDecision(this.#decide(input))
  }

  #decide ({ keys, max, windowMs: window, banThreshold, banMs, peek }: DecideInput): RawDecision {
    const now = this.#now()

    const banned = this.#live(this.#marks, keys.banned, now)
    if (banned !== undefined) return [2, 0, 0, banned.expiresAt - now, 0]

    const logKey = this.#logs.has(keys.log) || this.#hasRoom(now) ? keys.log : OVERFLOW + keys.log.slice(keys.log.lastIndexOf(':log:'))
    const log = this.#live(this.#logs, logKey, now)
    const times = log?.times ?? []
    let expired = 0
    while (expired < times.length && times[expired]! <= now - window) expired++
    if (expired > 0) times.splice(0, expired)
    let count = times.length
    const leaves = (index: number): number => times[index]! + window - now

    if (count < max) {
      if (!peek) {
        insertSorted(times, now)
        if (log === undefined) this.#logs.set(logKey, { times, expiresAt: now + window })
        // As in the script: the log lives until its newest entry leaves, also after the clock stepped back.
        else log.expiresAt = Math.max(log.expiresAt, now + window)
        count++
      }
      return count === 0 ? [0, 0, 0, 0, 0] : [0, count, leaves(0), 0, 0]
    }

    const reset = leaves(0)
    const retry = leaves(count - max)
    // The overflow log is shared by strangers: it limits them, but never strikes or bans any one of them.
    if (peek || banThreshold === 0 || logKey !== keys.log) return [1, count, reset, retry, 0]

    let strikes = this.#live(this.#marks, keys.strikes, now)
    if (strikes === undefined) {
      strikes = { value: 0, expiresAt: now + window }
      this.#marks.set(keys.strikes, strikes)
    }
    strikes.value++
    if (strikes.value < banThreshold) return [1, count, reset, retry, 0]

    this.#marks.delete(keys.strikes)
    this.#marks.set(keys.banned, { value: 1, expiresAt: now + banMs })
    return [2, count, reset, banMs, 1]
  }

  async setBan (bannedKey: string, ms: number): Promise<void> {
    this.#marks.set(bannedKey, { value: 1, expiresAt: this.#now() + ms })
  }

  async delete (keys: readonly string[]): Promise<void> {
    for (const key of keys) {
      this.#logs.delete(key)
      this.#marks.delete(key)
    }
  }

  async close (): Promise<void> {
    clearInterval(this.#timer)
    this.#logs.clear()
    this.#marks.clear()
  }

  /** Drops every expired key. */
  sweep (): void {
    const now = this.#now()
    for (const map of [this.#logs, this.#marks]) {
      for (const [key, entry] of map) if (entry.expiresAt <= now) map.delete(key)
    }
  }

  #live<T extends { expiresAt: number }> (map: Map<string, T>, key: string, now: number): T | undefined {
    const entry = map.get(key)
    if (entry === undefined || entry.expiresAt > now) return entry
    map.delete(key)
    return undefined
  }

  /** Whether one more log fits; a full table is swept at most once a second. */
  #hasRoom (now: number): boolean {
    if (this.#logs.size < this.#cache) return true
    if (now - this.#lastFullSweep < 1000) return false
    this.#lastFullSweep = now
    this.sweep()
    return this.#logs.size < this.#cache
  }
}

/** Appends `value`, keeping the array sorted even when the clock steps back. */
function insertSorted (times: number[], value: number): void {
  let i = times.length
  while (i > 0 && times[i - 1]! > value) i--
  times.splice(i, 0, value)
}
