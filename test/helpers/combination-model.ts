// The model test/combination.test.ts holds the plugin to: what each client may have had from each enforcing
// route in the run (every window is an hour, longer than a run, so nothing leaves a window; /quota's month ends
// within it, and its count starts again beside its hour's; /wait is test/helpers/combination-wait.ts's), and the
// rules every answer must keep, on the app's clock the test holds still during each request:
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
//                 through, its headers the slots') exactly when the client's slots there are full. A
//                 handler runs until its own end: a client hanging up while it runs on frees nothing.
//   waits         /wait answers each request as its log says: at once, after the wait it says (its handler
//                 no sooner), or 429; a client that leaves while it waits gives its place back.
//
// The load shedder decides each request first (test/helpers/combination-shed.ts holds it to its rules): a request
// it sheds is answered there and counted nowhere, so the model counts it on no budget, and every answer after it
// proves the shedder spent none.
//
// Redis fails on some steps (the test stops it, then starts it again with its data): while it does,
// `failMode` decides (`'open'`: nothing is counted; `'local'`: the in-process twin counts, apart); then Redis
// counts on from where it was. Bans and denials held in process are answered whoever counts: a 403 or 429
// is also justified by one the client earned in the other scope, until that refusal's reason ends (the
// window, month or ban that justified it); past that, a refusal without a reason of its own fails the run.
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
// none (`'open'`). Its handler's end frees them (or its client's hanging up, when the handler stops at that),
// never a hang-up while the handler runs on; one whose release Redis could not hear (it was
// failing) may still count there until its lease ends, longer than a run: refusals may count it, admissions
// may not. A request refused in flight, or costing more than the slots' max, counts nothing on the rate limit
// (the plugin gives it back); on /ban, a refusal in flight strikes toward the ban like one for the count.
import type { FailMode } from '../../lib/index.js'
import { BAN_THRESHOLD, BANNING, QUOTA_HOUR_MAX, ROUTES } from './combination-app.js'
import type { Arrival, Path, SettleOutcome, ShedSeen, Started } from './combination-app.js'
import { SHED_INVARIANTS, ShedRules } from './combination-shed.js'
import type { ShedStep } from './combination-shed.js'
import { WaitLog } from './combination-wait.js'
import type { WaitAnswer } from './combination-wait.js'

const IN_FLIGHT = 'FST_RATE_GUARD_TOO_MANY_IN_FLIGHT'
const TOO_COSTLY = 'FST_RATE_GUARD_TOO_COSTLY'

export const INVARIANTS = {
  admissions: 'an enforcing route admits no more units per client than its max, and nothing under an enforced ban',
  refusals: 'a shadow route never refuses; an enforcing route refuses only for its own count (429) or an enforced ban (403)',
  enforcement: 'no request to an enforcing route goes unenforced while Redis is up (nor at all under failMode closed)',
  unavailable: 'a 503 only under failMode closed while Redis fails',
  answers: 'every answer is one the app or the limiter gives (200, 500 asked for, 403, 429, 503)',
  slots: 'no more than concurrency.max units of a client\'s requests run at once on an enforcing route (a handler its client hung up on included); refused in flight exactly when the slots are full',
  waits: '/wait lets a request through at once, after the wait its window gives (its handler no sooner), or refuses it, as its log says; a client that leaves while waiting gives its place back',
  // The load shedder's (test/helpers/combination-shed.ts): a request it sheds is checked there alone.
  ...SHED_INVARIANTS
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
  /** What was in flight as the shedder decided it, and its decision to shed it (none: let in). */
  readonly arrival?: Arrival
  readonly shed?: ShedSeen
  /** The code in its answer's body (null: none), when the test read it (a shed request's: FST_RATE_GUARD_SHED). */
  readonly bodyCode?: string | null
}

/** What the shedder's rules read of a step the test saw. */
function shedStepOf (step: Step, seen: Seen): ShedStep {
  return {
    path: step.path,
    arrival: seen.arrival,
    shed: seen.shed,
    status: seen.status,
    ran: seen.ran,
    read: seen.headers === undefined || seen.bodyCode === undefined
      ? undefined
      : { retryAfter: seen.headers.retryAfter, code: seen.bodyCode }
  }
}

/** A request held open, and the slots it holds: in which scope, or none. */
interface Holding {
  readonly path: Path
  readonly client: string
  readonly units: number
  readonly scope: string
  readonly slotted: boolean
  /** Its client hung up; its handler runs on. */
  readonly runsOn?: boolean
}

interface Entry {
  readonly lower: number
  readonly upper: number
  /** /quota's month it was counted in: 0 before the month's end, 1 after. */
  readonly period: number
}

/** One limit of a route, as the model counts a client's units against it, and when a refusal for it ends at most. */
interface Count {
  readonly max: number
  readonly lower: number
  readonly upper: number
  readonly ends: number
}

const HOUR_MS = 3_600_000

/** A /wait request the model decided, until its answer (or its client's leaving) is seen. */
interface Waiting {
  readonly who: string
  readonly text: string
  readonly answer: WaitAnswer | { readonly kind: 'banned' | 'unenforced' | 'unavailable' }
  /** When it was decided, on the app's clock. */
  readonly now: number
}

export class Model {
  readonly #failMode: FailMode
  /** Per scope (what counts now: Redis, or the in-process twin while it fails), per route and client. */
  readonly #ledgers = new Map<string, Entry[]>()
  readonly #denials = new Map<string, number>()
  /** Per scope and client, when its ban ends. */
  readonly #banned = new Map<string, number>()
  /**
   * Per client, when the last ban it earned in any scope ends; per route and client, when the last refusal for
   * its count (in any scope) stops being justified: held in process, such answers may be given from another
   * scope until then, and no later.
   */
  readonly #bannedUntil = new Map<string, number>()
  readonly #overUntil = new Map<string, number>()
  /** /quota's month ends here (in QUOTA_ZONE), and the next begins. */
  readonly #monthEnd: number
  readonly #waitLog = new WaitLog()
  readonly #waiting = new Map<string, Waiting>()
  /** The requests held open, by the step that sent them. */
  readonly #holding = new Map<string, Holding>()
  /** Per route and client, units given back while Redis failed: their leases may still count there. */
  readonly #stuck = new Map<string, number>()
  readonly violations = new Map<Invariant, string[]>()
  /** What the traffic reached, so a fixed seed can be held to reaching each, and how often. */
  readonly reached = new Set<string>()
  readonly tally = new Map<string, number>()
  #redisDown = false

  readonly #shed: ShedRules

  /** `shadow`: the shedder's mode is 'shadow'. */
  constructor (failMode: FailMode, monthEnd: number, shadow: boolean) {
    this.#failMode = failMode
    this.#monthEnd = monthEnd
    this.#shed = new ShedRules(shadow, (invariant, why) => { this.#fail(invariant, why) }, kind => { this.#reach(kind) })
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

  #reach (kind: string): void {
    this.reached.add(kind)
    this.tally.set(kind, (this.tally.get(kind) ?? 0) + 1)
  }

  #fail (invariant: Invariant, line: string): void {
    const list = this.violations.get(invariant) ?? []
    list.push(line)
    this.violations.set(invariant, list)
  }

  /** Checks one answer, given at `now` on the app's clock, against the invariants, then records what it changed. */
  observe (step: Step, seen: Seen, where: string, now: number): void {
    const fail = (invariant: Invariant, why: string): void => {
      this.#fail(invariant, `${where}: ${step.text} -> ${seen.status ?? (seen.held === true ? 'held' : 'hung up')}: ${why}${seen.note === undefined ? '' : ` (${seen.note})`}`)
    }
    // The shedder first, as in the app: a request it sheds is answered there, and counted nowhere.
    if (this.#shed.observe(shedStepOf(step, seen), fail)) return
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
      else this.#reach('503 while Redis fails')
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
      if (refused) this.#reach('let through in flight (shadow)')
      return hold(scope, !refused)
    }
    if (seen.unenforced || seen.entry?.unenforced === true) {
      if (!(this.#failMode === 'open' && failing)) fail('enforcement', 'X-RateLimit-Enforced: false')
      else this.#reach('unenforced while Redis fails')
    }
    if (!decided && (seen.ran || seen.passed)) {
      if (this.#failMode === 'closed') fail('enforcement', 'let through while Redis fails, under failMode closed')
      return hold(scope, false)
    }

    const key = `${path} ${client}`
    const ledger = this.#ledgers.get(`${scope} ${key}`) ?? []
    this.#ledgers.set(`${scope} ${key}`, ledger)
    const counts = this.#counts(ledger, path, now)
    // The limit that leaves least room: what a failure names.
    const { lower, upper, max } = counts.reduce((a, b) => b.max - b.lower < a.max - a.lower ? b : a)
    const lowerFits = counts.every(c => c.lower + cost <= c.max)
    const overs = counts.filter(c => c.upper + cost > c.max)
    const banned = (this.#banned.get(`${scope} ${client}`) ?? -1) > now
    const denials = this.#denials.get(`${scope} ${client}`) ?? 0
    const over = overs.length > 0
    // Under concurrency, a request its rate limit allows then takes its slots, and is refused when they are full.
    const full = concurrency !== null && !over && cost <= concurrency && slots.upper + cost > concurrency
    const admitted = seen.ran || seen.passed
    // A refusal for its count or in flight on a route whose policy bans is a denial, a strike toward the
    // client's ban (when a store decided it); not a request costing more than the limit holds, refused as it is.
    const denied = decided && BANNING.includes(path) && !banned && cost <= route.max && (over || (full && !admitted))
    const banStarts = denied && denials + 1 >= BAN_THRESHOLD
    if (admitted) {
      this.#reach(`admitted ${path}`)
      if (scope === 'local') this.#reach('admitted in process while Redis fails')
      if (banned) fail('admissions', 'admitted under an enforced ban')
      else if (!lowerFits) fail('admissions', `admitted ${cost} unit(s) over ${lower} already admitted, max ${max}`)
      if (concurrency !== null && seen.entry !== undefined) {
        if (slots.lower + cost > concurrency) fail('slots', `admitted ${cost} unit(s) beside ${slots.lower} of ${concurrency} in flight`)
        // The app's count, less the requests whose slots are another scope's (or none: failMode 'open').
        const elsewhere = this.#elsewhere(scope, path, client)
        if (seen.entry.running - elsewhere > concurrency) fail('slots', `${seen.entry.running} unit(s) of its client running at once (${elsewhere} on another scope's slots), max ${concurrency}`)
        if (slots.lower > 0) this.#reach('admitted beside one in flight')
      }
      if (path === '/quota' && now >= this.#monthEnd && ledger.reduce((n, e) => n + (e.period === 0 ? e.lower : 0), 0) + cost > ROUTES['/quota'].max) {
        this.#reach('admitted /quota in a new month, past the last month\'s quota')
      }
      ledger.push({ ...this.#charge(step, seen), period: now >= this.#monthEnd ? 1 : 0 })
      hold(scope, concurrency !== null)
    } else if (status === 429 && seen.code === IN_FLIGHT) {
      // Its rate limit allowed it (it decides first), then its slots were full.
      if (!lowerFits) fail('slots', `refused in flight, though its rate limit (${lower} of ${max} counted) refuses it first`)
      else if (!full) fail('slots', `refused in flight with ${slots.upper} of ${concurrency} slot(s) in use and a cost of ${cost}`)
      else this.#reach('refused in flight')
    } else if (status === 429 && seen.code === TOO_COSTLY && concurrency !== null && cost > concurrency) {
      // More units than its slots hold: it never fits, whatever is in flight, and waits for nothing.
      if (!lowerFits) fail('slots', `refused as never fitting its slots, though its rate limit (${lower} of ${max} counted) refuses it first`)
      else if (seen.headers?.retryAfter !== undefined) fail('slots', `refused as never fitting its slots, with Retry-After ${seen.headers.retryAfter}`)
      else this.#reach('too costly for its slots')
    } else if (status === 429) {
      this.#reach('a refusal checked for a current reason')
      // A reason now, or one that still holds: a refusal held in process, or a ban, from another scope.
      const excused = this.#excused(this.#overUntil, key, now) || this.#excused(this.#bannedUntil, client, now)
      if (!(banned || over || excused)) fail('refusals', `429 with ${upper} of ${max} counted and a cost of ${cost}${this.#expired(key, client)}`)
      else this.#reach('refused for its count')
      if (!banned && !over && excused) this.#reach('refused on a reason from another scope, still current')
      if (over) this.#overUntil.set(key, Math.max(this.#overUntil.get(key) ?? 0, ...overs.map(c => c.ends)))
    } else if (status === 403) {
      this.#reach('a refusal checked for a current reason')
      if (!(banned || banStarts || this.#excused(this.#bannedUntil, client, now))) fail('refusals', `403 with no enforced ban (${denials} denials on /ban)${this.#expired(key, client)}`)
      else this.#reach('refused under an enforced ban')
    }
    if (path === '/quota' && now >= this.#monthEnd) this.#reach('decided on /quota in the new month')
    if (denied) {
      if (!over) this.#reach('a refusal in flight struck toward a ban')
      this.#denials.set(`${scope} ${client}`, denials + 1)
      if (banStarts) {
        this.#reach(`a ban started on ${path}`)
        this.#banned.set(`${scope} ${client}`, now + HOUR_MS)
        this.#bannedUntil.set(client, now + HOUR_MS)
      }
    }
  }

  /**
   * A request held open ended: let finish (its answer `status`; none when its client had hung up while its
   * handler ran on), or hung up; its slots are given back.
   */
  end (where: string, text: string, how: 'finished' | 'hung up', status: number | null): void {
    const holding = this.#holding.get(where)
    if (holding === undefined) return
    this.#holding.delete(where)
    if (how === 'finished' && status !== (holding.runsOn ? null : 200)) this.#fail('answers', `${where}: ${text}, let finish -> ${status}`)
    if (holding.runsOn) this.#reach('a handler hung up on ran to its end')
    if (!holding.slotted) return
    this.#reach(`a slot freed: ${how}`)
    if (holding.scope === 'redis' && this.#redisDown) {
      // Given back to a Redis that cannot hear it: its lease ends later than the run, so it may still count.
      const key = `${holding.path} ${holding.client}`
      this.#stuck.set(key, (this.#stuck.get(key) ?? 0) + holding.units)
      this.#reach('a slot given back while Redis fails')
    }
  }

  /** The client of a request held open hung up; its handler runs on, and keeps its slots until it ends. */
  runsOn (where: string): void {
    const holding = this.#holding.get(where)
    if (holding === undefined) return
    this.#holding.set(where, { ...holding, runsOn: true })
    this.#reach(`hung up while its handler ran on ${holding.path}`)
  }

  /**
   * A request to /wait, decided at `now` (the app's clock held still while it is): what it must be answered,
   * kept until its answer, or its client's leaving, is seen. A ban held in process answers 403 from any scope.
   */
  decideWait (step: Step, where: string, now: number): Waiting['answer'] {
    const scope = this.#scope
    const who = `${scope} ${step.client}`
    let answer: Waiting['answer']
    if (scope === 'nothing') answer = { kind: this.#failMode === 'open' ? 'unenforced' : 'unavailable' }
    else if ((this.#banned.get(who) ?? -1) > now) answer = { kind: 'banned' }
    else answer = this.#waitLog.decide(who, now, where)
    this.#waiting.set(where, { who, text: step.text, answer, now })
    return answer
  }

  /**
   * The shedder decided /wait request `where` (decided by decideWait before it was sent): true when it shed it,
   * and it took no place in the log.
   */
  waitShed (where: string, shed: ShedStep): boolean {
    const { who, text } = this.#waiting.get(where)!
    const fail = (invariant: Invariant, why: string): void => {
      this.#fail(invariant, `${where}: ${text} -> ${shed.status ?? 'waits'}: ${why}`)
    }
    if (!this.#shed.observe(shed, fail)) return false
    this.#waiting.delete(where)
    this.#waitLog.leave(who, where)
    return true
  }

  /**
   * The answer to /wait request `where`: its status, the wait it says it had (`x-ratelimit-waited-ms`), the ms
   * from sending it to its handler, and whether it went unenforced.
   */
  waitAnswered (where: string, status: number, waitedMs: number | undefined, ranAfterMs: number | undefined, unenforced: boolean): void {
    const { who, text, answer, now } = this.#waiting.get(where)!
    this.#waiting.delete(where)
    const fail = (why: string): void => { this.#fail('waits', `${where}: ${text} -> ${status}${waitedMs === undefined ? '' : ` after ${waitedMs} ms`}: ${why}`) }
    if (status === 403 && answer.kind !== 'banned' && this.#excused(this.#bannedUntil, who.split(' ')[1]!, now)) {
      // Banned in another scope, the ban held in process: the place the model kept was never taken.
      this.#waitLog.leave(who, where)
      this.#reach('refused under an enforced ban')
      return
    }
    const expected = { now: 200, waits: 200, refused: 429, banned: 403, unenforced: 200, unavailable: 503 }[answer.kind]
    if (status !== expected) return fail(`expected ${expected}, as ${JSON.stringify(answer)} (its log: ${this.#waitLog.describe(who, now)})`)
    if (unenforced !== (answer.kind === 'unenforced')) return fail(`X-RateLimit-Enforced: ${String(!unenforced)}`)
    const waited = answer.kind === 'waits' ? answer.ms : undefined
    if (waitedMs !== waited) return fail(`expected ${waited === undefined ? 'no wait' : `a wait of ${waited} ms`} (its log: ${this.#waitLog.describe(who, now)})`)
    if (waited !== undefined && ranAfterMs !== undefined && ranAfterMs < waited) return fail(`its handler ran ${ranAfterMs.toFixed(1)} ms after it was sent`)
    this.#reach({ now: 'admitted /wait', waits: 'waited on /wait', refused: 'refused on /wait', banned: 'refused under an enforced ban', unenforced: 'unenforced while Redis fails', unavailable: '503 while Redis fails' }[answer.kind])
  }

  /** The client of /wait request `where`, which was to wait, hung up: before its handler (`ran` false), it gave its place back. */
  waitLeft (where: string, ran: boolean): void {
    const { who } = this.#waiting.get(where)!
    this.#waiting.delete(where)
    if (ran) return
    this.#waitLog.leave(who, where)
    this.#reach('left while waiting on /wait')
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

  /**
   * A client's units on a route, against each limit it counts them on at `now`: the route's max over the run
   * (every window an hour long); on /quota, QUOTA_HOUR_MAX over the run and its max in the month holding `now`.
   */
  #counts (ledger: readonly Entry[], path: Path, now: number): Count[] {
    const sum = (entries: readonly Entry[], max: number, ends: number): Count =>
      ({ max, lower: entries.reduce((n, e) => n + e.lower, 0), upper: entries.reduce((n, e) => n + e.upper, 0), ends })
    if (path !== '/quota') return [sum(ledger, ROUTES[path].max, now + HOUR_MS)]
    const period = now >= this.#monthEnd ? 1 : 0
    // The next month ends long after any run.
    const monthEnds = period === 0 ? this.#monthEnd : now + 28 * 24 * HOUR_MS
    return [sum(ledger, QUOTA_HOUR_MAX, now + HOUR_MS), sum(ledger.filter(e => e.period === period), ROUTES['/quota'].max, monthEnds)]
  }

  /** Whether a reason recorded in `until` for `key` still holds at `now`. */
  #excused (until: ReadonlyMap<string, number>, key: string, now: number): boolean {
    return (until.get(key) ?? -1) > now
  }

  /** For a report: the reasons a refusal had, now over. */
  #expired (key: string, client: string): string {
    const over = this.#overUntil.get(key)
    const ban = this.#bannedUntil.get(client)
    return `${over === undefined ? '' : `; refused for its count until ${over}`}${ban === undefined ? '' : `; banned until ${ban}`}`
  }

  /** What an admitted request is charged, once everything it started has finished. */
  #charge (step: Step, seen: Seen): Omit<Entry, 'period'> {
    if (!seen.ran) {
      // Counted, then hung up before its handler: refundAborted gives it back (no work was done); else it stands.
      this.#reach('hung up before the handler')
      return { lower: 0, upper: step.path === '/abort' ? 0 : step.cost }
    }
    if (step.ends === 'after-handler') this.#reach('hung up after the handler started')
    if (seen.settled === 'ok') {
      this.#reach(`settled on ${step.path}`)
      return { lower: step.settle!, upper: step.settle! }
    }
    if (seen.settled !== undefined) this.#reach('settle refused')
    if (step.givenBack && step.ends === 'answered') return { lower: 0, upper: 0 }
    return { lower: step.cost, upper: step.cost }
  }
}
