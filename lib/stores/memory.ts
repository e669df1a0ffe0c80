import { DEFAULT_ALGORITHM, STEPS } from '../algorithms/index.js'
import type { State } from '../algorithms/index.js'
import { toDecision } from './store.js'
import type { DecideInput, Decision, RawDecision, Store } from './store.js'

/**
 * The in-process twin of the scripts in `lua/`: the same steps on the same key names, over `Date.now()`.
 * Each algorithm's counting is a `Step` in `lib/algorithms/`; the bans and strikes around it are here.
 * Bounded: at most `cache` budgets (logs or counters) are tracked (plus the strikes and bans of their identities, and bans set by
 * an operator); expired keys are swept. When the table is full of live logs, a new identity is counted in one
 * shared overflow log per budget instead of pushing anyone else's log out, so flooding the table with new
 * identities can never reset an existing client's budget, nor keep an existing abuser from being banned.
 */

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
  readonly #logs = new Map<string, State>()
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

  #decide ({ keys, max, windowMs: window, banThreshold, banMs, peek, algorithm = DEFAULT_ALGORITHM }: DecideInput): RawDecision {
    const now = this.#now()

    const banned = this.#live(this.#marks, keys.banned, now)
    if (banned !== undefined) return [2, 0, 0, banned.expiresAt - now, 0]

    const logKey = this.#logs.has(keys.log) || this.#hasRoom(now) ? keys.log : OVERFLOW + keys.log.slice(keys.log.lastIndexOf('}:') + 1)
    const step = STEPS[algorithm](this.#live(this.#logs, logKey, now), max, window, now, peek)
    if (step.state !== undefined) this.#logs.set(logKey, step.state)
    const { count, reset, retry } = step
    if (step.allowed) return [0, count, reset, 0, 0]

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
