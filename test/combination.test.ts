// The features played against each other (issue 26): one seeded sequence of requests from a few clients over
// enforcing and shadow routes, bans, costs (static, a function of the body, of a header: including ones that
// throw, reject or give no valid cost), settlements from the handler (0 to Number.MAX_SAFE_INTEGER, and
// amounts that are no amount), countWhen and skipFailedRequests, refundAborted, and aborts over real sockets
// before and after the handler started, requests in flight (`concurrency`, enforced and in shadow mode:
// requests held open in their handlers, refused past their slots, then let finish or hung up, some across the
// outage, some hung up while their handler runs on), a route under `maxWait` (a second's window: requests
// let through at once, after a wait, or refused, and clients that leave while they wait), and calendar quotas
// (a month's beside an hour's window, with costs, settlements and a ban policy, the month's end crossed in
// every run; a day's in shadow mode), and the load shedder (issue 46: a fixed in-flight capacity, which the
// requests held open fill; routes of each class, the critical ones let in past the others' share; shed
// requests, which count on no budget; in shadow mode on the in-process store under failMode 'open', enforced in
// the other runs); run on the in-process store and on Redis (a server of the run's own,
// stopped for a few requests late in the run and started again), under each failMode. After every request the
// answer is checked against the model of test/helpers/combination-model.ts: nothing a client controls, and no
// feature that only watches traffic, may loosen a limit that is enforced, and no refusal comes without a
// reason that still holds.
//
// The app's clock (test/helpers/app-clock.ts; on Redis, `clock: 'app'`) is held still during each request and
// moved STEP_MS before it: a run spans seconds of it, and reaches /quota's month end at a step the seed
// chose, whatever the machine's speed. Every other window and every lease is an hour, longer than a run.
// Each step waits for the events it causes (its handler, its settle, the plugin's response and abort hooks,
// its response's close, told by the app: test/helpers/combination-app.ts), never for time; a request that
// waits on /wait is read when its answer comes, steps later.
//
// The shedder's sampler runs on real time: the shares it halves make which requests are shed vary from run to
// run of a seed (test/helpers/combination-shed.ts reads them as the shedder decides), its in-flight sheds not.
//
// Seeds: a few fixed ones (which must reach every kind of step and answer) and one fresh one per run;
// COMBO_SEED=<n> replays one seed alone (every store and failMode); COMBO_HISTORY=1 prints every step. The
// whole file takes about 25 s on a quiet machine (30 runs of 300 steps), within its own 120 s limit.
import { performance } from 'node:perf_hooks'
import t from 'tap'
import type { Test } from 'tap'
import { changesChannel } from '../lib/changes.js'
import type { FailMode } from '../lib/index.js'
import { periodOf } from '../lib/calendar.js'
import { appClock } from './helpers/app-clock.js'
import { comboApp, hangUp, QUOTA_ZONE, ROUTES, send, waitFor } from './helpers/combination-app.js'
import type { Answer, ComboApp, Events, Path, Sent } from './helpers/combination-app.js'
import { INVARIANTS, Model } from './helpers/combination-model.js'
import type { Invariant, Seen, Step } from './helpers/combination-model.js'
import { draws } from './helpers/random.js'
import type { Draws } from './helpers/random.js'
import type { Redis } from 'ioredis'
import { client, ready, scanKeys, startRedisServer, uniquePrefix, until } from './helpers/redis.js'

// Seed 7 also settles one client's requests at Number.MAX_SAFE_INTEGER, then asks again (the in-process store's
// count past 2^53).
const FIXED_SEEDS = [1, 7, 11, 13]
// 30 runs of 300 steps: about 25 s quiet, 56 s seen at a load average of 11-14 (the shedder's runs added); a hang still fails.
t.setTimeout(120_000)
const replay = process.env.COMBO_SEED
const seeds = replay !== undefined && replay !== '' ? [Number(replay)] : [...FIXED_SEEDS, Math.floor(Math.random() * 2 ** 31)]
const STORES = ['memory', 'redis'] as const
const FAIL_MODES: readonly FailMode[] = ['open', 'closed', 'local']
const CLIENTS = ['c0', 'c1', 'c2', 'c3']
/** Steps come in blocks holding each kind once, in a random order: every run reaches every kind. */
const BLOCKS = 10
const HUGE = String(Number.MAX_SAFE_INTEGER)
/**
 * How far the app's clock moves before each request (ms): a run spans seconds of it, whatever the machine's
 * speed. More than half what a step takes on a loaded machine: Redis expires /wait's log two windows after
 * its last write on its own clock, which must not pass a window of the app's first.
 */
const STEP_MS = 100
/** /wait's requests a block, all of one client, and how far the clock moves before each (besides STEP_MS). */
const WAITS_PER_BLOCK = 4
const WAIT_GAPS = [0, 150, 300, 450]

/** A request to send: the model's view of it, and how to send it. */
interface Planned extends Step {
  readonly method: 'GET' | 'POST'
  readonly headers: Readonly<Record<string, string>>
  readonly body: object | undefined
  /** How far the app's clock moves before it is sent (ms). */
  readonly advance: number
}

/**
 * The end of a request held open: which of those held on `path` when it comes (a fraction of their number),
 * and how. /ban's least often: a client's request held there, the next one it sends is refused in flight.
 */
interface Release {
  /** `runs on`: its client hangs up while its handler goes on working (until a later `finish` lets it end). */
  readonly release: 'finish' | 'hang up' | 'runs on'
  readonly path: Path
  readonly which: number
}

/** The client of the oldest request waiting on /wait hangs up. */
interface Leave {
  readonly leave: '/wait'
}
const HELD_ON: readonly Path[] = ['/hold', '/hold', '/hold-shadow', '/ban']

type Kind = (draw: Draws, client: string) => Planned | Release

/** A cost named in `x-cost`, as the model reads it: a positive safe integer is itself; anything else fails and counts 1. */
function costOf (given: string): number {
  const value = given === 'huge' ? Number.MAX_SAFE_INTEGER : Number(given)
  return Number.isSafeInteger(value) && value >= 1 ? value : 1
}

function plan (client: string, path: Path, method: 'GET' | 'POST', headers: Record<string, string>, extra: Partial<Step> & { body?: object, advance?: number } = {}): Planned {
  const shown = Object.entries(headers).map(([name, value]) => `${name}: ${value}`).join(', ')
  const body = extra.body === undefined ? '' : ` ${JSON.stringify(extra.body).slice(0, 40)}`
  const ends = extra.ends ?? 'answered'
  const hold = headers['x-hold'] === '1'
  return {
    hold,
    client,
    path,
    method,
    headers,
    body: extra.body,
    advance: extra.advance ?? STEP_MS,
    cost: extra.cost ?? ROUTES[path].cost ?? 1,
    ends,
    givenBack: extra.givenBack ?? false,
    settle: extra.settle,
    text: `${client} ${method} ${path}${body}${shown === '' ? '' : ` (${shown})`}${ends === 'answered' ? '' : `, hung up ${ends}`}`
  }
}

/** Each kind of step: a feature, with the variants a client (or the app's handler) can give it. */
const KINDS: Record<string, Kind> = {
  plain: ({ pick }, client) => {
    const status = pick(['200', '200', '500'])
    return plan(client, '/plain', 'GET', { 'x-status': status }, { givenBack: status === '500' })
  },
  plainBefore: (_draw, client) => plan(client, '/plain', 'POST', {}, { ends: 'before-handler' }),
  bulk: ({ pick, int }, client) => {
    const body = pick<object>([{ items: Array(int(1, 4)).fill(0) }, { items: Array(int(1, 2)).fill(0) }, {}, { items: [] }, { items: Array(7).fill(0) }])
    const items = (body as { items?: unknown[] }).items
    return plan(client, '/bulk', 'POST', {}, { body, cost: items === undefined || items.length === 0 ? 1 : items.length })
  },
  cost: ({ pick }, client) => {
    const cost = pick(['1', '1', '2', '3', 'throw', 'reject', '0', 'NaN', '1.5', 'huge'])
    const free = pick([undefined, undefined, '1', 'throw'])
    return plan(client, '/cost', 'GET', { 'x-cost': cost, ...(free === undefined ? {} : { 'x-free': free }) }, { cost: costOf(cost), givenBack: free === '1' })
  },
  settle: ({ pick }, client) => {
    const amount = pick(['0', '1', '3', '7', HUGE, '-1', '1.5', '9007199254740993'])
    return plan(client, '/settle', 'GET', { 'x-settle': amount }, { settle: Number(amount) })
  },
  // Mostly one client: a ban ends a client's run on every enforcing route, and the others' should go on.
  ban: ({ pick }) => plan(pick(['c3', 'c3', 'c3', 'c2']), '/ban', 'GET', {}),
  abortAfter: ({ pick, random }, client) => {
    const amount = pick([undefined, undefined, '0', '3', HUGE])
    // The issue's case: a GET announcing a body it never sends (Fastify runs the handler at once).
    const length: Record<string, string> = random() < 0.5 ? { 'content-length': '100' } : {}
    return plan(client, '/abort', 'GET', { 'x-hang': '1', ...length, ...(amount === undefined ? {} : { 'x-settle': amount }) }, { ends: 'after-handler', settle: amount === undefined ? undefined : Number(amount) })
  },
  abortBefore: (_draw, client) => plan(client, '/abort', 'POST', {}, { ends: 'before-handler' }),
  abort: (_draw, client) => plan(client, '/abort', 'GET', {}),
  watched: (_draw, client) => plan(client, '/watched', 'GET', {}),
  search: ({ pick }, client) => {
    const cost = pick(['1', '1', '1', '2', 'throw', 'reject'])
    return plan(client, '/search', 'GET', { 'x-cost': cost }, { cost: costOf(cost) })
  },
  // Requests held open in their handlers (concurrency), until a later step lets one finish or hangs it up;
  // mostly from the clients /ban never bans, so their slots fill, and their rate limit is reached.
  hold: ({ pick }, client) => {
    const cost = pick(['1', '1', '1', '2', '3'])
    return plan(pick(['c0', 'c1', client]), '/hold', 'GET', { 'x-hold': '1', 'x-cost': cost }, { cost: Number(cost) })
  },
  // A budget spent by hand: the units a client names (more than the budget holds: never), settled by the handler.
  spent: ({ pick }, client) => {
    const cost = pick(['1', '1', '2', '3', 'huge'])
    const amount = pick([undefined, '0', '1', '1', '5', '-1'])
    return plan(client, '/spent', 'GET', { 'x-cost': cost, ...(amount === undefined ? {} : { 'x-settle': amount }) },
      { cost: costOf(cost), settle: amount === undefined ? undefined : Number(amount) })
  },
  holdShadow: ({ pick }, client) => plan(pick(['c0', 'c1', client]), '/hold-shadow', 'GET', { 'x-hold': '1' }),
  holdBan: ({ pick }) => plan(pick(['c2', 'c2', 'c3']), '/ban', 'GET', { 'x-hold': '1' }),
  finish: ({ pick, random }) => ({ release: 'finish', path: pick(HELD_ON), which: random() }),
  hangUpHeld: ({ pick, random }) => ({ release: 'hang up', path: pick(HELD_ON), which: random() })
}
// Shadow mode and /ban twice as often: their bans need a client's second and third request there;
// settlements, the most varied; and /hold, whose slots fill only while a client holds several there.
KINDS.searchAgain = KINDS.search!
KINDS.banAgain = KINDS.ban!
KINDS.settleAgain = KINDS.settle!
KINDS.holdAgain = KINDS.hold!

const KINDS_PER_BLOCK = Object.keys(KINDS).length

/**
 * A request to /quota: a cost a client names (one that fails, one past what the quota holds), and sometimes a
 * settlement; mostly from the clients /ban leaves be, so that their denials here start bans of their own.
 */
function quota ({ pick }: Draws): Planned {
  const client = pick(['c0', 'c0', 'c1', 'c1', 'c2', 'c3'])
  const cost = pick(['1', '1', '2', '2', 'throw', 'huge'])
  const amount = pick([undefined, undefined, '0', '1', '3', HUGE])
  return plan(client, '/quota', 'GET', { 'x-cost': cost, ...(amount === undefined ? {} : { 'x-settle': amount }) }, { cost: costOf(cost), settle: amount === undefined ? undefined : Number(amount) })
}

/**
 * Redis fails from here (stopped), or is back (started again, with its data); the in-process store goes on.
 * Or /quota's month ends: the app's clock reaches the month's end in QUOTA_ZONE.
 */
type Marker = 'redis down' | 'redis up' | 'month ends'
type Item = Planned | Release | Leave | Marker

/** The seed's sequence: the same for every store and failMode. */
function sequence (seed: number): Item[] {
  const draw = draws(seed, 0)
  // Its own stream: another seed of the same run's.
  const waits = draws(seed ^ 0x2545f491, 0)
  const quotas = draws(seed ^ 0x5bd1e995, 0)
  const aborts = draws(seed ^ 0x68e31da4, 0)
  const steps: Item[] = []
  const at = (stream: Draws): number => steps.length - stream.int(0, KINDS_PER_BLOCK - 1)
  const names = Object.keys(KINDS)
  // One outage of 8 to 13 requests, late in the run (what comes before has Redis to itself).
  const outage = draw.int(BLOCKS - 3, BLOCKS - 2)
  for (let block = 0; block < BLOCKS; block++) {
    if (block === outage) steps.push('redis down')
    if (block === outage + 1) steps.splice(steps.length - draw.int(0, KINDS_PER_BLOCK - 8), 0, 'redis up')
    const order = [...names]
    for (let i = order.length - 1; i > 0; i--) {
      const j = draw.int(0, i)
      ;[order[i], order[j]] = [order[j]!, order[i]!]
    }
    for (const name of order) steps.push(KINDS[name]!(draw, draw.pick(CLIENTS)))
    // A client's requests to /wait, close enough on the clock to wait, and one client leaving while it waits,
    // placed by a stream of their own: every other step is the one the seed made before, so a seed reaches what
    // it reached.
    // The clients /ban leaves be: a banned one's requests are refused before /wait's log is asked.
    const waiter = waits.pick(['c0', 'c1'])
    const burst = at(waits)
    for (let i = 0; i < WAITS_PER_BLOCK; i++) steps.splice(burst + i, 0, plan(waiter, '/wait', 'GET', {}, { advance: STEP_MS + waits.pick(WAIT_GAPS) }))
    // Right after the burst (within the wait, whatever the machine's speed), one block in two on average:
    // the others' waits run to their end.
    // Then the client asks again: with the place given back it waits; else its queue is full, and it is refused.
    if (waits.random() < 1 / 2) steps.splice(burst + WAITS_PER_BLOCK, 0, { leave: '/wait' }, plan(waiter, '/wait', 'GET', {}))
    // And two to /quota and one to /quota-shadow, by a stream of their own too.
    steps.splice(at(quotas), 0, quota(quotas))
    steps.splice(at(quotas), 0, quota(quotas))
    steps.splice(at(quotas), 0, plan(quotas.pick(CLIENTS), '/quota-shadow', 'GET', {}))
    // Requests held in their handler whose client hangs up while the handler goes on (each ends at a `finish`).
    steps.splice(at(aborts), 0, { release: 'runs on', path: '/hold', which: aborts.random() })
    steps.splice(at(aborts), 0, { release: 'runs on', path: '/ban', which: aborts.random() })
  }
  // /quota's month ends a third to two thirds of the way through (before, during or after the outage), and
  // the clients /quota counts most ask again at once: a month's quota used up lets them through.
  const ends = aborts.int(Math.floor(steps.length / 3), Math.floor(2 * steps.length / 3))
  steps.splice(ends, 0, 'month ends', plan('c0', '/quota', 'GET', { 'x-cost': '1' }), plan('c1', '/quota', 'GET', { 'x-cost': '1' }))
  return steps
}

/** Where the app's clock starts: as far before the month's end as the requests before 'month ends' move it, and 1 ms. */
function clockStart (steps: readonly Item[], monthEnd: number): number {
  const before = steps.slice(0, steps.indexOf('month ends'))
  return monthEnd - 1 - before.reduce((sum, step) => sum + (typeof step === 'object' && 'advance' in step ? step.advance : 0), 0)
}

/** Sends one step and waits for everything it starts on the server to finish. */
async function perform (combo: ComboApp, step: Planned, id: number, held: Map<number, Held>): Promise<Seen> {
  const events = combo.events(id)
  const what = `step ${id} (${step.text}):`
  const headers = { ...step.headers, 'x-api-key': step.client, 'x-step': String(id) }
  if (step.hold) {
    // Over a connection of its own: answered at once (refused), or held in its handler until a later step.
    const sent = await send(combo.port, step.method, step.path, headers, events.entered.promise)
    if (sent.answer === null) {
      held.set(id, { step, events, sent })
      const entry = events.entered.value!
      return { status: null, held: true, ran: true, passed: false, unenforced: false, settled: undefined, entry, ...shedding(events) }
    }
    await waitFor(events.responded.promise, `${what} the onResponse hooks`)
    const { status, headers: answered, body } = sent.answer
    const unenforced = answered['x-ratelimit-enforced'] === 'false'
    return { status, ran: false, passed: false, unenforced, settled: undefined, ...refusal(events, answered), ...shedding(events, body) }
  }
  if (step.ends === 'answered') {
    const res = await combo.app.inject({ method: step.method, url: step.path, headers, ...(step.body === undefined ? {} : { payload: step.body }) })
    await waitFor(events.responded.promise, `${what} the onResponse hooks`)
    if (events.entered.done) await waitFor(events.finished.promise, `${what} the response's close`)
    const note = res.statusCode >= 500 && !events.entered.done ? res.body.slice(0, 160) : undefined
    return {
      status: res.statusCode,
      ran: events.entered.done,
      passed: false,
      unenforced: res.headers['x-ratelimit-enforced'] === 'false',
      settled: handled(events),
      ...(events.entered.value === undefined ? {} : { entry: events.entered.value }),
      ...refusal(events, res.headers),
      ...(note === undefined ? {} : { note }),
      ...shedding(events, res.body)
    }
  }
  const before = step.ends === 'before-handler'
  const head = [
    `${step.method} ${step.path} HTTP/1.1`, 'host: localhost',
    ...Object.entries({ ...headers, ...(before ? { 'content-type': 'application/json', 'content-length': '100' } : {}) }).map(([name, value]) => `${name}: ${value}`)
  ].join('\r\n') + '\r\n\r\n'
  const status = await hangUp(combo.port, head, before ? events.passed.promise : events.entered.promise)
  if (status === null) {
    // Hung up unanswered: the server sees the abort, the plugin's abort hooks run, and a handler that waited
    // for the close settles and returns.
    if (await waitFor(events.closed.promise, `${what} the close`)) await waitFor(events.aborted.promise, `${what} the onRequestAbort hooks`)
    if (!before) await waitFor(events.handled.promise, `${what} the handler's end`)
  }
  const passed = before && status === null
  return { status, ran: events.entered.done, passed, unenforced: false, settled: handled(events), ...shedding(events) }
}

/** For the history: what was in flight as the shedder decided a request, and whether it shed it (each class's share then). */
function shedNote ({ arrival, shed }: Pick<Seen, 'arrival' | 'shed'>): string {
  if (arrival === undefined) return ''
  const { lower, upper, counted } = arrival
  const count = ` [${lower === upper ? lower : `${lower}-${upper}`} in flight${counted === lower ? '' : `, the shedder's ${counted}`}`
  if (shed === undefined) return `${count}]`
  const { normal, sheddable } = shed.admitted
  return `${count}, ${shed.outcome} (${String(shed.priority)}, shares ${+normal.toFixed(3)}/${+sheddable.toFixed(3)})]`
}

/** What the shedder made of a request: what was in flight as it decided, whether it shed it, and its answer's code. */
function shedding (events: Events, body?: string): Pick<Seen, 'arrival' | 'shed' | 'bodyCode'> {
  // Read: its code, or null for none.
  let bodyCode: string | null | undefined
  try {
    bodyCode = body === undefined ? undefined : (JSON.parse(body) as { code?: string }).code ?? null
  } catch {
    bodyCode = null
  }
  return {
    ...(events.arrival === undefined ? {} : { arrival: events.arrival }),
    ...(events.shed === undefined ? {} : { shed: events.shed }),
    ...(bodyCode === undefined ? {} : { bodyCode })
  }
}

/** A refusal's code (as Fastify's `onError` saw it) and headers. */
function refusal (events: Events, headers: Record<string, unknown>): Pick<Seen, 'code' | 'headers'> {
  const header = (name: string): string | undefined => headers[name] === undefined ? undefined : String(headers[name])
  return {
    ...(events.code === undefined ? {} : { code: events.code }),
    headers: { retryAfter: header('retry-after'), limit: header('x-ratelimit-limit'), remaining: header('x-ratelimit-remaining') }
  }
}

/** A request held open in its handler, by the step that sent it. */
interface Held {
  readonly step: Planned
  readonly events: Events
  readonly sent: Sent
}

/**
 * Ends a request held open, and waits until its slots are given back: its answer's status, or null when hung up.
 * `runs on`: its client hangs up, and the test waits for the abort's hooks only: the handler goes on, holding
 * its slots, until a later `finish` lets it end (with no answer: its client is gone).
 */
async function release (held: Map<number, Held>, id: number, how: Release['release']): Promise<number | null> {
  const { events, sent } = held.get(id)!
  const what = `held step ${id}:`
  let status: number | null = null
  if (how === 'finish' && !events.runsOn) {
    events.release.resolve()
    status = (await waitFor(sent.answered, `${what} its answer`)).status
    await waitFor(events.responded.promise, `${what} the onResponse hooks`)
  } else if (how === 'finish') {
    events.release.resolve()
  } else {
    events.runsOn = how === 'runs on'
    sent.request.destroy()
    if (await waitFor(events.closed.promise, `${what} the close`)) await waitFor(events.aborted.promise, `${what} the onRequestAbort hooks`)
    if (how === 'runs on') return null
  }
  held.delete(id)
  await waitFor(events.handled.promise, `${what} the handler's end`)
  await waitFor(events.finished.promise, `${what} the response's close`)
  // A turn for what the plugin does once the handler's work is over (its slots given back).
  await new Promise(resolve => setImmediate(resolve))
  return status
}

/** A request to /wait that waits: its answer once it comes. */
interface Pending {
  readonly step: Planned
  readonly events: Events
  readonly sent: Sent
  readonly sentAt: number
  /** When its wait ends, as the model says (performance.now()). */
  readonly until: number
  answer?: Answer
}

/**
 * Sends a request to /wait on the clock held still: when the model says it waits, the test goes on once the
 * plugin has taken it (its batch sent with the clock's time) and reads its answer when it comes; otherwise it
 * waits for the answer. Returns it as pending, or checks it at once.
 */
async function sendWait (combo: ComboApp, model: Model, step: Planned, id: number): Promise<Pending | string> {
  const events = combo.events(id)
  const headers = { ...step.headers, 'x-api-key': step.client, 'x-step': String(id) }
  const sentAt = performance.now()
  const answer = model.decideWait(step, `#${id}`, appClock.now())
  const waits = answer.kind === 'waits'
  const sent = await send(combo.port, 'GET', '/wait', headers, waits ? events.asked.promise : new Promise(() => {}))
  // The shedder decided it first: shed, it took no place on /wait.
  const got = sent.answer
  const { bodyCode } = shedding(events, got?.body)
  const retryAfter = got?.headers['retry-after'] as string | undefined
  const read = got === null || bodyCode === undefined ? undefined : { retryAfter, code: bodyCode }
  const { arrival, shed } = events
  if (model.waitShed(`#${id}`, { path: '/wait', arrival, shed, status: got?.status ?? null, ran: events.entered.done, read })) {
    return `${got?.status ?? 'no answer'} (shed)`
  }
  const pending: Pending = { step, events, sent, sentAt, until: sentAt + (waits ? answer.ms : 0) }
  sent.answered.then(got => { pending.answer = got }, () => {})
  if (sent.answer === null) return pending
  pending.answer = sent.answer
  return await answerWait(model, pending, id)
}

/** Checks the answer that came to a request to /wait; what the history says of it. */
async function answerWait (model: Model, { events, answer, sentAt }: Pending, id: number): Promise<string> {
  const { status, headers } = answer!
  if (events.entered.done) await waitFor(events.finished.promise, `/wait step ${id}: the response's close`)
  const waited = headers['x-ratelimit-waited-ms'] === undefined ? undefined : Number(headers['x-ratelimit-waited-ms'])
  model.waitAnswered(`#${id}`, status, waited, events.entered.done ? events.entered.value!.at - sentAt : undefined, headers['x-ratelimit-enforced'] === 'false')
  return `${status}${waited === undefined ? '' : ` after a wait of ${waited} ms`}`
}

/**
 * The client of a request waiting on /wait hangs up: whether it was still waiting (its handler never ran). On
 * Redis, a PING on the plugin's connection, after the call that gives its place back, answers once that has.
 */
async function leaveWait (model: Model, { events, sent }: Pending, id: number, lent: Redis | null): Promise<boolean> {
  sent.request.destroy()
  await waitFor(events.over.promise, `/wait step ${id}: the response's close`)
  // A turn first: the call may wait for the batcher's, queued after the turn `over` came on.
  await new Promise(resolve => setImmediate(resolve))
  await lent?.ping().catch(() => {})
  // Gone past its wait just before: it runs, counted, and nobody reads its answer.
  const ran = events.passed.done
  if (events.entered.done) await waitFor(events.handled.promise, `/wait step ${id}: the handler's end`)
  model.waitLeft(`#${id}`, ran)
  return !ran
}

function handled (events: Events): string | undefined {
  return events.handled.done ? events.handled.value : undefined
}

/** The shedder's mode: shadow on the in-process store under failMode 'open' (where failMode never acts), else enforce. */
function shedModeOf (where: typeof STORES[number], failMode: FailMode): 'enforce' | 'shadow' {
  return where === 'memory' && failMode === 'open' ? 'shadow' : 'enforce'
}

async function run (t: Test, seed: number, where: typeof STORES[number], failMode: FailMode): Promise<Model> {
  // Its own server, which the run stops and starts again: with an append-only file, so it keeps its data (a
  // stop writes it out) and a limit holds across the outage; a lent client, so the run knows when it is back.
  const server = where === 'redis' ? await startRedisServer(t, ['--appendonly', 'yes']) : null
  const lent = server === null ? null : await ready(client(t, server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0 }))
  const nameSpace = uniquePrefix()
  // The app's clock, held still and moved by each step, reaches /quota's month end at 'month ends'.
  const steps = sequence(seed)
  const monthEnd = periodOf('month', QUOTA_ZONE, Date.now()).end
  appClock.hold(clockStart(steps, monthEnd))
  t.teardown(() => { appClock.release() })
  const combo = await comboApp(t, lent === null ? null : { redis: lent, nameSpace }, failMode, shedModeOf(where, failMode))
  const model = new Model(failMode, monthEnd, shedModeOf(where, failMode) === 'shadow')
  const history: Array<[number, string]> = []
  const held = new Map<number, Held>()
  const waiting = new Map<number, Pending>()
  const end = async (of: number, how: Release['release'], at: number | null): Promise<void> => {
    const { text } = held.get(of)!.step
    const status = await release(held, of, how)
    history.push([at ?? -1, `${at === null ? 'at the end' : `#${at}`} ${{ finish: 'let finish', 'hang up': 'hung up', 'runs on': 'hung up (its handler runs on)' }[how]} #${of} (${text}) -> ${status ?? 'hung up'}`])
    if (how === 'runs on') model.runsOn(`#${of}`)
    else model.end(`#${of}`, text, how === 'finish' ? 'finished' : 'hung up', status)
  }
  // The answers that came to requests waiting on /wait.
  const answered = async (at: number | null): Promise<void> => {
    for (const [of, pending] of waiting) {
      if (pending.answer === undefined) continue
      waiting.delete(of)
      history.push([at ?? -1, `${at === null ? 'at the end' : `#${at}`} answered #${of} (${pending.step.text}) -> ${await answerWait(model, pending, of)}`])
    }
  }
  const leave = async (at: number | null): Promise<void> => {
    // The one whose wait ends last: still waiting, however slow the machine.
    const [of, pending] = [...waiting].filter(([, { answer }]) => answer === undefined).sort(([, a], [, b]) => b.until - a.until)[0] ?? []
    if (of === undefined || pending === undefined) return
    waiting.delete(of)
    const left = await leaveWait(model, pending, of, lent)
    history.push([at ?? -1, `${at === null ? 'at the end' : `#${at}`} hung up #${of} (${pending.step.text}) ${left ? 'while it waited' : 'once it had waited'}`])
  }
  let keys: string[] = []
  for (const [id, step] of steps.entries()) {
    await answered(id)
    if (step === 'month ends') {
      t.equal(appClock.advance(1), monthEnd, 'the app\'s clock reaches the month\'s end')
      history.push([id, `#${id} ${step} (${new Date(monthEnd).toISOString()})`])
      continue
    }
    if (typeof step === 'string') {
      if (server === null || lent === null) continue
      history.push([id, `#${id} ${step}`])
      if (step === 'redis down') {
        // Those that outlive the outage on Redis's clock (not /wait's, of a second's window).
        keys = []
        for (const key of await scanKeys(lent, nameSpace)) {
          const ttl = await lent.pttl(key)
          if (ttl === -1 || ttl > 60_000) keys.push(key)
        }
        // Not events.once: the client's 'error' (ECONNRESET) may come first, and would reject it.
        const closed = new Promise(resolve => lent.once('close', resolve))
        await server.stop()
        await waitFor(closed, 'the client seeing Redis gone')
      } else {
        await server.restart()
        await waitFor(ready(lent), 'the client reconnecting')
        // And the plugin's own connection, subscribed to operators' changes again (its reconnection has its own
        // backoff): closing the app while its SUBSCRIBE is pending makes ioredis's resubscription an unhandled rejection.
        await until(async () => ((await lent.pubsub('NUMSUB', changesChannel(nameSpace))) as [string, number])[1] === 1, 'the changes subscription again', 10_000)
        t.equal(keys.length === 0 ? 0 : await lent.exists(...keys), keys.length, `${step}: Redis came back with the ${keys.length} keys it had`)
      }
      model.redisFails(step === 'redis down')
      continue
    }
    if ('release' in step) {
      // The held request `which` points at, in the order they were sent; none held, nothing to do. A client
      // that hung up already cannot again.
      const ids = [...held].filter(([, { step: sent, events }]) => sent.path === step.path && !(events.runsOn && step.release !== 'finish')).map(([of]) => of)
      if (ids.length > 0) await end(ids[Math.floor(step.which * ids.length)]!, step.release, id)
      continue
    }
    if ('leave' in step) {
      await leave(id)
      continue
    }
    appClock.advance(step.advance)
    if (step.path === '/wait') {
      const sent = await sendWait(combo, model, step, id)
      if (typeof sent === 'string') history.push([id, `#${id} ${step.text} -> ${sent}`])
      else {
        waiting.set(id, sent)
        history.push([id, `#${id} ${step.text} -> waits`])
      }
      continue
    }
    const seen = await perform(combo, step, id, held)
    const answer = seen.held === true ? `held (${seen.entry!.running} running${seen.entry!.limit === undefined ? '' : `, limit ${seen.entry!.limit}`})` : seen.status ?? 'hung up'
    const settled = seen.settled === undefined ? '' : ` settle: ${seen.settled}`
    const code = seen.code === undefined ? '' : ` ${seen.code}`
    history.push([id, `#${id} ${step.text} -> ${answer}${seen.ran ? ' (ran)' : ''}${code}${settled}${shedNote(seen)}`])
    model.observe(step, seen, `#${id}`, appClock.now())
  }
  // What is still held is let finish, and what still waits leaves, so the app closes with nothing in flight.
  for (const id of [...held.keys()]) await end(id, 'finish', null)
  await answered(null)
  while ([...waiting.values()].some(({ answer }) => answer === undefined)) await leave(null)
  await answered(null)
  const figures = ['waited on /wait', 'left while waiting on /wait', 'refused on /wait', 'decided on /quota in the new month',
    'admitted /quota in a new month, past the last month\'s quota', 'hung up while its handler ran on /hold', 'hung up while its handler ran on /ban',
    'a refusal checked for a current reason', 'refused on a reason from another scope, still current',
    'a request shed', 'a request shed in shadow mode, let through', 'shed: critical', 'shed: normal', 'shed: sheddable',
    'a sheddable request shed below the normal line', 'a normal request admitted past the sheddable share',
    'a critical request admitted past the others\' share',
    'an exempt request admitted past the others\' share']
  t.comment(`reached: ${figures.map(kind => `${kind} ${model.tally.get(kind) ?? 0}`).join(', ')}`)
  if (process.env.COMBO_HISTORY !== undefined) t.comment(history.map(([, line]) => line).join('\n'))
  const lines = (name: Invariant): string[] => model.violations.get(name) ?? []
  for (const name of Object.keys(INVARIANTS) as Invariant[]) {
    const found = lines(name)
    // The steps up to the first violation.
    const first = found.length === 0 ? -1 : Number(/^#(\d+)/.exec(found[0]!)![1])
    const at = history.findIndex(([id]) => id === first)
    t.equal(found.length, 0, `${INVARIANTS[name]} (seed ${seed}; replay with COMBO_SEED=${seed})`, found.length === 0
      ? {}
      : { violations: found.slice(0, 5), before: history.slice(Math.max(0, at - 12), at + 1).map(([, line]) => line).join('\n') })
  }
  return model
}

/**
 * Kinds the fixed seeds reach in some run, not each: how many requests the held-open ones leave in flight when a
 * critical one comes depends on when Redis's outage ends, which the machine's speed moves (seed 7 on Redis under
 * 'closed' reached it 0 to 27 times in a run).
 */
const SOMEWHERE = ['a critical request admitted past the others\' share', 'a sheddable request shed below the normal line']
const reachedInAll = new Set<string>()

for (const seed of seeds) {
  for (const where of STORES) {
    for (const failMode of FAIL_MODES) {
      const shed = shedModeOf(where, failMode) === 'shadow' ? ', the shedder in shadow mode' : ''
      t.test(`${where}, failMode '${failMode}'${shed}: seed ${seed} (replay with COMBO_SEED=${seed})`, async t => {
        t.comment(`seed ${seed}: COMBO_SEED=${seed} replays it`)
        const model = await run(t, seed, where, failMode)
        // A fixed seed's traffic reaches every kind of step and answer, so the invariants held mean something.
        if (!FIXED_SEEDS.includes(seed) && seeds.length > 1) return
        const outage = where === 'memory' ? [] : [{ open: 'unenforced while Redis fails', closed: '503 while Redis fails', local: 'admitted in process while Redis fails' }[failMode]]
        for (const kind of [...Object.keys(ROUTES).filter(path => !ROUTES[path as Path].shadow).map(path => `admitted ${path}`),
          'refused for its count', 'refused under an enforced ban', 'a ban started on /ban', 'a ban started on /quota', 'hung up before the handler', 'hung up after the handler started',
          'settled on /settle', 'settled on /quota', 'settled on /spent', 'settle refused',
          'refused in flight', 'a refusal in flight struck toward a ban', 'let through in flight (shadow)', 'a slot freed: finished', 'a slot freed: hung up',
          'waited on /wait', 'refused on /wait', 'left while waiting on /wait', 'admitted /quota in a new month, past the last month\'s quota',
          'hung up while its handler ran on /hold', 'a handler hung up on ran to its end', ...outage,
          shed === '' ? 'a request shed' : 'a request shed in shadow mode, let through', 'a normal request admitted past the sheddable share']) {
          t.ok(model.reached.has(kind), `the traffic reached: ${kind}`)
        }
        for (const kind of model.reached) reachedInAll.add(kind)
      })
    }
  }
}

t.test('the fixed seeds reach, in some run, what no one run must', async t => {
  if (replay !== undefined && replay !== '') return
  for (const kind of SOMEWHERE) t.ok(reachedInAll.has(kind), `the traffic reached: ${kind}`)
})
