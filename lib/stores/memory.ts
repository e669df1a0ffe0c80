import { DEFAULT_ALGORITHM, STEPS } from '../algorithms/index.js'
import type { Entry, State } from '../algorithms/index.js'
import { FAILED, parseLimits, toDecision } from './store.js'
import type { DecideInput, Decision, RawDecision, Store, UndoInput } from './store.js'

/**
 * The in-process twin of the scripts in `lua/`: the same steps on the same key names, over `Date.now()`.
 * Each algorithm's counting is a `Step` in `lib/algorithms/`; the bans and strikes around it are here.
 * Bounded: at most `cache` budgets (logs or counters) are tracked (plus the strikes and bans of their identities, and bans set by
 * an operator); expired keys are swept. When the table is full of live logs, a new identity is counted in one
 * shared overflow log per budget instead of pushing anyone else's log out, so flooding the table with new
 * identities can never reset an existing client's budget, nor keep an existing abuser from being banned.
 */

interface Mark { value: number | string, expiresAt: number }

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
    return toDecision(this.#decide(input), '', input.limits)
  }

  #decide ({ keys, limits: given, ban, peek, algorithm = DEFAULT_ALGORITHM }: DecideInput): RawDecision {
    const now = this.#now()
    let limits = given
    const reply = (status: number, retry: number, offence: number, entries: Entry[]): RawDecision => [
      status, retry, offence, now, limits.length,
      ...limits.flatMap((limit, i) => [limit.burst, limit.windowMs, entries[i]!.count, entries[i]!.reset])
    ]

    // A banned client is answered first, before the clock is read in Redis: no limits (the budget's own) and no time.
    const banned = this.#live(this.#marks, keys.banned, now, false)
    if (banned !== undefined) return [2, banned.expiresAt - now, 0, 0, 0]

    const override = this.#live(this.#marks, keys.override, now)
    if (override !== undefined) limits = parseLimits(override.value as string)
    if (limits.length === 0) return [FAILED, `ERR rate-guard: the override at ${keys.override} names no limit`]

    const stateKey = this.#logs.has(keys.log) || this.#hasRoom(now) ? keys.log : OVERFLOW + keys.log.slice(keys.log.lastIndexOf('}:') + 1)
    const counted = STEPS[algorithm].count(this.#live(this.#logs, stateKey, now), limits, now, peek)
    if (counted.state !== undefined) this.#logs.set(stateKey, counted.state)
    const { entries } = counted
    if (counted.allowed) return reply(0, 0, 0, entries)

    // Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
    let retry = 0
    let strikeWindow = 0
    entries.forEach((entry, i) => {
      if (entry.retry > retry) [retry, strikeWindow] = [entry.retry, limits[i]!.windowMs]
    })
    // The overflow log is shared by strangers: it limits them, but never strikes or bans any one of them.
    if (peek || ban === null || stateKey !== keys.log) return reply(1, retry, 0, entries)

    const strikes = this.#count(keys.strikes, now, now + strikeWindow, false)
    if ((strikes.value as number) < ban.threshold) return reply(1, retry, 0, entries)

    // The ban: its length climbs the ladder with each ban the identity earns before the last is forgotten.
    const { ladder } = ban
    let offence = 1
    let duration = ladder[0]!
    if (ladder.length > 1) {
      const offences = this.#count(keys.offences, now, 0, true)
      offence = offences.value as number
      duration = ladder[Math.min(offence, ladder.length) - 1]!
      offences.expiresAt = now + duration + ban.forgetMs
    }
    this.#marks.set(keys.banned, { value: 1, expiresAt: now + duration })
    this.#marks.delete(keys.strikes)
    return reply(2, duration, offence, entries)
  }

  undo ({ keys, limits, algorithm, at }: UndoInput): void {
    const now = this.#now()
    const override = this.#live(this.#marks, keys.override, now)
    const state = this.#live(this.#logs, keys.log, now)
    if (state !== undefined) STEPS[algorithm].undo(state, override === undefined ? limits : parseLimits(override.value as string), at, now)
  }

  /** Adds one to the counter at `key`, made with `expiresAt` when there is none (a strike, an offence). */
  #count (key: string, now: number, expiresAt: number, throughExpiry: boolean): Mark {
    let mark = this.#live(this.#marks, key, now, throughExpiry)
    if (mark === undefined) this.#marks.set(key, mark = { value: 0, expiresAt })
    mark.value = (mark.value as number) + 1
    return mark
  }

  async setBan (bannedKey: string, ms: number): Promise<void> {
    this.#marks.set(bannedKey, { value: 1, expiresAt: this.#now() + ms })
  }

  async setValue (key: string, value: string, ms: number | null): Promise<void> {
    this.#marks.set(key, { value, expiresAt: ms === null ? Infinity : this.#now() + ms })
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
      for (const [key, entry] of map) if (entry.expiresAt < now) map.delete(key)
    }
  }

  /**
   * The entry at `key` unless it has expired. As in Redis, a key lives through its expiry millisecond; the
   * scripts read a ban and strikes as gone at it (`PTTL > 0`), so those pass `throughExpiry: false`.
   */
  #live<T extends { expiresAt: number }> (map: Map<string, T>, key: string, now: number, throughExpiry = true): T | undefined {
    const entry = map.get(key)
    if (entry === undefined || entry.expiresAt > now || (throughExpiry && entry.expiresAt === now)) return entry
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
