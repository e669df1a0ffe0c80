import { randomUUID } from 'node:crypto'
import type { Limit } from './algorithms/index.js'
import { Oldest } from './oldest.js'
import { bannedDecision } from './stores/decisions.js'
import type { Decision } from './stores/store.js'

// Answers Redis gave that nothing but time can change, held in process until they end, so a client refused
// again costs no Redis round trip:
// - a ban ends when it expires (known from Redis's answer) or when an operator lifts it;
// - a denial of a budget whose denials count no strike (no ban policy), whose counts are never given back (no
//   shared budget) and whose limits are the same for every request: other requests cannot free the client's
//   place before the time Redis named, since every one of them is denied too and denied requests write
//   nothing. Only one limit's denials are held, and only when its count cannot fall before then, so the
//   headers of a held answer are the ones Redis would give.
// An operator's change (unban, ban, reset, override) is published on `<nameSpace>changed` with the keys it
// touched, and every instance forgets what it held for them. While this instance is not subscribed
// (starting, reconnecting) it could miss a change, so it holds nothing then and asks Redis. A reply may
// reach the process after a change it predates (Redis answered before the operator's change, the change's
// message came in first): so each question carries the count of changes heard when it was asked
// (`changes`), and an answer is held only when no change was heard since.
// Held times run from when the question was sent, so a held answer never outlives Redis's. Holding stops
// after `MAX_HELD` at most, but what a held answer reports does not: its wait is the one Redis named,
// counted down to the moment it is given.

/** Longest an answer is held in process: past it Redis is asked again (a bound on any missed change). */
export const MAX_HELD = 60_000

/** A ban held: until when it is held, and when it ends. */
interface Ban {
  readonly until: number
  readonly ends: number
}

/** A denial held: until when, when its wait ends, and Redis's answer as it was when the question was sent. */
interface Denial extends Ban {
  readonly since: number
  readonly decision: Decision
}

export class HeldAnswers {
  /** Names this instance in the changes it publishes, so it does not forget its own twice (see `announceChanges`). */
  readonly id = randomUUID()
  readonly #bans = new Map<string, Ban>()
  readonly #denials = new Map<string, Denial>()
  readonly #oldestBan = new Oldest(this.#bans)
  readonly #oldestDenial = new Oldest(this.#denials)
  readonly #size: number
  readonly #now: () => number
  #listening = false
  #changes = 0

  /** `size`: most bans, and most denials, held at once. */
  constructor (size: number, now: () => number = Date.now) {
    this.#size = size
    this.#now = now
  }

  /** Changes heard so far (and subscriptions lost or made): read when a question is asked, handed back with its answer. */
  get changes (): number {
    return this.#changes
  }

  /** The ban held on `bannedKey`, else a denial held on budget state `stateKey`, as Redis would answer it now. */
  answer (bannedKey: string, stateKey: string, limits: readonly Limit[]): Decision | undefined {
    // Most requests find nothing held: no clock read, no lookup then.
    if (!this.#listening || (this.#bans.size === 0 && this.#denials.size === 0)) return undefined
    const now = this.#now()
    const ban = live(this.#bans, bannedKey, now)
    if (ban !== undefined) return bannedDecision(limits, ban.ends - now)
    const denial = live(this.#denials, stateKey, now)
    if (denial === undefined) return undefined
    // Counts stand still until the denial ends; only the times run down.
    const { decision, since, ends } = denial
    const elapsed = now - since
    return {
      ...decision,
      resetMs: decision.resetMs - elapsed,
      retryMs: ends - now,
      limits: decision.limits.map(limit => ({ ...limit, resetMs: limit.resetMs - elapsed })),
      at: 0,
      member: ''
    }
  }

  /** Redis found `bannedKey` banned, in an answer to a question sent at `since`, asked when `changes` were heard. */
  banned (bannedKey: string, retryMs: number, since: number, changes: number): void {
    if (!this.#listening || changes !== this.#changes) return
    const held = { until: since + Math.min(retryMs, MAX_HELD), ends: since + retryMs }
    put(this.#bans, this.#oldestBan, this.#size, bannedKey, held, this.#now())
  }

  /**
   * Redis denied a request on budget state `stateKey` under `limits` (a budget whose denials only time can
   * change), in an answer to a question sent at `since`, asked when `changes` were heard: held when its one
   * limit's count cannot fall before the wait ends, and the limit is the budget's (no override with other
   * limits).
   */
  denied (stateKey: string, limits: readonly Limit[], decision: Decision, since: number, changes: number): void {
    if (!this.#listening || changes !== this.#changes || limits.length !== 1 || decision.limits.length !== 1) return
    const [limit] = limits
    if (decision.limit !== limit!.burst || decision.windowMs !== limit!.windowMs || decision.resetMs < decision.retryMs) return
    const held = { until: since + Math.min(decision.retryMs, MAX_HELD), ends: since + decision.retryMs, since, decision }
    put(this.#denials, this.#oldestDenial, this.#size, stateKey, held, this.#now())
  }

  /** An operator changed these keys (here or on another instance). */
  forget (keys: readonly string[]): void {
    this.#changes++
    for (const key of keys) {
      this.#bans.delete(key)
      this.#denials.delete(key)
    }
  }

  /** Whether changes reach this instance: only then is anything held. */
  listening (on: boolean): void {
    this.#changes++
    this.#listening = on
    if (!on) {
      this.#bans.clear()
      this.#denials.clear()
    }
  }
}

/** What `map` holds at `key` until a time after `now`; an ended one is dropped. */
function live<T extends Ban> (map: Map<string, T>, key: string, now: number): T | undefined {
  // Nothing held: `key` (a string joined per request) is not looked up, which would flatten and hash it.
  if (map.size === 0) return undefined
  const held = map.get(key)
  if (held === undefined || held.until > now) return held
  map.delete(key)
  return undefined
}

/**
 * Holds `value` at `key`, as the newest entry; a full map drops its oldest (ended or not: Redis is asked
 * again). Constant time, however many identities churn through it (see `Oldest`); an ended entry is dropped
 * when read.
 */
function put<T extends Ban> (map: Map<string, T>, oldest: Oldest<string, T>, size: number, key: string, value: T, now: number): void {
  if (value.until <= now) return
  map.delete(key)
  if (map.size >= size) map.delete(oldest.next()![0])
  map.set(key, value)
}
