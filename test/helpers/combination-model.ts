// The model test/combination.test.ts holds the plugin to: what each client may have had from each enforcing
// route in the run (every window is an hour, longer than a run, so nothing leaves a window), and the rules
// every answer must keep:
//
//   admissions    an enforcing route runs a request only while the units it admitted to that client, plus
//                 the request's cost, stay within its max; and never for a client an enforced ban holds.
//   refusals      a shadow route never refuses; an enforcing route answers 429 only when the client's own
//                 count there leaves no room for the request's cost, 403 only under a ban an enforcing route
//                 started (/ban's policy, or /quota's: their denials strike toward one ban per client).
//   enforcement   no request to an enforcing route goes through unenforced (`X-RateLimit-Enforced: false`)
//                 while Redis is up: nothing the client sends (a failing cost, a huge settlement, an abort)
//                 turns a limit off; under `failMode: 'closed'`, none while it fails either.
//   unavailable   a 503 only under `failMode: 'closed'` while Redis is failing.
//   answers       no other error: a 500 only when the handler was asked for one.
//   slots         on a route with `concurrency`, never more than its max units of a client's requests running
//                 at once (the app's own count of running handlers); a request its rate limit allowed is
//                 refused in flight (429 FST_RATE_GUARD_TOO_MANY_IN_FLIGHT, Retry-After: 1; shadow mode: let
//                 through, its headers the slots') exactly when the client's slots there are full.
//
// Redis fails on some steps (the test stops it, then starts it again with its data): while it does,
// `failMode` decides (`'open'`: nothing is counted; `'local'`: the in-process twin counts, apart); then Redis
// counts on from where it was. Bans and denials held in process are answered whoever counts: a 403 or 429
// is also justified by one the client earned in the other scope.
//
// A request's units: its cost (a failing cost function counts 1), until it settles: to the amount the handler
// settled at when the plugin took it (one past the limit may be capped at it: the same for what comes after,
// nothing more fits either way; one refused leaves the cost), to 0 when the route's own policy gives it back (a failed response under
// skipFailedRequests, countWhen false, an abort before the handler under refundAborted). An abort after the
// handler started gives nothing back. The model keeps two sums per client and route: what the client had
// (`lower`: work the app did) and what the plugin may count (`upper`: also requests counted whose handler
// never ran); admissions are held to the first, refusals justified by the second.
//
// Slots (`concurrency`): a request held open (`x-hold`) holds its cost in slots where it was decided: Redis's,
// the in-process twin's under `failMode: 'local'` while Redis fails (apart from Redis's, as counts are), or
// none (`'open'`). Its response, sent or aborted, frees them; one whose release Redis could not hear (it was
// failing) may still count there until its lease ends, longer than a run: refusals may count it, admissions
// may not. A request refused in flight, or costing more than the slots' max, counts nothing on the rate limit
// (the plugin gives it back); on /ban, a refusal in flight strikes toward the ban like one for the count.
import type { FailMode } from '../../lib/index.js'
import { BAN_THRESHOLD, BANNING, ROUTES } from './combination-app.js'
import type { Path, SettleOutcome, Started } from './combination-app.js'

const IN_FLIGHT = 'FST_RATE_GUARD_TOO_MANY_IN_FLIGHT'
const TOO_COSTLY = 'FST_RATE_GUARD_TOO_COSTLY'

export const INVARIANTS = {
  admissions: 'an enforcing route admits no more units per client than its max, and nothing under an enforced ban',
  refusals: 'a shadow route never refuses; an enforcing route refuses only for its own count (429) or an enforced ban (403)',
  enforcement: 'no request to an enforcing route goes unenforced while Redis is up (nor at all under failMode closed)',
  unavailable: 'a 503 only under failMode closed while Redis fails',
  answers: 'every answer is one the app or the limiter gives (200, 500 asked for, 403, 429, 503)',
  slots: 'no more than concurrency.max units of a client\'s requests run at once on an enforcing route; refused in flight exactly when the slots are full'
} as const
export type Invariant = keyof typeof INVARIANTS

/** A request the test sends, and what the model makes of it. */
export interface Step {
  readonly client: string
  readonly path: Path
  /** Its units: the cost it names (a failing cost function's: 1). */
  readonly cost: number
  /** How it ends: answered, hung up once its handler started, or hung up before (its body never sent). */
  readonly ends: 'answered' | 'after-handler' | 'before-handler'
  /** The route's policy gives it back once answered (a failed response under skipFailedRequests, countWhen false). */
  readonly givenBack: boolean
  /** The amount the handler settles at (`x-settle`), if any. */
  readonly settle: number | undefined
  /** Held open in its handler (`x-hold`) until a later step lets it finish or hangs it up. */
  readonly hold: boolean
  readonly text: string
}

/** What the test saw of a step. */
export interface Seen {
  /** The answer's status; null when it was hung up unanswered. */
  readonly status: number | null
  /** The handler started. */
  readonly ran: boolean
  /** The plugin's decision let it on (for a request hung up before its handler, whose decision was made). */
  readonly passed: boolean
  readonly unenforced: boolean
  /** What came of the handler's settle. */
  readonly settled: SettleOutcome | undefined
  /** The body of an answer that is an error of the server's (5xx), for the report. */
  readonly note?: string
  /** Its handler is running, held open (`x-hold`): its status is null until it ends. */
  readonly held?: boolean
  /** What its handler saw as it started. */
  readonly entry?: Started
  /** The error code it was refused with (its body, as `@fastify/rate-limit`'s, has none), and its headers. */
  readonly code?: string
  readonly headers?: { readonly retryAfter: string | undefined, readonly limit: string | undefined, readonly remaining: string | undefined }
}

/** A request held open, and the slots it holds: in which scope, or none. */
interface Holding {
  readonly path: Path
  readonly client: string
  readonly units: number
  readonly scope: string
  readonly slotted: boolean
}

interface Entry {
  readonly lower: number
  readonly upper: number
}

export class Model {
  readonly #failMode: FailMode
  /** Per scope (what counts now: Redis, or the in-process twin while it fails), per route and client. */
  readonly #ledgers = new Map<string, Entry[]>()
  readonly #denials = new Map<string, number>()
  readonly #banned = new Set<string>()
  /** Clients ever banned, and routes a client was ever refused on for its count, in any scope: held in process, such answers may be given from another. */
  readonly #everBanned = new Set<string>()
  readonly #everOver = new Set<string>()
  /** The requests held open, by the step that sent them. */
  readonly #holding = new Map<string, Holding>()
  /** Per route and client, units given back while Redis failed: their leases may still count there. */
  readonly #stuck = new Map<string, number>()
  readonly violations = new Map<Invariant, string[]>()
  /** What the traffic reached, so a fixed seed can be held to reaching each. */
  readonly reached = new Set<string>()
  #redisDown = false

  constructor (failMode: FailMode) {
    this.#failMode = failMode
  }

  /** Redis fails from now on (the test stopped it), or is back (started again, with its data). */
  redisFails (down: boolean): void {
    this.#redisDown = down
  }

  /** What counts now: Redis, or (`failMode: 'local'` while Redis fails) the in-process twin; or nothing. */
  get #scope (): string {
    if (!this.#redisDown) return 'redis'
    return this.#failMode === 'local' ? 'local' : 'nothing'
  }

  #fail (invariant: Invariant, line: string): void {
    const list = this.violations.get(invariant) ?? []
    list.push(line)
    this.violations.set(invariant, list)
  }

  /** Checks one answer against the invariants, then records what it changed. */
  observe (step: Step, seen: Seen, where: string): void {
    const fail = (invariant: Invariant, why: string): void => {
      this.#fail(invariant, `${where}: ${step.text} -> ${seen.status ?? (seen.held === true ? 'held' : 'hung up')}: ${why}${seen.note === undefined ? '' : ` (${seen.note})`}`)
    }
    const { path, client, cost } = step
    const route = ROUTES[path]
    const { status } = seen
    const failing = this.#redisDown
    const concurrency: number | null = route.concurrency
    const hold = (scope: string, slotted: boolean): void => {
      if (seen.held === true) this.#holding.set(where, { path, client, units: cost, scope, slotted })
    }
    if (status === 503) {
      if (!(this.#failMode === 'closed' && failing)) fail('unavailable', failing ? `failMode ${this.#failMode}` : 'Redis is up')
      else this.reached.add('503 while Redis fails')
    }
    if (status !== null && ![200, 403, 429, 503].includes(status) && !(status === 500 && seen.ran)) fail('answers', `status ${status}`)
    // While Redis fails, failMode 'open' lets requests through counted nowhere, by design; 'closed' lets none.
    const scope = this.#scope
    const decided = scope !== 'nothing'
    const slots = this.#slots(scope, path, client)
    if (seen.code === IN_FLIGHT) {
      // A second to wait, and the headers of the limit it met: its slots, and the units free in them (fewer than
      // its cost: 0 for a request of one unit, as a rate limit's refusal says).
      const { retryAfter, limit, remaining } = seen.headers ?? {}
      const free = Number(remaining)
      if (concurrency === null || status !== 429 || retryAfter !== '1' || limit !== String(concurrency) || !(free < cost && free >= concurrency - slots.upper && free <= concurrency - slots.lower)) {
        fail('slots', `refused in flight (status ${status}, Retry-After ${retryAfter}, limit ${limit}, remaining ${remaining}) on a route whose concurrency is ${concurrency}`)
      }
    }
    if (route.shadow) {
      if (status === 403 || status === 429) fail('refusals', 'a shadow route refused')
      if (concurrency === null || !decided || !seen.ran) return hold(scope, false)
      // Decided as enforce would, and let through: a refusal in flight shows the slots' limit in its headers.
      const refused = seen.entry?.limit === String(concurrency)
      if (refused && slots.upper + cost <= concurrency) fail('slots', `let through as in flight with ${slots.upper} of ${concurrency} slot(s) in use`)
      if (!refused && slots.lower + cost > concurrency) fail('slots', `took its slot beside ${slots.lower} of ${concurrency} in use`)
      if (refused) this.reached.add('let through in flight (shadow)')
      return hold(scope, !refused)
    }
    if (seen.unenforced || seen.entry?.unenforced === true) {
      if (!(this.#failMode === 'open' && failing)) fail('enforcement', 'X-RateLimit-Enforced: false')
      else this.reached.add('unenforced while Redis fails')
    }
    if (!decided && (seen.ran || seen.passed)) {
      if (this.#failMode === 'closed') fail('enforcement', 'let through while Redis fails, under failMode closed')
      return hold(scope, false)
    }

    const key = `${path} ${client}`
    const ledger = this.#ledgers.get(`${scope} ${key}`) ?? []
    this.#ledgers.set(`${scope} ${key}`, ledger)
    const lower = ledger.reduce((sum, e) => sum + e.lower, 0)
    const upper = ledger.reduce((sum, e) => sum + e.upper, 0)
    const banned = this.#banned.has(`${scope} ${client}`)
    const denials = this.#denials.get(`${scope} ${client}`) ?? 0
    const over = upper + cost > route.max
    // Under concurrency, a request its rate limit allows then takes its slots, and is refused when they are full.
    const full = concurrency !== null && !over && cost <= concurrency && slots.upper + cost > concurrency
    const admitted = seen.ran || seen.passed
    // A refusal for its count or in flight on a route whose policy bans is a denial, a strike toward the
    // client's ban (when a store decided it); not a request costing more than the limit holds, refused as it is.
    const denied = decided && BANNING.includes(path) && !banned && cost <= route.max && (over || (full && !admitted))
    const banStarts = denied && denials + 1 >= BAN_THRESHOLD
    if (admitted) {
      this.reached.add(`admitted ${path}`)
      if (scope === 'local') this.reached.add('admitted in process while Redis fails')
      if (banned) fail('admissions', 'admitted under an enforced ban')
      else if (lower + cost > route.max) fail('admissions', `admitted ${cost} unit(s) over ${lower} already admitted, max ${route.max}`)
      if (concurrency !== null && seen.entry !== undefined) {
        if (slots.lower + cost > concurrency) fail('slots', `admitted ${cost} unit(s) beside ${slots.lower} of ${concurrency} in flight`)
        // The app's count, less the requests whose slots are another scope's (or none: failMode 'open').
        const elsewhere = this.#elsewhere(scope, path, client)
        if (seen.entry.running - elsewhere > concurrency) fail('slots', `${seen.entry.running} unit(s) of its client running at once (${elsewhere} on another scope's slots), max ${concurrency}`)
        if (slots.lower > 0) this.reached.add('admitted beside one in flight')
      }
      ledger.push(this.#charge(step, seen))
      hold(scope, concurrency !== null)
    } else if (status === 429 && seen.code === IN_FLIGHT) {
      // Its rate limit allowed it (it decides first), then its slots were full.
      if (lower + cost > route.max) fail('slots', `refused in flight, though its rate limit (${lower} of ${route.max} counted) refuses it first`)
      else if (!full) fail('slots', `refused in flight with ${slots.upper} of ${concurrency} slot(s) in use and a cost of ${cost}`)
      else this.reached.add('refused in flight')
    } else if (status === 429 && seen.code === TOO_COSTLY && concurrency !== null && cost > concurrency) {
      // More units than its slots hold: it never fits, whatever is in flight, and waits for nothing.
      if (lower + cost > route.max) fail('slots', `refused as never fitting its slots, though its rate limit (${lower} of ${route.max} counted) refuses it first`)
      else if (seen.headers?.retryAfter !== undefined) fail('slots', `refused as never fitting its slots, with Retry-After ${seen.headers.retryAfter}`)
      else this.reached.add('too costly for its slots')
    } else if (status === 429) {
      if (!(banned || over || this.#everBanned.has(client) || this.#everOver.has(key))) fail('refusals', `429 with ${upper} of ${route.max} counted and a cost of ${cost}`)
      else this.reached.add('refused for its count')
      if (over) this.#everOver.add(key)
    } else if (status === 403) {
      if (!(banned || banStarts || this.#everBanned.has(client))) fail('refusals', `403 with no enforced ban (${denials} denials on /ban)`)
      else this.reached.add('refused under an enforced ban')
    }
    if (denied) {
      if (!over) this.reached.add('a refusal in flight struck toward a ban')
      this.#denials.set(`${scope} ${client}`, denials + 1)
      if (banStarts) {
        this.reached.add(`a ban started on ${path}`)
        this.#banned.add(`${scope} ${client}`)
        this.#everBanned.add(client)
      }
    }
  }

  /** A request held open ended: let finish (its answer `status`), or hung up; its slots are given back. */
  end (where: string, text: string, how: 'finished' | 'hung up', status: number | null): void {
    const holding = this.#holding.get(where)
    if (holding === undefined) return
    this.#holding.delete(where)
    if (how === 'finished' && status !== 200) this.#fail('answers', `${where}: ${text}, let finish -> ${status}`)
    if (!holding.slotted) return
    this.reached.add(`a slot freed: ${how}`)
    if (holding.scope === 'redis' && this.#redisDown) {
      // Given back to a Redis that cannot hear it: its lease ends later than the run, so it may still count.
      const key = `${holding.path} ${holding.client}`
      this.#stuck.set(key, (this.#stuck.get(key) ?? 0) + holding.units)
      this.reached.add('a slot given back while Redis fails')
    }
  }

  /** A client's slots on a route in `scope`: those its held requests hold, and (`upper`) those Redis may still count. */
  #slots (scope: string, path: Path, client: string): { lower: number, upper: number } {
    let lower = 0
    for (const held of this.#holding.values()) if (held.slotted && held.scope === scope && held.path === path && held.client === client) lower += held.units
    return { lower, upper: lower + (scope === 'redis' ? this.#stuck.get(`${path} ${client}`) ?? 0 : 0) }
  }

  /** The units of a client's requests running on a route that hold no slot in `scope` (another's, or none). */
  #elsewhere (scope: string, path: Path, client: string): number {
    let units = 0
    for (const held of this.#holding.values()) if (held.path === path && held.client === client && !(held.slotted && held.scope === scope)) units += held.units
    return units
  }

  /** What an admitted request is charged, once everything it started has finished. */
  #charge (step: Step, seen: Seen): Entry {
    if (!seen.ran) {
      // Counted, then hung up before its handler: refundAborted gives it back (no work was done); else it stands.
      this.reached.add('hung up before the handler')
      return { lower: 0, upper: step.path === '/abort' ? 0 : step.cost }
    }
    if (step.ends === 'after-handler') this.reached.add('hung up after the handler started')
    if (seen.settled === 'ok') {
      this.reached.add(`settled on ${step.path}`)
      return { lower: step.settle!, upper: step.settle! }
    }
    if (seen.settled !== undefined) this.reached.add('settle refused')
    if (step.givenBack && step.ends === 'answered') return { lower: 0, upper: 0 }
    return { lower: step.cost, upper: step.cost }
  }
}
