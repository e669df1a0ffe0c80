// The edge matrix's independent observer and its checker (test/edges/). The route handlers record what ran
// (each request's start and end, on performance.now(), which no instance's moved clock touches); the driver
// records the 403s clients saw. The checker holds those records to what the limit allows, knowing nothing of
// the plugin: no client had more started in any span than the algorithm lets through in it, more running at
// once than `concurrency.max`, or a start inside a ban it was told of. A handler starts a little after its
// decision, so every span is shortened by the slack the lag measured around it allows (test/helpers/lag.ts).
// A fault that lost Redis's data (a restart, a promoted replica behind its master) is allowed what the docs
// state: the window starts again, one more budget across it; leases are re-created on renewal, so past one
// lease after the fault a request is admitted only while fewer than `max` run.
import { QUIET_MS, lagDuring } from './lag.js'

/** One request's handler, as it recorded itself. */
/** A handler's run: its client, when its request was sent (by the driver), when it started and ended. */
export interface Ran { client: string, sent: number, start: number, end: number }

/** What ran and what clients were told, for every client of a run. */
export class Observer {
  readonly ran: Ran[] = []
  /**
   * Every answer a client saw: the instance it asked, when it sent the request, when the answer came
   * (performance.now()), its status.
   */
  readonly answers: Array<{ client: string, via: string, sent: number, at: number, status: number | 'gone', retryAfter?: number }> = []

  /** Called by a handler as it starts; the function it returns, as it ends. */
  begin (client: string, now: number, sent: number): (at: number) => void {
    const record: Ran = { client, sent, start: now, end: Infinity }
    this.ran.push(record)
    return (at) => { record.end = at }
  }

  /**
   * When every instance was answered by Redis again after `since`: the latest, over the instances, of the first
   * answer Redis decided (200 or 429; failMode 'closed' answers 503; a 403 may come from the instance's ban cache)
   * to a request sent after it. Printed beside a fault's length: an instance's client takes a while to reconnect.
   */
  answeredAgain (since: number): number {
    const first = new Map<string, number>()
    for (const a of this.answers) {
      if (a.sent < since || !(a.status === 200 || a.status === 429)) continue
      first.set(a.via, Math.min(first.get(a.via) ?? Infinity, a.at))
    }
    return Math.max(since, ...first.values())
  }

  of (client: string): Ran[] {
    return this.ran.filter(r => r.client === client).sort((a, b) => a.start - b.start)
  }
}

export type Algorithm = 'sliding-log' | 'fixed-window' | 'sliding-window' | 'token-bucket'

/** What a kind of limit promises, in terms an observer can check. */
export type Bound =
  | { kind: 'rate', algorithm: Algorithm, max: number, windowMs: number, banMs?: number, aheadMs?: number }
  | { kind: 'period', max: number }
  | { kind: 'running', max: number, leaseMs: number }

/**
 * A fault in the run: when it began and ended, and what Redis lost with it: its data (a restart, a promoted
 * replica behind its master), the leases alone (writes refused longer than a lease: out of memory), or nothing.
 */
export interface Fault { from: number, to: number, lost: 'data' | 'leases' | false }

/** The most requests `algorithm` lets start in any span of `ms` (a budget more per data loss). */
export function allowedIn (p: Extract<Bound, { kind: 'rate' }>, ms: number, losses: number): number {
  const windows = Math.floor(ms / p.windowMs)
  const base = p.algorithm === 'sliding-log'
    ? p.max * (windows + 1)
    // A span meets windows + 2 aligned windows, each holding at most max (the sliding window's estimate
    // weighs the previous window on top of this one's count, so this one's count alone is at most max too).
    : p.algorithm === 'token-bucket' ? p.max + Math.ceil(ms * p.max / p.windowMs) : p.max * (windows + 2)
  // A loss forgets the window's count and the places handed out ahead of it (`maxWait`: up to aheadMs on),
  // each window of those one budget.
  return base + losses * p.max * (1 + Math.ceil((p.aheadMs ?? 0) / p.windowMs))
}

/** The slack around `from`..`to`: what a quiet machine adds, and twice the lag measured there. */
function slack (from: number, to: number): number {
  return QUIET_MS + 2 * lagDuring(from, to)
}

/** Whether `at` is inside a fault, or within `after` ms of its end. */
function near (faults: readonly Fault[], at: number, after: number): boolean {
  return faults.some(f => at >= f.from && at <= f.to + after)
}

/** Every breach of `promise` by `client`'s runs, as lines saying what and when ([] when none). */
export function breaches (observer: Observer, client: string, promise: Bound, faults: readonly Fault[] = []): string[] {
  const runs = observer.of(client)
  const losses = faults.filter(f => f.lost === 'data').length
  if (promise.kind === 'period') {
    const bound = promise.max * (1 + losses)
    return runs.length > bound ? [`${runs.length} started in one period, at most ${bound} allowed`] : []
  }
  if (promise.kind === 'running') return runningBreaches(runs, promise, faults, faults.filter(f => f.lost !== false).length)
  const found: string[] = []
  const t0 = runs[0]?.start ?? 0
  for (const [i, first] of runs.entries()) {
    for (const k of [1, 2, 3]) {
      const span = k * promise.windowMs - 1
      const seen = span - slack(first.start - promise.windowMs, first.start + span)
      if (seen <= 0) continue
      let count = 0
      for (let j = i; j < runs.length && runs[j]!.start < first.start + seen; j++) count++
      const bound = allowedIn(promise, span, losses)
      if (count > bound) found.push(`${count} started within ${Math.round(seen)} ms from +${Math.round(first.start - t0)} ms, at most ${bound} in ${span} ms`)
    }
  }
  if (promise.banMs !== undefined) found.push(...banBreaches(observer, client, runs, promise.banMs, faults))
  return found.slice(0, 5)
}

/**
 * Starts inside a ban the client was told of. A 403 told at `at` says a ban began at or before its decision,
 * and after the decision of the last request the client sent before it that was answered 200 (not banned
 * then; a 429 is no such proof: an instance answers a denial it holds without asking Redis, ban or not): so
 * the ban holds at least until that request was sent plus the ban's length. That span, the slack taken off its
 * end, must see no start of a request sent after the 403 came.
 */
function banBreaches (observer: Observer, client: string, runs: readonly Ran[], banMs: number, faults: readonly Fault[]): string[] {
  const found: string[] = []
  const answers = observer.answers.filter(a => a.client === client)
  const t0 = faults[0]?.from ?? runs[0]?.start ?? 0
  const when = (at: number): string => `${at < t0 ? '' : '+'}${Math.round(at - t0)} ms`
  for (const ban of answers.filter(a => a.status === 403)) {
    // A ban Redis forgot with its data is not held against it (an instance holds a ban it was told of in
    // process until it ends: one told after the loss may be older).
    if (faults.some(f => f.lost === 'data' && ban.at <= f.to + banMs)) continue
    // A 403 that says less than a whole ban is left may be a ban an instance holds in process a little past
    // Redis's end (it counts the time Redis gave from when the answer reached it): no new ban is proved by it.
    if (ban.retryAfter === undefined || ban.retryAfter < Math.ceil(banMs / 1000)) continue
    const clear = Math.max(...answers.filter(a => a.status === 200 && a.sent < ban.at).map(a => a.sent))
    if (clear === -Infinity) continue
    const ends = clear + banMs - 2 * slack(clear, clear + banMs)
    // A request sent after the 403 came was decided after the ban began. One sent before it may have been let
    // through just before the ban and started late (a loaded loop): its start says nothing about the ban.
    const inside = runs.filter(r => r.sent > ban.at && r.start < ends)
    if (inside.length > 0) {
      found.push(`${inside.length} started (at ${inside.map(r => when(r.start)).join(', ')}) inside a ban told at ${when(ban.at)}, ` +
        `not yet begun at ${when(clear)}, for ${banMs} ms${faults.length > 0 ? ' (times from the fault\'s start)' : ''}`)
    }
  }
  return found
}

/** The most running at once, and admissions while `max` others surely held their slots. */
function runningBreaches (runs: readonly Ran[], p: Extract<Bound, { kind: 'running' }>, faults: readonly Fault[], losses: number): string[] {
  const found: string[] = []
  const bound = p.max * (1 + losses)
  let most = 0
  for (const run of runs) {
    const at = runs.filter(r => r.start <= run.start && r.end > run.start).length
    most = Math.max(most, at)
  }
  if (most > bound) found.push(`${most} running at once, at most ${bound} allowed`)
  for (const run of runs) {
    const s = slack(run.start - 1000, run.start + 100)
    // Past a data loss, leases are re-created within a lease (renewed every third of one).
    if (near(faults.filter(f => f.lost !== false), run.start, p.leaseMs + s)) continue
    // Others that started before this request's decision and end after its start held a slot through it.
    const holding = runs.filter(r => r !== run && r.start < run.start - s && r.end > run.start).length
    if (holding >= p.max) found.push(`admitted at +${Math.round(run.start - runs[0]!.start)} ms while ${holding} others ran (max ${p.max})`)
  }
  return found.slice(0, 5)
}
