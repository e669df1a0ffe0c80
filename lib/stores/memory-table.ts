import type { Entry, Limit, State } from '../algorithms/index.js'
import { Oldest } from '../oldest.js'

// The in-process store's keys (./memory.ts): the budgets' states (logs, counters, quota hashes) and the marks
// (bans, strikes, offences, over-limit keys, overrides), each forgotten at its expiry as Redis forgets a key.
//
// Bounded, and fair under a flood of new identities: logs (or counters), strikes, offences, over-limit keys,
// bans and overrides all count toward `cache`; expired keys are swept. When the table is full, the least recently
// used log is dropped to make room, unless its client is at its limit within its window (dropping it would
// give an abuser a fresh budget): those are kept, and so are bans and overrides, which are never dropped.
// Only when every log in reach is kept are newcomers counted in shared logs, spread over `OVERFLOW_BUCKETS`
// per budget by their identity's hash (and `onFull` is told, once a minute at most): strangers then share a
// budget with a few others, never with all. So the table holds at most `cache` keys, plus bans and overrides
// beyond it and the shared logs (`OVERFLOW_BUCKETS` per budget).

/** A key that is no budget's state: an integer (a ban, strikes, offences, the over-limit key) or an override's text. */
export interface Mark { value: number | string, expiresAt: number }

/** A budget's state, and until when it is kept when room is needed: its client reached a limit. */
export interface Tracked extends State {
  keepUntil?: number
}

const OVERFLOW = 'overflow:'
/** Shared logs per budget for newcomers when the table is full (one per first character of the identity's hash). */
export const OVERFLOW_BUCKETS = 64
/** Least recently used logs looked at for one to drop: the cost of a newcomer stays constant. */
const EVICTION_SCAN = 64
const FULL_WARNING_INTERVAL = 60_000

export class MemoryTable {
  readonly #logs = new Map<string, State>()
  /** The least recently used log first: each one used moves to the back. */
  readonly #oldest = new Oldest(this.#logs)
  readonly #marks = new Map<string, Mark>()
  readonly #cache: number
  readonly #onFull: (() => void) | undefined
  /** The store's sweep (this table's, and what else it keeps), run when the table is full. */
  readonly #sweep: () => void
  #lastFullSweep = -Infinity
  #lastFullWarning = -Infinity

  constructor (cache: number, onFull: (() => void) | undefined, sweep: () => void) {
    this.#cache = cache
    this.#onFull = onFull
    this.#sweep = sweep
  }

  /** Keys tracked now (expired ones included until the next sweep). */
  get size (): number {
    return this.#logs.size + this.#marks.size
  }

  /** The budget's state at `key`, unless it has expired (it lives through its expiry millisecond, as in Redis). */
  log (key: string, now: number): State | undefined {
    return live(this.#logs, key, now, true)
  }

  /**
   * The mark at `key` unless it has expired. As in Redis, a key lives through its expiry millisecond; the
   * scripts read a ban and strikes as gone at it (`PTTL > 0`), so those pass `throughExpiry: false`.
   */
  mark (key: string, now: number, throughExpiry = true): Mark | undefined {
    return live(this.#marks, key, now, throughExpiry)
  }

  /** Stores a budget's state, made anew. */
  setLog (key: string, state: State): void {
    this.#logs.set(key, state)
  }

  setMark (key: string, mark: Mark): void {
    this.#marks.set(key, mark)
  }

  deleteMark (key: string): void {
    this.#marks.delete(key)
  }

  /** Every mark, expired ones included until the next sweep. */
  marks (): IterableIterator<[string, Mark]> {
    return this.#marks.entries()
  }

  /** Drops `key`, a state's or a mark's. */
  delete (key: string): void {
    this.#logs.delete(key)
    this.#marks.delete(key)
  }

  clear (): void {
    this.#logs.clear()
    this.#marks.clear()
  }

  /** Drops every key expired at `now`. */
  sweep (now: number): void {
    for (const map of [this.#logs, this.#marks]) {
      for (const [key, entry] of map) if (entry.expiresAt < now) map.delete(key)
    }
  }

  /** A budget's state used now: the most recently used goes last; one whose client reached a limit is kept through its window. */
  touch (key: string, tracked: Tracked, limits: readonly Limit[], entries: readonly Entry[], now: number): void {
    this.#logs.delete(key)
    this.#logs.set(key, tracked)
    limits.forEach((limit, i) => {
      if (entries[i]!.count >= limit.burst) tracked.keepUntil = Math.max(tracked.keepUntil ?? 0, now + limit.windowMs)
    })
  }

  /** Adds one to the counter at `key`, made with `expiresAt` when there is none (a strike, an offence). */
  increment (key: string, now: number, expiresAt: number, throughExpiry: boolean): Mark {
    let mark = this.mark(key, now, throughExpiry)
    if (mark === undefined) {
      // Made whether or not room can be made: a strike or an offence is not dropped for a newcomer's sake.
      this.makeRoom(now)
      this.#marks.set(key, mark = { value: 0, expiresAt })
    }
    mark.value = (mark.value as number) + 1
    return mark
  }

  /** The key a budget's state is counted under: its own, or, when no room can be made, a shared overflow log. */
  place (log: string, now: number): string {
    if (this.#logs.has(log) || this.makeRoom(now)) return log
    if (now - this.#lastFullWarning >= FULL_WARNING_INTERVAL) {
      this.#lastFullWarning = now
      this.#onFull?.()
    }
    // `<nameSpace>{<hash>}:<segment>:<scope>`: spread by the hash's first character, one set per budget.
    const tag = log.indexOf('{')
    return `${OVERFLOW}${log[tag + 1]}:${log.slice(log.lastIndexOf('}:') + 2)}`
  }

  /**
   * Whether one more key fits: at once when the table has room; else after a sweep (at most once a second);
   * else by dropping the least recently used log that is not kept.
   */
  makeRoom (now: number): boolean {
    if (this.size < this.#cache) return true
    if (now - this.#lastFullSweep >= 1000) {
      this.#lastFullSweep = now
      this.#sweep()
      if (this.size < this.#cache) return true
    }
    for (let scanned = 0; scanned < EVICTION_SCAN; scanned++) {
      const oldest = this.#oldest.next()
      if (oldest === undefined) break
      const [key, state] = oldest
      this.#logs.delete(key)
      if (((state as Tracked).keepUntil ?? 0) <= now && !key.startsWith(OVERFLOW)) return true
      // Kept: to the back, so the next scan starts past it.
      this.#logs.set(key, state)
    }
    return false
  }
}

/** The entry at `key` unless it has expired (`throughExpiry`: it lives through its expiry millisecond). */
function live<T extends { expiresAt: number }> (map: Map<string, T>, key: string, now: number, throughExpiry: boolean): T | undefined {
  const entry = map.get(key)
  if (entry === undefined || entry.expiresAt > now || (throughExpiry && entry.expiresAt === now)) return entry
  map.delete(key)
  return undefined
}
