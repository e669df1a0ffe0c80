import { DEFAULT_ALGORITHM, STEPS, largest, longest, quotasCount, quotasFit, quotasSettle } from '../algorithms/index.js'
import type { Algorithm, Counted, Entry, Limit, Quota, State } from '../algorithms/index.js'
import { FAILED, WAITS, toDecision } from './replies.js'
import type { RawDecision } from './replies.js'
import { exceeded, raw, wait } from './memory-replies.js'
import { limitsUnder } from './overrides.js'
import { Oldest } from '../oldest.js'
import { isBanKey } from './key-names.js'
import type { DecideInput, Decision, SettleInput, Store } from './store.js'
import type { Ban } from './ban-index.js'
import type { BanPolicy } from '../types.js'
import { MemoryLeases } from './memory-leases.js'

// The in-process twin of the scripts in `lua/`: the same steps on the same key names, over `Date.now()`.
// Each algorithm's counting is a `Step` in `lib/algorithms/`; the bans and strikes around it are here.
//
// Bounded, and fair under a flood of new identities: logs (or counters), strikes, offences, over-limit keys,
// bans and overrides all count toward `cache`; expired keys are swept. When the table is full, the least recently
// used log is dropped to make room, unless its client is at its limit within its window (dropping it would
// give an abuser a fresh budget): those are kept, and so are bans and overrides, which are never dropped.
// Only when every log in reach is kept are newcomers counted in shared logs, spread over `OVERFLOW_BUCKETS`
// per budget by their identity's hash (and `onFull` is told, once a minute at most): strangers then share a
// budget with a few others, never with all. So the table holds at most `cache` keys, plus bans and overrides
// beyond it and the shared logs (`OVERFLOW_BUCKETS` per budget).

interface Mark { value: number | string, expiresAt: number }

/** A budget's state, and until when it is kept when room is needed: its client reached a limit. */
interface Tracked extends State {
  keepUntil?: number
}

export interface MemoryStoreOptions {
  /** Most keys tracked at once. */
  cache: number
  /** The clock; tests move it. */
  now?: () => number
  /** How often expired keys are swept (ms). */
  sweepInterval?: number
  /** Called when a newcomer finds no room (every log in reach is kept): once a minute at most. */
  onFull?: () => void
}

const OVERFLOW = 'overflow:'
/** Shared logs per budget for newcomers when the table is full (one per first character of the identity's hash). */
export const OVERFLOW_BUCKETS = 64
/** Least recently used logs looked at for one to drop: the cost of a newcomer stays constant. */
const EVICTION_SCAN = 64
const FULL_WARNING_INTERVAL = 60_000

export class MemoryStore implements Store {
  readonly #logs = new Map<string, State>()
  /** The least recently used log first: each one used moves to the back. */
  readonly #oldest = new Oldest(this.#logs)
  readonly #marks = new Map<string, Mark>()
  readonly #cache: number
  readonly #now: () => number
  readonly #timer: NodeJS.Timeout
  readonly #onFull: (() => void) | undefined
  /** `concurrency`'s leases, in process. */
  readonly leases: MemoryLeases
  #lastFullSweep = -Infinity
  #lastFullWarning = -Infinity

  constructor ({ cache, now = Date.now, sweepInterval = 30_000, onFull }: MemoryStoreOptions) {
    this.#cache = cache
    this.#now = now
    this.#onFull = onFull
    this.leases = new MemoryLeases(this, now)
    this.#timer = setInterval(() => this.sweep(), sweepInterval).unref()
  }

  /** Keys tracked now (expired ones included until the next sweep). */
  get size (): number {
    return this.#logs.size + this.#marks.size
  }

  decide (input: DecideInput): Decision {
    return toDecision(this.#decide(input), '', input.limits)
  }

  #decide ({ keys, limits: given, ban, peek, algorithm = DEFAULT_ALGORITHM, overLimit, cost = 1, wait: waits }: DecideInput): RawDecision {
    const now = this.#now()

    // A banned client is answered first, before the clock is read in Redis: no limits (the budget's own) and no time.
    const banned = this.#live(this.#marks, keys.banned, now, false)
    if (banned !== undefined) return [2, banned.expiresAt - now, 0, 0, 0]

    const under = limitsUnder(this.#live(this.#marks, keys.override, now)?.value as string | undefined, given, now)
    if (under === undefined) return [FAILED, `ERR rate-guard: the override at ${keys.override} names no limit`]
    const { stepLimits, quotas } = under
    const limits: readonly Limit[] = quotas.length === 0 ? stepLimits : [...stepLimits, ...quotas]
    // A request that costs more than a limit holds never passes: refused as it is, nothing counted, no strike.
    if (cost > 1 && limits.some(limit => cost > limit.burst)) return raw(1, 0, 0, now, limits, this.#look(keys, algorithm, stepLimits, quotas, now))

    // Over the limit (see `lua/decide.lua`): while the over-limit key lives, a decision is held off without
    // counting on the algorithm, and a peek sees the client exceeded for what is left of a window since then.
    const held = overLimit === undefined ? undefined : this.#live(this.#marks, keys.backoff, now, false)
    const longestMs = overLimit === undefined ? 0 : longest(limits)
    const doubles = overLimit === 'backoff'
    let entries: Entry[]
    let retry = 0
    let strikeWindow = 0
    // Counted on the identity's own log, not on an overflow log shared by strangers.
    let own = true
    if (held !== undefined && !peek) {
      held.value = (held.value as number) + 1
      retry = wait(longestMs, held.value, doubles)
      strikeWindow = longestMs
      held.expiresAt = now + retry
      entries = exceeded(limits, retry, 0)
    } else {
      if (held !== undefined) {
        const left = longestMs - (wait(longestMs, held.value as number, doubles) - (held.expiresAt - now))
        if (left > 0) return raw(1, left, 0, now, limits, exceeded(limits, left, 1))
      }
      // A peek stores nothing (no room needed). The quotas first: one full, the algorithm is only asked.
      const quotaKey = quotas.length === 0 || peek ? keys.quota : this.#place(keys.quota, now)
      const quotaEntries: Entry[] = []
      const fits = quotas.length === 0 || quotasFit(this.#live(this.#logs, quotaKey, now), quotas, now, cost, quotaEntries)
      const stateKey = peek || stepLimits.length === 0 ? keys.log : this.#place(keys.log, now)
      own = stateKey === keys.log && quotaKey === keys.quota
      const live = stepLimits.length === 0 ? undefined : this.#live(this.#logs, stateKey, now) as Tracked | undefined
      const counted: Counted = stepLimits.length === 0 ? { allowed: true, entries: [] } : STEPS[algorithm].count(live, stepLimits, now, peek || !fits, cost)
      entries = quotas.length === 0 ? counted.entries : [...counted.entries, ...quotaEntries]
      const tracked: Tracked | undefined = counted.state ?? live
      if (tracked !== undefined && !peek) this.#touch(stateKey, tracked, stepLimits, entries, now)
      if (counted.allowed && fits) {
        if (quotas.length > 0 && !peek) this.#countQuotas(quotaKey, quotas, quotaEntries, now, cost)
        return raw(0, 0, 0, now, limits, entries)
      }

      // Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
      entries.forEach((entry, i) => {
        if (entry.retry > retry) [retry, strikeWindow] = [entry.retry, limits[i]!.windowMs]
      })
      // Allowed within maxWait: it waits, counted at the end of its wait, unless its queue is full (not on a log
      // strangers share, a peek, a cost no wait lets through, or a full quota: a quota with room counts it now).
      if (waits !== undefined && !peek && own && fits && retry > 0 && retry <= waits.maxMs && STEPS[algorithm].reserve(tracked, stepLimits, now, cost, retry, waits.maxQueue, counted.entries)) {
        // Kept while a request waits on it, and through its window after.
        tracked!.keepUntil = Math.max(tracked!.keepUntil ?? 0, now + retry + longest(stepLimits))
        if (quotas.length > 0) this.#countQuotas(quotaKey, quotas, quotaEntries, now, cost)
        return raw(WAITS, retry, 0, now, limits, quotas.length === 0 ? counted.entries : [...counted.entries, ...quotaEntries])
      }
      // Over the limit: held off for the longest window, from now (not strangers sharing a log).
      if (overLimit !== undefined && !peek && own) {
        retry = wait(longestMs, 1, false)
        this.#makeRoom(now)
        this.#marks.set(keys.backoff, { value: 1, expiresAt: now + retry })
        entries = exceeded(limits, retry, 0)
      }
    }
    // An overflow log is shared by strangers: it limits them, but never strikes or bans any one of them.
    if (peek || ban === null || !own) return raw(1, retry, 0, now, limits, entries)

    const started = this.strike(keys, ban, now, strikeWindow)
    return started === undefined ? raw(1, retry, 0, now, limits, entries) : raw(2, started.duration, started.offence, now, limits, entries)
  }

  /** What every limit says of one unit more, counting nothing: the algorithm's entries, then the quotas'. */
  #look (keys: DecideInput['keys'], algorithm: Algorithm, stepLimits: readonly Limit[], quotas: readonly Quota[], now: number): Entry[] {
    const entries = stepLimits.length === 0 ? [] : STEPS[algorithm].count(this.#live(this.#logs, keys.log, now), stepLimits, now, true, 1).entries
    if (quotas.length > 0) quotasFit(this.#live(this.#logs, keys.quota, now), quotas, now, 1, entries)
    return entries
  }

  /** A budget's state used now: the most recently used goes last; one whose client reached a limit is kept through its window. */
  #touch (key: string, tracked: Tracked, limits: readonly Limit[], entries: readonly Entry[], now: number): void {
    this.#logs.delete(key)
    this.#logs.set(key, tracked)
    limits.forEach((limit, i) => {
      if (entries[i]!.count >= limit.burst) tracked.keepUntil = Math.max(tracked.keepUntil ?? 0, now + limit.windowMs)
    })
  }

  /** Counts `cost` on the calendar quotas at `key` (`entries`: what quotasFit said of them). */
  #countQuotas (key: string, quotas: readonly Quota[], entries: readonly Entry[], now: number, cost: number): void {
    this.#touch(key, quotasCount(this.#live(this.#logs, key, now), quotas, now, entries, cost), quotas, entries, now)
  }

  /** A denial's strike: the ban it starts, if it is the threshold's; its length climbs the ladder with each ban the identity earns before the last is forgotten. */
  strike (keys: DecideInput['keys'], ban: BanPolicy, now: number, strikeWindow: number): { duration: number, offence: number } | undefined {
    const strikes = this.#count(keys.strikes, now, now + strikeWindow, false)
    if ((strikes.value as number) < ban.threshold) return undefined
    const { ladder } = ban
    let offence = 1
    let duration = ladder[0]!
    if (ladder.length > 1) {
      const offences = this.#count(keys.offences, now, 0, true)
      offence = offences.value as number
      duration = ladder[Math.min(offence, ladder.length) - 1]!
      offences.expiresAt = now + duration + ban.forgetMs
    }
    this.#marks.delete(keys.strikes)
    this.#makeRoom(now)
    this.#marks.set(keys.banned, { value: 1, expiresAt: now + duration })
    return { duration, offence }
  }

  settle ({ keys, limits, algorithm, at, cost = 1, final }: SettleInput): void {
    const now = this.#now()
    // An override that names no limit settles nothing (as a decision, it is an error).
    const under = limitsUnder(this.#live(this.#marks, keys.override, now)?.value as string | undefined, limits, now)
    if (under === undefined) return
    const { stepLimits, quotas } = under
    // A token bucket that had refilled, charged more: stored anew, as the script's HSET makes the key.
    const made = stepLimits.length === 0 ? undefined : STEPS[algorithm].settle(this.#live(this.#logs, keys.log, now), stepLimits, at, now, cost, final)
    if (made !== undefined && this.#makeRoom(now)) this.#logs.set(keys.log, made)
    if (quotas.length > 0) quotasSettle(this.#live(this.#logs, keys.quota, now), quotas, Math.max(largest(stepLimits), largest(quotas)), at, now, cost, final)
  }

  /** Adds one to the counter at `key`, made with `expiresAt` when there is none (a strike, an offence). */
  #count (key: string, now: number, expiresAt: number, throughExpiry: boolean): Mark {
    let mark = this.#live(this.#marks, key, now, throughExpiry)
    if (mark === undefined) {
      // Made whether or not room can be made: a strike or an offence is not dropped for a newcomer's sake.
      this.#makeRoom(now)
      this.#marks.set(key, mark = { value: 0, expiresAt })
    }
    mark.value = (mark.value as number) + 1
    return mark
  }

  /** The ms left of the ban at `bannedKey` (0: none), read as the scripts read it (`PTTL > 0`). */
  banLeft (bannedKey: string, now: number): number {
    const banned = this.#live(this.#marks, bannedKey, now, false)
    return banned === undefined ? 0 : banned.expiresAt - now
  }

  async setBan (bannedKey: string, ms: number): Promise<void> {
    this.#marks.set(bannedKey, { value: 1, expiresAt: this.#now() + ms })
  }

  async setValue (key: string, value: string, ms: number | null): Promise<void> {
    this.#marks.set(key, { value, expiresAt: ms === null ? Infinity : this.#now() + ms })
  }

  /** Every ban's mark, read in one pass (the table holds at most `cache` keys and the bans beyond them). */
  async bans (nameSpace: string, limit: number): Promise<Ban[]> {
    const now = this.#now()
    const found: Ban[] = []
    for (const [key, mark] of this.#marks) {
      if (key.startsWith(nameSpace) && isBanKey(key) && mark.expiresAt > now) found.push({ key, retryMs: mark.expiresAt - now })
    }
    return found.sort((a, b) => b.retryMs - a.retryMs).slice(0, limit)
  }

  async unban (keys: readonly string[]): Promise<void> {
    await this.delete(keys)
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
    this.leases.sweep(now)
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

  /** The key a budget's state is counted under: its own, or, when no room can be made, a shared overflow log. */
  #place (log: string, now: number): string {
    if (this.#logs.has(log) || this.#makeRoom(now)) return log
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
  #makeRoom (now: number): boolean {
    if (this.size < this.#cache) return true
    if (now - this.#lastFullSweep >= 1000) {
      this.#lastFullSweep = now
      this.sweep()
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
