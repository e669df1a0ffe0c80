import { DEFAULT_ALGORITHM, STEPS, largest, longest, quotasCount, quotasFit, quotasSettle } from '../algorithms/index.js'
import type { Algorithm, Counted, Entry, Limit, Quota } from '../algorithms/index.js'
import { bannedDecision } from './decisions.js'
import { decision, exceeded, wait } from './memory-decisions.js'
import { limitsUnder } from './overrides.js'
import { MemoryTable } from './memory-table.js'
import type { Tracked } from './memory-table.js'
import { isBanKey } from './key-names.js'
import type { DecideInput, Decision, SettleInput, Store, WaitPolicy } from './store.js'
import type { Ban } from './ban-index.js'
import type { BanPolicy } from '../types.js'
import { MemoryLeases } from './memory-leases.js'

// The in-process twin of the scripts in `lua/`: the same steps on the same key names, over `Date.now()`, in a
// bounded table of keys (./memory-table.ts). Each algorithm's counting is a `Step` in `lib/algorithms/`; the bans,
// overrides, waits and strikes around it are here, in the steps of lua/decide.lua's `decide()`, and a decision is
// built typed (./memory-decisions.ts), never as the scripts' reply.

/**
 * One request as the twin decides it, lua/decide.lua's request record: what it asks, its limits under any override
 * (those the algorithm counts, the calendar quotas, and all of them in the reply's order) and the clock.
 */
interface Asked {
  readonly keys: DecideInput['keys']
  readonly ban: BanPolicy | null
  readonly peek: boolean
  readonly algorithm: Algorithm
  readonly overLimit: DecideInput['overLimit']
  readonly cost: number
  readonly wait: WaitPolicy | undefined
  readonly stepLimits: readonly Limit[]
  readonly quotas: readonly Quota[]
  readonly limits: readonly Limit[]
  readonly now: number
}

/**
 * What the quotas (`fits`, at `quotaKey`, their `quotaEntries`) and the algorithm (`counted`, its state `tracked`)
 * said of a request; `entries`, every limit's; `own`: counted on the identity's own keys, not an overflow log.
 */
interface Count {
  readonly counted: Counted
  readonly fits: boolean
  readonly quotaKey: string
  readonly quotaEntries: Entry[]
  readonly tracked: Tracked | undefined
  readonly entries: Entry[]
  readonly own: boolean
}

/** A denial before its strike: its wait, the window its strike counts in, every limit's entry, and `own` (as `Count`'s). */
interface Denial {
  readonly retry: number
  readonly strikeWindow: number
  readonly entries: readonly Entry[]
  readonly own: boolean
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

export class MemoryStore implements Store {
  readonly #table: MemoryTable
  readonly #now: () => number
  readonly #timer: NodeJS.Timeout
  /** `concurrency`'s leases, in process. */
  readonly leases: MemoryLeases

  constructor ({ cache, now = Date.now, sweepInterval = 30_000, onFull }: MemoryStoreOptions) {
    this.#table = new MemoryTable(cache, onFull, () => this.sweep())
    this.#now = now
    this.leases = new MemoryLeases(this, now)
    this.#timer = setInterval(() => this.sweep(), sweepInterval).unref()
  }

  /** Keys tracked now (expired ones included until the next sweep). */
  get size (): number {
    return this.#table.size
  }

  // A decision, in the steps of lua/decide.lua's `decide()`: the ban, the override, the count (or the wait, or the
  // hold over the limit), the strike.
  decide (input: DecideInput): Decision {
    const now = this.#now()
    // A banned client is answered first, before the clock is read in Redis: no limits (the budget's own) and no time.
    const banned = this.#table.mark(input.keys.banned, now, false)
    if (banned !== undefined) return bannedDecision(input.limits, banned.expiresAt - now)
    const asked = this.#asked(input, now)
    const { cost, limits } = asked
    // A request that costs more than a limit holds never passes: refused as it is, nothing counted, no strike.
    if (cost > 1 && limits.some(limit => cost > limit.burst)) return decision('limited', 0, 0, now, limits, this.#look(asked))
    const answer = this.#heldOrCounted(asked)
    return 'status' in answer ? answer : this.#struck(asked, answer)
  }

  /** The request under the identity's override (lua/decide.lua's `overridden`): one that names no limit is its error. */
  #asked ({ keys, limits: given, ban, peek, algorithm = DEFAULT_ALGORITHM, overLimit, cost = 1, wait }: DecideInput, now: number): Asked {
    const under = limitsUnder(this.#table.mark(keys.override, now)?.value as string | undefined, given, now)
    if (under === undefined) throw new Error(`ERR rate-guard: the override at ${keys.override} names no limit`)
    const { stepLimits, quotas } = under
    const limits = quotas.length === 0 ? stepLimits : [...stepLimits, ...quotas]
    return { keys, ban, peek, algorithm, overLimit, cost, wait, stepLimits, quotas, limits, now }
  }

  /**
   * Over the limit (see `lua/decide.lua`): while the over-limit key lives, a decision is held off without counting
   * on the algorithm, and a peek sees the client exceeded for what is left of a window since then. Else counted.
   */
  #heldOrCounted (asked: Asked): Decision | Denial {
    const { keys, limits, overLimit, peek, now } = asked
    const held = overLimit === undefined ? undefined : this.#table.mark(keys.backoff, now, false)
    if (held === undefined) return this.#countedOrWaits(asked)
    const longestMs = longest(limits)
    const doubles = overLimit === 'backoff'
    if (!peek) {
      held.value = (held.value as number) + 1
      const retry = wait(longestMs, held.value, doubles)
      held.expiresAt = now + retry
      return { retry, strikeWindow: longestMs, entries: exceeded(limits, retry, 0), own: true }
    }
    const left = longestMs - (wait(longestMs, held.value as number, doubles) - (held.expiresAt - now))
    return left > 0 ? decision('limited', left, 0, now, limits, exceeded(limits, left, 1)) : this.#countedOrWaits(asked)
  }

  /** The request counted on the quotas and the algorithm: allowed, or let through after a wait, or denied. */
  #countedOrWaits (asked: Asked): Decision | Denial {
    const { quotas, limits, peek, now, cost } = asked
    const count = this.#count(asked)
    const { fits, quotaKey, quotaEntries, entries, own } = count
    if (count.counted.allowed && fits) {
      if (quotas.length > 0 && !peek) this.#countQuotas(quotaKey, quotas, quotaEntries, now, cost)
      return decision('allowed', 0, 0, now, limits, entries)
    }
    // Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
    let retry = 0
    let strikeWindow = 0
    entries.forEach((entry, i) => {
      if (entry.retry > retry) [retry, strikeWindow] = [entry.retry, limits[i]!.windowMs]
    })
    if (this.#reserved(asked, count, retry)) {
      const waited = quotas.length === 0 ? count.counted.entries : [...count.counted.entries, ...quotaEntries]
      return decision('waits', retry, 0, now, limits, waited)
    }
    return this.#heldOff(asked, { retry, strikeWindow, entries, own })
  }

  /**
   * What the quotas and the algorithm say of the request, counting it when every one has room (a peek stores
   * nothing, so needs no room). The quotas first: one full, the algorithm is only asked.
   */
  #count ({ keys, algorithm, stepLimits, quotas, peek, cost, now }: Asked): Count {
    const quotaKey = quotas.length === 0 || peek ? keys.quota : this.#table.place(keys.quota, now)
    const quotaEntries: Entry[] = []
    const fits = quotas.length === 0 || quotasFit(this.#table.log(quotaKey, now), quotas, now, cost, quotaEntries)
    const stateKey = peek || stepLimits.length === 0 ? keys.log : this.#table.place(keys.log, now)
    const live = stepLimits.length === 0 ? undefined : this.#table.log(stateKey, now) as Tracked | undefined
    const counted: Counted = stepLimits.length === 0
      ? { allowed: true, entries: [] }
      : STEPS[algorithm].count(live, stepLimits, now, peek || !fits, cost)
    const entries = quotas.length === 0 ? counted.entries : [...counted.entries, ...quotaEntries]
    const tracked: Tracked | undefined = counted.state ?? live
    if (tracked !== undefined && !peek) this.#table.touch(stateKey, tracked, stepLimits, entries, now)
    // Counted on the identity's own log, not on an overflow log shared by strangers.
    const own = stateKey === keys.log && quotaKey === keys.quota
    return { counted, fits, quotaKey, quotaEntries, tracked, entries, own }
  }

  /**
   * Whether a denied request is allowed within maxWait: it waits, counted at the end of its wait, unless its queue
   * is full (not on a log strangers share, a peek, a cost no wait lets through, or a full quota: a quota with room
   * counts it now).
   */
  #reserved ({ algorithm, stepLimits, quotas, peek, cost, wait: waits, now }: Asked, count: Count, retry: number): boolean {
    const { counted, fits, quotaKey, quotaEntries, tracked, own } = count
    if (waits === undefined || peek || !own || !fits || retry <= 0 || retry > waits.maxMs) return false
    if (!STEPS[algorithm].reserve(tracked, stepLimits, now, cost, retry, waits.maxQueue, counted.entries)) return false
    // Kept while a request waits on it, and through its window after.
    tracked!.keepUntil = Math.max(tracked!.keepUntil ?? 0, now + retry + longest(stepLimits))
    if (quotas.length > 0) this.#countQuotas(quotaKey, quotas, quotaEntries, now, cost)
    return true
  }

  /** Over the limit: a denial holds its client off for the longest window, from now (not strangers sharing a log). */
  #heldOff ({ keys, limits, overLimit, peek, now }: Asked, denial: Denial): Denial {
    if (overLimit === undefined || peek || !denial.own) return denial
    const retry = wait(longest(limits), 1, false)
    this.#table.makeRoom(now)
    this.#table.setMark(keys.backoff, { value: 1, expiresAt: now + retry })
    return { ...denial, retry, entries: exceeded(limits, retry, 0) }
  }

  /** A denial's answer: limited, or banned when its strike starts a ban (never a peek's, nor on a log strangers share). */
  #struck ({ keys, ban, peek, limits, now }: Asked, { retry, strikeWindow, entries, own }: Denial): Decision {
    // An overflow log is shared by strangers: it limits them, but never strikes or bans any one of them.
    const started = peek || ban === null || !own ? undefined : this.strike(keys, ban, now, strikeWindow)
    if (started === undefined) return decision('limited', retry, 0, now, limits, entries)
    return decision('banned', started.duration, started.offence, now, limits, entries)
  }

  /** What every limit says of one unit more, counting nothing: the algorithm's entries, then the quotas'. */
  #look ({ keys, algorithm, stepLimits, quotas, now }: Asked): Entry[] {
    const entries = stepLimits.length === 0 ? [] : STEPS[algorithm].count(this.#table.log(keys.log, now), stepLimits, now, true, 1).entries
    if (quotas.length > 0) quotasFit(this.#table.log(keys.quota, now), quotas, now, 1, entries)
    return entries
  }

  /** Counts `cost` on the calendar quotas at `key` (`entries`: what quotasFit said of them). */
  #countQuotas (key: string, quotas: readonly Quota[], entries: readonly Entry[], now: number, cost: number): void {
    this.#table.touch(key, quotasCount(this.#table.log(key, now), quotas, now, entries, cost), quotas, entries, now)
  }

  /**
   * A denial's strike: the ban it starts, if it is the threshold's; its length climbs the ladder with each ban
   * the identity earns before the last is forgotten.
   */
  strike (keys: DecideInput['keys'], ban: BanPolicy, now: number, strikeWindow: number): { duration: number, offence: number } | undefined {
    const strikes = this.#table.increment(keys.strikes, now, now + strikeWindow, false)
    if ((strikes.value as number) < ban.threshold) return undefined
    const { ladder } = ban
    let offence = 1
    let duration = ladder[0]!
    if (ladder.length > 1) {
      const offences = this.#table.increment(keys.offences, now, 0, true)
      offence = offences.value as number
      duration = ladder[Math.min(offence, ladder.length) - 1]!
      offences.expiresAt = now + duration + ban.forgetMs
    }
    this.#table.deleteMark(keys.strikes)
    this.#table.makeRoom(now)
    this.#table.setMark(keys.banned, { value: 1, expiresAt: now + duration })
    return { duration, offence }
  }

  settle ({ keys, limits, algorithm, at, cost = 1, final }: SettleInput): void {
    const now = this.#now()
    // An override that names no limit settles nothing (as a decision, it is an error).
    const under = limitsUnder(this.#table.mark(keys.override, now)?.value as string | undefined, limits, now)
    if (under === undefined) return
    const { stepLimits, quotas } = under
    // A token bucket that had refilled, charged more: stored anew, as the script's HSET makes the key.
    const step = STEPS[algorithm]
    const made = stepLimits.length === 0 ? undefined : step.settle(this.#table.log(keys.log, now), stepLimits, at, now, cost, final)
    if (made !== undefined && this.#table.makeRoom(now)) this.#table.setLog(keys.log, made)
    const most = Math.max(largest(stepLimits), largest(quotas))
    if (quotas.length > 0) quotasSettle(this.#table.log(keys.quota, now), quotas, most, at, now, cost, final)
  }

  /** The ms left of the ban at `bannedKey` (0: none), read as the scripts read it (`PTTL > 0`). */
  banLeft (bannedKey: string, now: number): number {
    const banned = this.#table.mark(bannedKey, now, false)
    return banned === undefined ? 0 : banned.expiresAt - now
  }

  async setBan (bannedKey: string, ms: number): Promise<void> {
    this.#table.setMark(bannedKey, { value: 1, expiresAt: this.#now() + ms })
  }

  async setValue (key: string, value: string, ms: number | null): Promise<void> {
    this.#table.setMark(key, { value, expiresAt: ms === null ? Infinity : this.#now() + ms })
  }

  /** Every ban's mark, read in one pass (the table holds at most `cache` keys and the bans beyond them). */
  async bans (nameSpace: string, limit: number): Promise<Ban[]> {
    const now = this.#now()
    const found: Ban[] = []
    for (const [key, mark] of this.#table.marks()) {
      if (key.startsWith(nameSpace) && isBanKey(key) && mark.expiresAt > now) found.push({ key, retryMs: mark.expiresAt - now })
    }
    return found.sort((a, b) => b.retryMs - a.retryMs).slice(0, limit)
  }

  async unban (keys: readonly string[]): Promise<void> {
    await this.delete(keys)
  }

  async delete (keys: readonly string[]): Promise<void> {
    for (const key of keys) this.#table.delete(key)
  }

  async close (): Promise<void> {
    clearInterval(this.#timer)
    this.#table.clear()
  }

  /** Drops every expired key. */
  sweep (): void {
    const now = this.#now()
    this.#table.sweep(now)
    this.leases.sweep(now)
  }
}
