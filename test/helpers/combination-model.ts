// The model test/combination.test.ts holds the plugin to: what each client may have had from each enforcing
// route in the run (every window is an hour, longer than a run, so nothing leaves a window), and the rules
// every answer must keep:
//
//   admissions    an enforcing route runs a request only while the units it admitted to that client, plus
//                 the request's cost, stay within its max; and never for a client an enforced ban holds.
//   refusals      a shadow route never refuses; an enforcing route answers 429 only when the client's own
//                 count there leaves no room for the request's cost, 403 only under a ban an enforcing route
//                 started (/ban's policy).
//   enforcement   no request to an enforcing route goes through unenforced (`X-RateLimit-Enforced: false`)
//                 while Redis is up: nothing the client sends (a failing cost, a huge settlement, an abort)
//                 turns a limit off; under `failMode: 'closed'`, none while it fails either.
//   unavailable   a 503 only under `failMode: 'closed'` while Redis is failing.
//   answers       no other error: a 500 only when the handler was asked for one.
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
import type { FailMode } from '../../lib/index.js'
import { BAN_THRESHOLD, ROUTES } from './combination-app.js'
import type { Path, SettleOutcome } from './combination-app.js'

export const INVARIANTS = {
  admissions: 'an enforcing route admits no more units per client than its max, and nothing under an enforced ban',
  refusals: 'a shadow route never refuses; an enforcing route refuses only for its own count (429) or an enforced ban (403)',
  enforcement: 'no request to an enforcing route goes unenforced while Redis is up (nor at all under failMode closed)',
  unavailable: 'a 503 only under failMode closed while Redis fails',
  answers: 'every answer is one the app or the limiter gives (200, 500 asked for, 403, 429, 503)'
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

  /** Checks one answer against the invariants, then records what it changed. */
  observe (step: Step, seen: Seen, where: string): void {
    const fail = (invariant: Invariant, why: string): void => {
      const list = this.violations.get(invariant) ?? []
      list.push(`${where}: ${step.text} -> ${seen.status ?? 'hung up'}: ${why}${seen.note === undefined ? '' : ` (${seen.note})`}`)
      this.violations.set(invariant, list)
    }
    const { path, client, cost } = step
    const route = ROUTES[path]
    const { status } = seen
    const failing = this.#redisDown
    if (status === 503) {
      if (!(this.#failMode === 'closed' && failing)) fail('unavailable', failing ? `failMode ${this.#failMode}` : 'Redis is up')
      else this.reached.add('503 while Redis fails')
    }
    if (status !== null && ![200, 403, 429, 503].includes(status) && !(status === 500 && seen.ran)) fail('answers', `status ${status}`)
    if (route.shadow) {
      if (status === 403 || status === 429) fail('refusals', 'a shadow route refused')
      return
    }
    if (seen.unenforced) {
      if (!(this.#failMode === 'open' && failing)) fail('enforcement', 'X-RateLimit-Enforced: false')
      else this.reached.add('unenforced while Redis fails')
    }
    // While Redis fails, failMode 'open' lets requests through counted nowhere, by design; 'closed' lets none.
    const scope = this.#scope
    if (scope === 'nothing' && (seen.ran || seen.passed)) {
      if (this.#failMode === 'closed') fail('enforcement', 'let through while Redis fails, under failMode closed')
      return
    }

    const key = `${path} ${client}`
    const ledger = this.#ledgers.get(`${scope} ${key}`) ?? []
    this.#ledgers.set(`${scope} ${key}`, ledger)
    const lower = ledger.reduce((sum, e) => sum + e.lower, 0)
    const upper = ledger.reduce((sum, e) => sum + e.upper, 0)
    const banned = this.#banned.has(`${scope} ${client}`)
    const denials = this.#denials.get(`${scope} ${client}`) ?? 0
    // A refusal of /ban for its count is a denial, a strike toward the ban (when a store decided it).
    const over = upper + cost > route.max
    const decided = scope !== 'nothing'
    const banStarts = decided && path === '/ban' && over && !banned && denials + 1 >= BAN_THRESHOLD
    const admitted = seen.ran || seen.passed
    if (admitted) {
      this.reached.add(`admitted ${path}`)
      if (scope === 'local') this.reached.add('admitted in process while Redis fails')
      if (banned) fail('admissions', 'admitted under an enforced ban')
      else if (lower + cost > route.max) fail('admissions', `admitted ${cost} unit(s) over ${lower} already admitted, max ${route.max}`)
      ledger.push(this.#charge(step, seen))
    } else if (status === 429) {
      if (!(banned || over || this.#everBanned.has(client) || this.#everOver.has(key))) fail('refusals', `429 with ${upper} of ${route.max} counted and a cost of ${cost}`)
      else this.reached.add('refused for its count')
      if (over) this.#everOver.add(key)
    } else if (status === 403) {
      if (!(banned || banStarts || this.#everBanned.has(client))) fail('refusals', `403 with no enforced ban (${denials} denials on /ban)`)
      else this.reached.add('refused under an enforced ban')
    }
    if (decided && path === '/ban' && over && !banned) {
      this.#denials.set(`${scope} ${client}`, denials + 1)
      if (banStarts) {
        this.#banned.add(`${scope} ${client}`)
        this.#everBanned.add(client)
      }
    }
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
      this.reached.add('settled')
      return { lower: step.settle!, upper: step.settle! }
    }
    if (seen.settled !== undefined) this.reached.add('settle refused')
    if (step.givenBack && step.ends === 'answered') return { lower: 0, upper: 0 }
    return { lower: step.cost, upper: step.cost }
  }
}
