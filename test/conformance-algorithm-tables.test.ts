// One conformance table per algorithm, each run against both stores (the Lua script on a real Redis with
// time injected, and the in-process twin on a movable clock; see helpers/stores.ts): the algorithm's own
// arithmetic (window edges, refill, bursts), then what lua/decide.lua puts around every algorithm (bans,
// several limits, overrides, escalating bans, undo, costs, settling). Every number below was worked out by hand
// from the definitions in lua/<algorithm>.lua and lua/decide.lua; both stores must give exactly it. Then a
// seeded differential test over what the one in test/conformance-log-table.test.ts does not reach: several limits per
// budget, costs, overrides set and cleared, and settling (test/helpers/costs-differential.ts).
import t from 'tap'
import type { Test } from 'tap'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { LONGEST } from '../lib/duration.js'
import type { Algorithm, Limit } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import type { Decision } from '../lib/stores/store.js'
import { LEAN_ALGORITHMS } from '../lib/stores/scripts.js'
import { uniquePrefix } from './helpers/redis.js'
import { decideInput, memoryStore, redisPaths, redisStore, summary } from './helpers/stores.js'
import type { StoreUnderTest, Stored } from './helpers/stores.js'
import { costsDifferential } from './helpers/costs-differential.js'

// The seeded differentials are CPU-bound: 30 s on a quiet machine, up to 47 s beside a CPU-bound process. A
// hang still fails within three minutes.
t.setTimeout(180_000)

const started = Date.now()
t.teardown(() => { t.comment(`conformance-algorithm-tables.test.ts ran in ${Date.now() - started} ms`) })

/**
 * Step times are offsets from a realistic epoch millisecond. T0 = 17 × 2^11 × 5^11 is a multiple of 100, 1000,
 * 2000 and 5000, so those windows start at offsets 0, 1000, 2000...; but T0 ≡ 2000 (mod 3000): a 3000 ms
 * window starts at offsets 1000, 4000, 7000...
 */
const T0 = 1_700_000_000_000

type Summary = ReturnType<typeof summary>

const allowed = (count: number, resetMs: number): Summary =>
  ({ status: 'allowed', count, resetMs, retryMs: 0, banStarted: false })
const limited = (count: number, resetMs: number, retryMs = resetMs): Summary =>
  ({ status: 'limited', count, resetMs, retryMs, banStarted: false })
/** Refused by an ongoing ban: nothing else is looked at. */
const banned = (retryMs: number): Summary =>
  ({ status: 'banned', count: 0, resetMs: 0, retryMs, banStarted: false })
/** The denial that reaches the threshold: the ban starts with this request. */
const banStarts = (count: number, resetMs: number, banMs: number): Summary =>
  ({ status: 'banned', count, resetMs, retryMs: banMs, banStarted: true })
const EMPTY = allowed(0, 0)

const lim = (max: number, windowMs: number, burst = max): Limit => ({ max, windowMs, burst })

/** One limit after a decision: [capacity, windowMs, count, resetMs]. */
type Row = [number, number, number, number]

type Step =
  | {
    at: number
    expect: Summary
    peek?: boolean
    /** The budget's limits for this step only. */
    limits?: Limit[]
    /** Every limit of the decision, in order (the override's when one is set)... */
    each?: Row[]
    /** ...and which of them is the binding one (default 0): the summary is that row's. */
    binding?: number
    offence?: number
    /** Remember the decision, for an `undo` step. */
    save?: string
    /** The request's units (1 unless told). */
    cost?: number
  }
  | { at: number, override: string, ttl: number | null }
  | { at: number, clearOverride: true }
  /** Gives back the saved decision's units (`final` 0), or settles it at `final`. */
  | { at: number, undo: string, final?: number }
  | { at: number, setBan: number }
  /** Redis only: the offences key (value and TTL), or null when there is none. */
  | { at: number, offences: { value: string, ttl: number } | null }
  /** Redis only: the sliding log's scores (offsets from T0), and its units above one per entry (UNITS's). */
  | { at: number, logHolds: number[], units?: number }
  /** Redis only: what one key holds (a hash's fields and a string as Redis keeps them; TTL from the step). */
  | { at: number, inspect: 'log' | 'backoff', holds: Stored }

interface Case {
  name: string
  limits: Limit[]
  threshold?: number
  ladder?: number[]
  forgetMs?: number
  overLimit?: 'continue' | 'backoff'
  steps: Step[]
}

const times = <T>(n: number, make: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => make(i))

/** Bans escalating on the ladder [1000, 5000, 20000], forgotten 10 s after the last ends; max 1 per 100 ms. */
function escalation (algorithm: Algorithm): Case {
  // A request at b (a multiple of 100, on a clean state), then a denial at b + 10 that starts a ban
  // (threshold 1). The sliding window counts a request until the end of the next window: 200 ms.
  const [first, deniedReset] = algorithm === 'sliding-window' ? [allowed(1, 200), 190] : [allowed(1, 100), 90]
  const ban = (b: number, ms: number, offence: number): Step[] => [
    { at: b, expect: first },
    { at: b + 10, expect: banStarts(1, deniedReset, ms), offence },
    { at: b + 9 + ms, expect: banned(1) }
  ]
  return {
    name: 'escalation: bans of 1000, 5000, 20000, 20000 ms in a row; offences live for the ban + forget; forgotten, the next is the first again',
    limits: [lim(1, 100)],
    threshold: 1,
    ladder: [1000, 5000, 20_000],
    forgetMs: 10_000,
    steps: [
      ...ban(0, 1000, 1),
      { at: 10, offences: { value: '1', ttl: 11_000 } },
      ...ban(1100, 5000, 2),
      { at: 1110, offences: { value: '2', ttl: 15_000 } },
      ...ban(6200, 20_000, 3),
      { at: 6210, offences: { value: '3', ttl: 30_000 } },
      // The ladder's last step repeats.
      ...ban(26_300, 20_000, 4),
      { at: 26_310, offences: { value: '4', ttl: 30_000 } },
      // The 4th ban ends at 46310; forgotten 10 s later.
      { at: 56_309, offences: { value: '4', ttl: 1 } },
      { at: 56_311, offences: null },
      ...ban(56_400, 1000, 1),
      { at: 56_410, offences: { value: '1', ttl: 11_000 } }
    ]
  }
}

const TABLES: Record<Algorithm, Case[]> = {
  // count = entries in the limit's window; reset = until the oldest of them leaves (one more unit free), or,
  // with more counted than max (an override lowered it), until the count is one below max; one log for all limits.
  'sliding-log': [
    {
      name: 'two limits: the strikes count within the window of the limit that waits longest; banned requests are not logged',
      limits: [lim(1, 100), lim(3, 2000)],
      threshold: 2,
      ladder: [1000],
      steps: [
        { at: 0, expect: allowed(1, 100), each: [[1, 100, 1, 100], [3, 2000, 1, 2000]] },
        // Denied by the 100 ms limit: a strike that lives 100 ms.
        { at: 50, expect: limited(1, 50, 50), each: [[1, 100, 1, 50], [3, 2000, 1, 1950]] },
        { at: 200, expect: allowed(1, 100), each: [[1, 100, 1, 100], [3, 2000, 2, 1800]] },
        // The strike of 50 is gone: this is the first again, not a ban.
        { at: 250, expect: limited(1, 50, 50), each: [[1, 100, 1, 50], [3, 2000, 2, 1750]] },
        // Both have 0 left: the binding one is the one that frees later.
        { at: 400, expect: allowed(3, 1600), each: [[1, 100, 1, 100], [3, 2000, 3, 1600]], binding: 1 },
        // Both deny; the 2000 ms limit waits longest: a strike that lives 2000 ms...
        { at: 450, expect: limited(3, 1550, 1550), each: [[1, 100, 1, 50], [3, 2000, 3, 1550]], binding: 1 },
        // ...so this second one, 150 ms later, starts the ban.
        { at: 600, expect: banStarts(3, 1400, 1000), each: [[1, 100, 0, 0], [3, 2000, 3, 1400]], binding: 1, offence: 1 },
        { at: 700, expect: banned(900), each: [[1, 100, 0, 0], [3, 2000, 0, 0]] },
        { at: 1599, expect: banned(1) },
        { at: 1600, expect: limited(3, 400, 400), binding: 1, each: [[1, 100, 0, 0], [3, 2000, 3, 400]] },
        // 0 has left; had the banned requests of 700 and 1599 been logged, this would be denied.
        { at: 2000, expect: allowed(3, 200), each: [[1, 100, 1, 100], [3, 2000, 3, 200]], binding: 1 },
        { at: 2000, logHolds: [200, 400, 2000] }
      ]
    },
    {
      name: 'two limits: allowed when both allow; a denial counts on neither; retry = the longest wait; binding = fewest remaining',
      limits: [lim(3, 1000), lim(5, 5000)],
      steps: [
        { at: 0, expect: allowed(1, 1000), each: [[3, 1000, 1, 1000], [5, 5000, 1, 5000]] },
        { at: 100, expect: allowed(2, 900), each: [[3, 1000, 2, 900], [5, 5000, 2, 4900]] },
        { at: 200, expect: allowed(3, 800), each: [[3, 1000, 3, 800], [5, 5000, 3, 4800]] },
        // Denied by the first: the second stays at 3.
        { at: 300, expect: limited(3, 700, 700), each: [[3, 1000, 3, 700], [5, 5000, 3, 4700]] },
        { at: 1000, expect: allowed(3, 100), each: [[3, 1000, 3, 100], [5, 5000, 4, 4000]] },
        // Both have 0 left: the binding one frees later.
        { at: 1100, expect: allowed(5, 3900), each: [[3, 1000, 3, 100], [5, 5000, 5, 3900]], binding: 1 },
        // The first lowered to 2 holds 3 (-1 left: binding) and waits 850; the second waits 3850: retry 3850.
        { at: 1150, limits: [lim(2, 1000), lim(5, 5000)], expect: limited(3, 850, 3850), each: [[2, 1000, 3, 850], [5, 5000, 5, 3850]] },
        // Denied by the second: the first stays at 2...
        { at: 1300, expect: limited(5, 3700, 3700), each: [[3, 1000, 2, 700], [5, 5000, 5, 3700]], binding: 1 },
        // ...as it shows 100 ms later (the denial of 1300 would be in its window).
        { at: 1400, expect: limited(5, 3600, 3600), each: [[3, 1000, 2, 600], [5, 5000, 5, 3600]], binding: 1 },
        { at: 1400, logHolds: [0, 100, 200, 1000, 1100] },
        // 0 leaves the 5 s window at 5000 exactly.
        { at: 5000, expect: allowed(5, 100), each: [[3, 1000, 1, 1000], [5, 5000, 5, 100]], binding: 1 }
      ]
    },
    {
      name: 'overrides: more, then expired at its TTL, fewer (permanent), two limits for a one-limit budget, cleared',
      limits: [lim(3, 1000)],
      steps: [
        { at: 0, expect: allowed(1, 1000) },
        { at: 0, expect: allowed(2, 1000) },
        { at: 0, expect: allowed(3, 1000) },
        { at: 0, expect: limited(3, 1000) },
        { at: 10, override: '5 1000 5', ttl: 500 },
        { at: 20, expect: allowed(4, 980), each: [[5, 1000, 4, 980]] },
        { at: 30, expect: allowed(5, 970), each: [[5, 1000, 5, 970]] },
        { at: 40, expect: limited(5, 960), each: [[5, 1000, 5, 960]] },
        { at: 509, expect: limited(5, 491), each: [[5, 1000, 5, 491]] },
        // Expired at 510: the budget's 3 again, with 5 logged: the third oldest (0) must leave.
        { at: 600, expect: limited(5, 400), each: [[3, 1000, 5, 400]] },
        { at: 700, override: '1 1000 1', ttl: null },
        // 0 ×3 left at 1000; 20 and 30 are 2 for a max of 1: 30 must leave.
        { at: 1000, expect: limited(2, 30), each: [[1, 1000, 2, 30]] },
        { at: 1030, expect: allowed(1, 1000), each: [[1, 1000, 1, 1000]] },
        { at: 1040, expect: limited(1, 990), each: [[1, 1000, 1, 990]] },
        { at: 1050, override: '2 1000 2;3 5000 3', ttl: 10_000 },
        { at: 1100, expect: allowed(2, 930), each: [[2, 1000, 2, 930], [3, 5000, 2, 4930]] },
        { at: 1200, expect: limited(2, 830), each: [[2, 1000, 2, 830], [3, 5000, 2, 4830]] },
        { at: 2100, expect: allowed(3, 3930), each: [[2, 1000, 1, 1000], [3, 5000, 3, 3930]], binding: 1 },
        { at: 2200, expect: limited(3, 3830), each: [[2, 1000, 1, 900], [3, 5000, 3, 3830]], binding: 1 },
        { at: 2300, clearOverride: true },
        // The budget's one limit: 1030 and 1100 have left its window.
        { at: 2400, expect: allowed(2, 700), each: [[3, 1000, 2, 700]] }
      ]
    },
    {
      name: 'undo removes exactly that request\'s entry, from every limit; one more request is allowed',
      limits: [lim(3, 1000), lim(10, 5000)],
      steps: [
        { at: 0, expect: allowed(1, 1000), each: [[3, 1000, 1, 1000], [10, 5000, 1, 5000]], save: 'a' },
        { at: 100, expect: allowed(2, 900), save: 'b' },
        { at: 200, expect: allowed(3, 800) },
        { at: 300, expect: limited(3, 700) },
        { at: 300, undo: 'b' },
        { at: 300, logHolds: [0, 200] },
        { at: 300, peek: true, expect: allowed(2, 700), each: [[3, 1000, 2, 700], [10, 5000, 2, 4700]] },
        { at: 310, expect: allowed(3, 690), each: [[3, 1000, 3, 690], [10, 5000, 3, 4690]] },
        { at: 320, expect: limited(3, 680) },
        // Three in one millisecond, each its own entry: undo takes one.
        { at: 2000, expect: allowed(1, 1000), each: [[3, 1000, 1, 1000], [10, 5000, 4, 3000]] },
        { at: 2000, expect: allowed(2, 1000), save: 'd' },
        { at: 2000, expect: allowed(3, 1000) },
        { at: 2000, expect: limited(3, 1000) },
        { at: 2000, undo: 'd' },
        { at: 2000, logHolds: [0, 200, 310, 2000, 2000] },
        { at: 2000, expect: allowed(3, 1000), each: [[3, 1000, 3, 1000], [10, 5000, 6, 3000]] },
        { at: 2000, expect: limited(3, 1000) },
        // a (at 0) has left the 1 s window, not the 5 s one: undoing it frees one there.
        { at: 2500, undo: 'a' },
        { at: 2500, logHolds: [200, 310, 2000, 2000, 2000] },
        { at: 2500, peek: true, expect: limited(3, 500), each: [[3, 1000, 3, 500], [10, 5000, 5, 2700]] }
      ]
    },
    escalation('sliding-log')
  ],

  // A counter per window aligned to the epoch; reset = until the window ends (when more units are free).
  'fixed-window': [
    {
      name: 'window edges on the epoch (3000 ms windows start at offsets 1000, 4000): 2 × max pass within 4 ms across one',
      limits: [lim(3, 3000)],
      steps: [
        { at: 0, peek: true, expect: EMPTY },
        // The window [-2000, 1000): the first request's reset is 2, not 3000.
        { at: 998, expect: allowed(1, 2), each: [[3, 3000, 1, 2]] },
        { at: 999, expect: allowed(2, 1) },
        { at: 999, expect: allowed(3, 1) },
        { at: 999, expect: limited(3, 1) },
        // [1000, 4000): a fresh count at 1000 exactly.
        { at: 1000, expect: allowed(1, 3000) },
        { at: 1000, expect: allowed(2, 3000) },
        { at: 1001, expect: allowed(3, 2999) },
        { at: 1001, expect: limited(3, 2999) },
        { at: 2500, expect: limited(3, 1500) },
        { at: 3999, expect: limited(3, 1) },
        { at: 4000, expect: allowed(1, 3000) }
      ]
    },
    {
      name: 'bans: threshold 2, 300 ms; banned requests are not counted',
      limits: [lim(1, 1000)],
      threshold: 2,
      ladder: [300],
      steps: [
        { at: 0, expect: allowed(1, 1000) },
        { at: 10, expect: limited(1, 990) },
        { at: 20, expect: banStarts(1, 980, 300), offence: 1 },
        { at: 100, expect: banned(220) },
        { at: 319, expect: banned(1) },
        // Still 1 counted: the banned requests of 100 and 319 were not. The strikes started over.
        { at: 320, expect: limited(1, 680) },
        { at: 1000, expect: allowed(1, 1000) }
      ]
    },
    {
      name: 'two limits: allowed when both allow; a denial counts on neither; retry = the longest wait',
      limits: [lim(2, 1000), lim(3, 5000)],
      steps: [
        { at: 0, expect: allowed(1, 1000), each: [[2, 1000, 1, 1000], [3, 5000, 1, 5000]] },
        { at: 100, expect: allowed(2, 900), each: [[2, 1000, 2, 900], [3, 5000, 2, 4900]] },
        { at: 200, expect: limited(2, 800), each: [[2, 1000, 2, 800], [3, 5000, 2, 4800]] },
        { at: 1000, expect: allowed(3, 4000), each: [[2, 1000, 1, 1000], [3, 5000, 3, 4000]], binding: 1 },
        // Denied by the 5 s limit: the 1 s one stays at 1.
        { at: 1100, expect: limited(3, 3900), each: [[2, 1000, 1, 900], [3, 5000, 3, 3900]], binding: 1 },
        // Both deny (the first lowered to 1): it waits 800, the second 3800.
        { at: 1200, limits: [lim(1, 1000), lim(3, 5000)], expect: limited(3, 3800), each: [[1, 1000, 1, 800], [3, 5000, 3, 3800]], binding: 1 },
        { at: 1300, expect: limited(3, 3700), each: [[2, 1000, 1, 700], [3, 5000, 3, 3700]], binding: 1 },
        { at: 5000, expect: allowed(1, 1000), each: [[2, 1000, 1, 1000], [3, 5000, 1, 5000]] }
      ]
    },
    {
      name: 'overrides: more, then expired at its TTL, fewer (permanent), two limits for a one-limit budget, cleared',
      limits: [lim(2, 1000)],
      steps: [
        { at: 0, expect: allowed(1, 1000) },
        { at: 10, expect: allowed(2, 990) },
        { at: 20, expect: limited(2, 980) },
        { at: 30, override: '5 1000 5', ttl: 400 },
        { at: 40, expect: allowed(3, 960), each: [[5, 1000, 3, 960]] },
        { at: 50, expect: allowed(4, 950) },
        { at: 60, expect: allowed(5, 940) },
        { at: 70, expect: limited(5, 930), each: [[5, 1000, 5, 930]] },
        { at: 500, expect: limited(5, 500), each: [[2, 1000, 5, 500]] },
        { at: 1000, expect: allowed(1, 1000), each: [[2, 1000, 1, 1000]] },
        { at: 1010, override: '1 1000 1', ttl: null },
        { at: 1020, expect: limited(1, 980), each: [[1, 1000, 1, 980]] },
        // Limit 1 keeps its window (1000 ms), so its count; limit 2 starts counting.
        { at: 1030, override: '3 1000 3;4 5000 4', ttl: 10_000 },
        { at: 1040, expect: allowed(2, 960), each: [[3, 1000, 2, 960], [4, 5000, 1, 3960]] },
        { at: 1050, expect: allowed(3, 950), each: [[3, 1000, 3, 950], [4, 5000, 2, 3950]] },
        { at: 2000, expect: allowed(3, 3000), each: [[3, 1000, 1, 1000], [4, 5000, 3, 3000]], binding: 1 },
        { at: 2010, expect: allowed(4, 2990), each: [[3, 1000, 2, 990], [4, 5000, 4, 2990]], binding: 1 },
        { at: 2020, expect: limited(4, 2980), each: [[3, 1000, 2, 980], [4, 5000, 4, 2980]], binding: 1 },
        { at: 2030, clearOverride: true },
        { at: 2040, expect: limited(2, 960), each: [[2, 1000, 2, 960]] }
      ]
    },
    {
      // A longer window that begins at the same moment as the shorter one counted (T0 is a multiple of both):
      // its count goes on to the longer window's end, the counters' TTL with it (set for the short window, they
      // once vanished at its end, and the count started over mid-window).
      name: 'a window lengthened by an override at the same start keeps its count, and its counters, to its end',
      limits: [lim(5, 100)],
      steps: [
        { at: 0, expect: allowed(1, 100) },
        { at: 10, override: '3 1000 3', ttl: null },
        { at: 50, expect: allowed(2, 950), each: [[3, 1000, 2, 950]] },
        { at: 150, expect: allowed(3, 850), each: [[3, 1000, 3, 850]] },
        { at: 200, expect: limited(3, 800), each: [[3, 1000, 3, 800]] },
        { at: 1000, expect: allowed(1, 1000), each: [[3, 1000, 1, 1000]] }
      ]
    },
    {
      name: 'undo gives one back on every limit whose window is still the one counted; from a passed window, nothing',
      limits: [lim(2, 1000), lim(3, 5000)],
      steps: [
        { at: 0, expect: allowed(1, 1000), each: [[2, 1000, 1, 1000], [3, 5000, 1, 5000]], save: 'a' },
        { at: 100, expect: allowed(2, 900), each: [[2, 1000, 2, 900], [3, 5000, 2, 4900]], save: 'b' },
        { at: 200, expect: limited(2, 800), each: [[2, 1000, 2, 800], [3, 5000, 2, 4800]] },
        { at: 200, undo: 'b' },
        { at: 300, peek: true, expect: allowed(1, 700), each: [[2, 1000, 1, 700], [3, 5000, 1, 4700]] },
        { at: 300, expect: allowed(2, 700), each: [[2, 1000, 2, 700], [3, 5000, 2, 4700]] },
        { at: 400, expect: limited(2, 600) },
        { at: 1000, expect: allowed(3, 4000), each: [[2, 1000, 1, 1000], [3, 5000, 3, 4000]], binding: 1 },
        // a was counted in [0, 1000) (passed: the first limit keeps 1) and [0, 5000) (current: 3 -> 2).
        { at: 1100, undo: 'a' },
        { at: 1100, peek: true, expect: allowed(2, 3900), each: [[2, 1000, 1, 900], [3, 5000, 2, 3900]], binding: 1 },
        { at: 1100, expect: allowed(3, 3900), each: [[2, 1000, 2, 900], [3, 5000, 3, 3900]], binding: 1 },
        { at: 1200, expect: limited(3, 3800), each: [[2, 1000, 2, 800], [3, 5000, 3, 3800]], binding: 1 },
        { at: 5000, expect: allowed(1, 1000), each: [[2, 1000, 1, 1000], [3, 5000, 1, 5000]], save: 'd' },
        { at: 6000, expect: allowed(2, 4000), each: [[2, 1000, 1, 1000], [3, 5000, 2, 4000]], binding: 1 },
        // d's 1 s window has passed (the first limit keeps the 1 of 6000); its 5 s window has not.
        { at: 6100, undo: 'd' },
        { at: 6100, peek: true, expect: allowed(1, 900), each: [[2, 1000, 1, 900], [3, 5000, 1, 3900]] }
      ]
    },
    escalation('fixed-window')
  ],

  // prev × (window - elapsed) / window + curr, windows aligned to the epoch; count = that, rounded up; reset =
  // until the count is one lower (below max when past it): the first millisecond a request of the units left + 1
  // fits, later in this window or in the next (a window's requests weigh on the next one until it ends).
  'sliding-window': [
    {
      name: 'the weighted estimate at a few points, and retry the first millisecond that fits',
      limits: [lim(10, 1000)],
      steps: [
        // One unit fewer once (i + 1) × (1000 - e)/1000 <= i in the next window: at e = 1000 / (i + 1).
        ...times(10, (i): Step => ({ at: 0, expect: allowed(i + 1, 2000 - Math.floor(i * 1000 / (i + 1))) })),
        // This window alone is full: the next fits once 10 × (1000 - elapsed) / 1000 + 1 <= 10, at 1100.
        { at: 0, expect: limited(10, 1100) },
        // 10 × 1000/1000 = 10.
        { at: 1000, peek: true, expect: limited(10, 100) },
        // 10 × 750/1000 = 7.5: counts as 8, and one fits.
        { at: 1250, peek: true, expect: allowed(8, 50) },
        { at: 1250, expect: allowed(9, 50) },
        { at: 1250, expect: allowed(10, 50) },
        // 7.5 + 3 > 10; 10 × (1000 - e)/1000 + 3 <= 10 at e = 300.
        { at: 1250, expect: limited(10, 50) },
        { at: 1300, expect: allowed(10, 100) },
        // 10 × 667/1000 = 6.67 (7) + 3; 6.0 + 4 fits at 1400.
        { at: 1333, expect: limited(10, 67) },
        // 10 × 1/1000 = 0.01, rounded up to 1.
        { at: 1999, peek: true, expect: allowed(4, 1) },
        // The 3 of [1000, 2000) are now the previous window's: 3, 1.5 (2), then nothing.
        { at: 2000, peek: true, expect: allowed(3, 334) },
        { at: 2500, peek: true, expect: allowed(2, 167) },
        { at: 3000, peek: true, expect: EMPTY }
      ]
    },
    {
      name: 'bans: threshold 2, 300 ms; banned requests are not counted',
      limits: [lim(2, 1000)],
      threshold: 2,
      ladder: [300],
      steps: [
        { at: 0, expect: allowed(1, 2000) },
        { at: 10, expect: allowed(2, 1490) },
        { at: 20, expect: limited(2, 1480) },
        { at: 30, expect: banStarts(2, 1470, 300), offence: 1 },
        { at: 100, expect: banned(230) },
        { at: 329, expect: banned(1) },
        { at: 330, expect: limited(2, 1170) },
        // 2 × 500/1000 + 1 <= 2: fits. Had the banned requests counted, the previous window would hold 4.
        { at: 1500, expect: allowed(2, 500) }
      ]
    },
    {
      name: 'two limits: allowed when both allow; a denial counts on neither; retry = the longest wait',
      limits: [lim(2, 1000), lim(3, 5000)],
      steps: [
        { at: 0, expect: allowed(1, 2000), each: [[2, 1000, 1, 2000], [3, 5000, 1, 10_000]] },
        { at: 100, expect: allowed(2, 1400), each: [[2, 1000, 2, 1400], [3, 5000, 2, 7400]] },
        // Denied by the first (it fits again at 1500): the second stays at 2.
        { at: 200, expect: limited(2, 1300), each: [[2, 1000, 2, 1300], [3, 5000, 2, 7300]] },
        { at: 1500, expect: allowed(3, 5167), each: [[2, 1000, 2, 500], [3, 5000, 3, 5167]], binding: 1 },
        // Both deny: the first until 2000 (400), the second until 3 × (5000 - e)/5000 + 1 <= 3, at 6667 (5067).
        { at: 1600, expect: limited(3, 5067), each: [[2, 1000, 2, 400], [3, 5000, 3, 5067]], binding: 1 },
        // Denied by the second: the first shows 1 (the previous window's 1 weighs 1000/1000), then 900/1000.
        { at: 2000, expect: limited(3, 4667), each: [[2, 1000, 1, 1000], [3, 5000, 3, 4667]], binding: 1 },
        { at: 2100, expect: limited(3, 4567), each: [[2, 1000, 1, 900], [3, 5000, 3, 4567]], binding: 1 },
        // 3 × 3333/5000 = 1.9998 (2) + 1 <= 3.
        { at: 6667, expect: allowed(3, 1667), each: [[2, 1000, 1, 1333], [3, 5000, 3, 1667]], binding: 1 }
      ]
    },
    {
      name: 'overrides: more, then expired at its TTL, fewer (permanent), two limits for a one-limit budget, cleared',
      limits: [lim(2, 1000)],
      steps: [
        { at: 0, expect: allowed(1, 2000) },
        { at: 10, expect: allowed(2, 1490) },
        { at: 20, expect: limited(2, 1480) },
        { at: 30, override: '4 1000 4', ttl: 500 },
        { at: 40, expect: allowed(3, 1294), each: [[4, 1000, 3, 1294]] },
        { at: 50, expect: allowed(4, 1200), each: [[4, 1000, 4, 1200]] },
        { at: 60, expect: limited(4, 1190), each: [[4, 1000, 4, 1190]] },
        // Back to max 2 with 4 counted: fits when 4 × (1000 - e)/1000 + 1 <= 2, at 1750.
        { at: 600, expect: limited(4, 1150), each: [[2, 1000, 4, 1150]] },
        { at: 700, override: '1 1000 1', ttl: null },
        { at: 1000, expect: limited(4, 1000, 1000), each: [[1, 1000, 4, 1000]] },
        { at: 2000, expect: allowed(1, 2000), each: [[1, 1000, 1, 2000]] },
        { at: 2010, override: '2 1000 2;10 5000 10', ttl: 5000 },
        { at: 2020, expect: allowed(2, 1480), each: [[2, 1000, 2, 1480], [10, 5000, 1, 7980]] },
        { at: 2030, expect: limited(2, 1470), each: [[2, 1000, 2, 1470], [10, 5000, 1, 7970]] },
        { at: 2040, clearOverride: true },
        { at: 2050, expect: limited(2, 1450), each: [[2, 1000, 2, 1450]] }
      ]
    },
    {
      name: 'undo gives one back in the window it was counted in, current or previous',
      limits: [lim(3, 1000)],
      steps: [
        { at: 0, expect: allowed(1, 2000), save: 'a' },
        { at: 100, expect: allowed(2, 1400), save: 'b' },
        { at: 200, expect: allowed(3, 1134) },
        { at: 300, expect: limited(3, 1034) },
        { at: 300, undo: 'b' },
        { at: 300, peek: true, expect: allowed(2, 1200) },
        { at: 310, expect: allowed(3, 1024) },
        { at: 320, expect: limited(3, 1014) },
        // 3 × 500/1000 = 1.5 (2) + 1.
        { at: 1500, expect: allowed(3, 167), save: 'd' },
        { at: 1500, expect: limited(3, 167) },
        // a is in the previous window now: it weighs 2 × 500/1000 = 1 instead of 1.5.
        { at: 1500, undo: 'a' },
        { at: 1500, peek: true, expect: allowed(2, 500) },
        { at: 1500, expect: allowed(3, 500) },
        { at: 1500, expect: limited(3, 500) },
        // d's window no longer counts at 3000: undoing it changes nothing.
        { at: 3500, undo: 'd' },
        { at: 3500, peek: true, expect: EMPTY }
      ]
    },
    escalation('sliding-window')
  ],

  // GCRA: count = tokens in use (rounded up), reset = until one more token is back (one window / max after the
  // last one counted at most); capacity = burst.
  'token-bucket': [
    {
      name: 'a full bucket lets burst through at once, then one every window/max ms; idle, it is full again',
      limits: [lim(4, 1000)],
      steps: [
        { at: 0, peek: true, expect: EMPTY },
        { at: 0, expect: allowed(1, 250), each: [[4, 1000, 1, 250]] },
        { at: 0, expect: allowed(2, 250) },
        { at: 0, expect: allowed(3, 250) },
        { at: 0, expect: allowed(4, 250) },
        { at: 0, expect: limited(4, 250) },
        { at: 249, expect: limited(4, 1) },
        { at: 250, expect: allowed(4, 250) },
        { at: 251, expect: limited(4, 249) },
        { at: 500, expect: allowed(4, 250) },
        { at: 1500, peek: true, expect: EMPTY },
        ...times(4, (i): Step => ({ at: 1500, expect: allowed(i + 1, 250) })),
        { at: 1500, expect: limited(4, 250) },
        // Half refilled.
        { at: 2000, peek: true, expect: allowed(2, 250) },
        { at: 2000, expect: allowed(3, 250) },
        { at: 2000, expect: allowed(4, 250) },
        { at: 2000, expect: limited(4, 250) }
      ]
    },
    {
      name: 'max 3 per 1000 ms: a token every 333.33 ms, retry the first whole millisecond it is back',
      limits: [lim(3, 1000)],
      steps: [
        { at: 0, expect: allowed(1, 334) },
        { at: 0, expect: allowed(2, 334) },
        { at: 0, expect: allowed(3, 334) },
        { at: 0, expect: limited(3, 334) },
        { at: 333, expect: limited(3, 1) },
        { at: 334, expect: allowed(3, 333) },
        { at: 334, expect: limited(3, 333) },
        { at: 666, expect: limited(3, 1) },
        { at: 667, expect: allowed(3, 333) },
        { at: 667, expect: limited(3, 333) },
        { at: 1000, expect: allowed(3, 334) },
        { at: 1000, expect: limited(3, 334) }
      ]
    },
    {
      name: 'burst < max: 10 per 1000 ms, 2 at once; a token every 100 ms',
      limits: [lim(10, 1000, 2)],
      steps: [
        { at: 0, expect: allowed(1, 100), each: [[2, 1000, 1, 100]] },
        { at: 0, expect: allowed(2, 100) },
        { at: 0, expect: limited(2, 100) },
        { at: 100, expect: allowed(2, 100) },
        { at: 150, expect: limited(2, 50) },
        { at: 200, expect: allowed(2, 100) },
        { at: 400, expect: allowed(1, 100) }
      ]
    },
    {
      name: 'burst > max: 2 per 1000 ms, 5 at once; a token every 500 ms',
      limits: [lim(2, 1000, 5)],
      steps: [
        ...times(5, (i): Step => ({ at: 0, expect: allowed(i + 1, 500), each: [[5, 1000, i + 1, 500]] })),
        { at: 0, expect: limited(5, 500) },
        { at: 499, expect: limited(5, 1) },
        { at: 500, expect: allowed(5, 500) },
        { at: 1000, expect: allowed(5, 500) },
        { at: 3000, peek: true, expect: allowed(1, 500) },
        { at: 3500, peek: true, expect: EMPTY },
        ...times(5, (i): Step => ({ at: 3500, expect: allowed(i + 1, 500) })),
        { at: 3500, expect: limited(5, 500) }
      ]
    },
    {
      name: 'bans: threshold 2, 300 ms; banned requests take no token',
      limits: [lim(1, 1000)],
      threshold: 2,
      ladder: [300],
      steps: [
        { at: 0, expect: allowed(1, 1000) },
        { at: 100, expect: limited(1, 900) },
        { at: 200, expect: banStarts(1, 800, 300), offence: 1 },
        { at: 300, expect: banned(200) },
        { at: 499, expect: banned(1) },
        { at: 500, expect: limited(1, 500) },
        // Full at 1000: the banned requests of 300 and 499 took nothing.
        { at: 1000, expect: allowed(1, 1000) }
      ]
    },
    {
      name: 'two limits: allowed when both allow; a denial takes from neither; binding = fewest remaining, then the later reset',
      limits: [lim(2, 1000), lim(5, 10_000)],
      steps: [
        { at: 0, expect: allowed(1, 500), each: [[2, 1000, 1, 500], [5, 10_000, 1, 2000]] },
        { at: 0, expect: allowed(2, 500), each: [[2, 1000, 2, 500], [5, 10_000, 2, 2000]] },
        { at: 0, expect: limited(2, 500), each: [[2, 1000, 2, 500], [5, 10_000, 2, 2000]] },
        { at: 500, expect: allowed(2, 500), each: [[2, 1000, 2, 500], [5, 10_000, 3, 1500]] },
        // One left on each, and one more unit on each 500 ms from now: the first binds.
        { at: 1500, expect: allowed(1, 500), each: [[2, 1000, 1, 500], [5, 10_000, 4, 500]] },
        { at: 1500, expect: allowed(2, 500), each: [[2, 1000, 2, 500], [5, 10_000, 5, 500]] },
        // One left on each again; the second's next unit is later (2000 ms, against 500): it binds.
        { at: 2000, peek: true, expect: allowed(4, 2000), each: [[2, 1000, 1, 500], [5, 10_000, 4, 2000]], binding: 1 },
        { at: 2500, expect: allowed(5, 1500), each: [[2, 1000, 1, 500], [5, 10_000, 5, 1500]], binding: 1 },
        // Denied by the second: the first keeps 1 in use...
        { at: 2500, expect: limited(5, 1500), each: [[2, 1000, 1, 500], [5, 10_000, 5, 1500]], binding: 1 },
        // ...(0.8 at 2600, not 1.8).
        { at: 2600, expect: limited(5, 1400), each: [[2, 1000, 1, 400], [5, 10_000, 5, 1400]], binding: 1 },
        { at: 12_000, peek: true, expect: EMPTY, each: [[2, 1000, 0, 0], [5, 10_000, 0, 0]] },
        { at: 12_000, expect: allowed(1, 500), each: [[2, 1000, 1, 500], [5, 10_000, 1, 2000]] }
      ]
    },
    {
      name: 'overrides: more, then expired at its TTL, fewer (permanent), two limits for a one-limit budget, cleared',
      limits: [lim(2, 1000)],
      steps: [
        { at: 0, expect: allowed(1, 500) },
        { at: 0, expect: allowed(2, 500) },
        { at: 0, expect: limited(2, 500) },
        // The bucket is full at 1000: with 5 per second, 4.9 tokens in use at 20, of 8.
        { at: 10, override: '5 1000 8', ttl: 500 },
        { at: 20, expect: allowed(6, 180), each: [[8, 1000, 6, 180]] },
        { at: 20, expect: allowed(7, 180) },
        { at: 20, expect: allowed(8, 180) },
        { at: 20, expect: limited(8, 180) },
        { at: 300, expect: allowed(8, 100), each: [[8, 1000, 8, 100]] },
        // Back to 2 per second, full at 1800: 2.4 tokens in use of 2.
        { at: 600, expect: limited(3, 700), each: [[2, 1000, 3, 700]] },
        { at: 700, override: '1 1000 1', ttl: null },
        { at: 2000, expect: allowed(1, 1000), each: [[1, 1000, 1, 1000]] },
        { at: 2500, expect: limited(1, 500, 500) },
        { at: 2600, override: '2 1000 2;3 6000 3', ttl: 10_000 },
        { at: 2700, expect: allowed(2, 300), each: [[2, 1000, 2, 300], [3, 6000, 1, 2000]] },
        { at: 3500, expect: allowed(2, 1200), each: [[2, 1000, 1, 500], [3, 6000, 2, 1200]], binding: 1 },
        { at: 4000, expect: allowed(3, 700), each: [[2, 1000, 1, 500], [3, 6000, 3, 700]], binding: 1 },
        { at: 4500, expect: limited(3, 200), each: [[2, 1000, 0, 0], [3, 6000, 3, 200]], binding: 1 },
        { at: 4600, clearOverride: true },
        { at: 4700, expect: allowed(1, 500), each: [[2, 1000, 1, 500]] }
      ]
    },
    {
      name: 'undo gives one token back on every limit, and never fills a bucket past full',
      limits: [lim(2, 1000), lim(3, 3000)],
      steps: [
        { at: 0, expect: allowed(1, 500), each: [[2, 1000, 1, 500], [3, 3000, 1, 1000]], save: 'a' },
        { at: 0, expect: allowed(2, 500), each: [[2, 1000, 2, 500], [3, 3000, 2, 1000]], save: 'b' },
        { at: 0, expect: limited(2, 500) },
        { at: 100, undo: 'b' },
        { at: 100, peek: true, expect: allowed(1, 400), each: [[2, 1000, 1, 400], [3, 3000, 1, 900]] },
        { at: 100, expect: allowed(2, 400), each: [[2, 1000, 2, 400], [3, 3000, 2, 900]] },
        { at: 100, expect: limited(2, 400) },
        // The first bucket is full again, the second is not.
        { at: 1500, peek: true, expect: allowed(1, 500), each: [[2, 1000, 0, 0], [3, 3000, 1, 500]], binding: 1 },
        { at: 1500, undo: 'a' },
        { at: 1500, peek: true, expect: EMPTY, each: [[2, 1000, 0, 0], [3, 3000, 0, 0]] },
        { at: 1500, expect: allowed(1, 500), each: [[2, 1000, 1, 500], [3, 3000, 1, 1000]] },
        { at: 1500, expect: allowed(2, 500), each: [[2, 1000, 2, 500], [3, 3000, 2, 1000]] },
        { at: 1500, expect: limited(2, 500) }
      ]
    },
    escalation('token-bucket')
  ]
}

/** What a request over the limit does, as a Case spells it. */
type Over = 'continue' | 'backoff'

/**
 * overLimit (lua/decide.lua, the same for every algorithm), max 2 per 1000 ms: the algorithm's first denial
 * holds the client off for the window (1000 ms); each denial while held holds it again, for the window
 * ('continue') or twice the last wait ('backoff'), counting nothing on the algorithm; a denial reports the
 * limit at its capacity, reset = the wait. A peek counts nothing and escalates nothing: the client one over
 * its limit for what is left of a window since the last denial, then the algorithm's peek.
 */
function overLimit (algorithm: Algorithm, over: Over): Case {
  const sw = algorithm === 'sliding-window'
  const fw = algorithm === 'fixed-window'
  const tb = algorithm === 'token-bucket'
  const backoff = over === 'backoff'
  // The wait set by the kth denial in a row.
  const wait = (k: number): number => backoff ? 1000 * 2 ** (k - 1) : 1000
  // The reset of the two requests of 0 and 10, seen at `at` (< 1000): the log's first leaves at 1000, the window
  // ends at 1000, the sliding window's estimate is one lower at 1500 (2 x 500/1000), a token is back at 500.
  const held = (at: number): number => (sw ? 1500 : tb ? 500 : 1000) - at
  // The algorithm's peek at 1060: the requests of 0 and 10 have left, but for the sliding window's estimate
  // (2 x 940 / 1000 of the previous window: it fits, and is one lower, at 1500).
  const quiet = sw ? limited(2, 440) : EMPTY
  const tail: Step[] = backoff
    ? (() => {
        // Counted at 8060 and 8061: the fixed window [8000, 9000) ends; the sliding window's estimate is one
        // lower at 10000 (one counted), 9500 (two: 2 x 500/1000); a token is back at 8560 (500 ms after the
        // first); the log's first leaves at 9060.
        const again = (at: number): number => (fw ? 9000 : sw ? (at === 8060 ? 10_000 : 9500) : tb ? 8560 : 9060) - at
        return [
          // Held until 8060: long past the window, the algorithm's peek.
          { at: 8059, peek: true, expect: EMPTY },
          // The key's expiry millisecond: over (PTTL 0), as a ban.
          { at: 8060, expect: allowed(1, again(8060)) },
          { at: 8061, expect: allowed(2, again(8061)) },
          // A peek over the limit is the algorithm's answer, and holds nothing.
          { at: 8061, peek: true, expect: limited(2, again(8061)) },
          { at: 8061, inspect: 'backoff', holds: { type: 'none' } },
          { at: 8062, expect: limited(2, 1000, 1000) },
          { at: 8062, inspect: 'backoff', holds: { type: 'string', value: '1', ttl: 1000 } },
          { at: 9063, inspect: 'backoff', holds: { type: 'none' } },
          { at: 10_100, expect: allowed(1, fw ? 900 : sw ? 1900 : tb ? 500 : 1000) }
        ]
      })()
    : sw
      // Quiet for the window since the last denial: the sliding window's estimate still denies (a hold of
      // 1000 more), and lets the client through once it stops for one more window.
      ? [
          { at: 1060, expect: limited(2, 1000, 1000) },
          { at: 1060, inspect: 'backoff', holds: { type: 'string', value: '1', ttl: 1000 } },
          { at: 2060, expect: allowed(1, 1940) }
        ]
      // Quiet for the window since the last denial: let through.
      : [{ at: 1060, expect: allowed(1, fw ? 940 : tb ? 500 : 1000) }]
  return {
    name: `${over}: held for ${backoff ? '1000, 2000, 4000, 8000 ms' : '1000 ms from each denial'} without counting; peeks see one over the limit for a window, then the algorithm`,
    limits: [lim(2, 1000)],
    overLimit: over,
    steps: [
      { at: 0, expect: allowed(1, sw ? 2000 : tb ? 500 : 1000) },
      { at: 10, expect: allowed(2, held(10)) },
      // Denied by the algorithm: held for the window, from now; the limit shows none left until then.
      { at: 20, expect: limited(2, 1000, 1000) },
      { at: 20, inspect: 'backoff', holds: { type: 'string', value: '1', ttl: 1000 } },
      // Held: denied without counting.
      { at: 30, expect: limited(2, wait(2), wait(2)) },
      { at: 40, expect: limited(2, wait(3), wait(3)) },
      { at: 40, inspect: 'backoff', holds: { type: 'string', value: '3', ttl: wait(3) } },
      // A window from the last denial (40) is left until 1040: the peek sees the client one over its limit.
      { at: 50, peek: true, expect: limited(3, 990, 990) },
      { at: 60, expect: limited(2, wait(4), wait(4)) },
      { at: 60, inspect: 'backoff', holds: { type: 'string', value: '4', ttl: wait(4) } },
      { at: 1000, peek: true, expect: limited(3, 60, 60) },
      { at: 1059, peek: true, expect: limited(3, 1, 1) },
      // A window after the last denial: the algorithm's peek ('backoff' still holds a decision until 8060).
      { at: 1060, peek: true, expect: quiet },
      ...tail
    ]
  }
}

/**
 * @fastify/rate-limit's own continueExceeding example, max 2 per 3000 ms (the sliding log, its default):
 * X-RateLimit-Reset 3, 2, then 3 and 3 on the 429s (Retry-After 3): each denial holds the client a full
 * window. Keeping the newest max requests in the log would have said 2 at 2000.
 */
const UPSTREAM_CONTINUE: Case = {
  name: 'continue, as @fastify/rate-limit: resets 3000, 2000, then 3000 from each denial; a window of quiet lets the client through',
  limits: [lim(2, 3000)],
  overLimit: 'continue',
  steps: [
    { at: 0, expect: allowed(1, 3000) },
    { at: 1000, expect: allowed(2, 2000) },
    { at: 1001, expect: limited(2, 3000, 3000) },
    { at: 2000, expect: limited(2, 3000, 3000) },
    { at: 2000, logHolds: [0, 1000] },
    { at: 2000, inspect: 'backoff', holds: { type: 'string', value: '2', ttl: 3000 } },
    { at: 2500, peek: true, expect: limited(3, 2500, 2500) },
    { at: 5000, expect: allowed(1, 3000) }
  ]
}

/**
 * overLimit 'backoff', max 1 per 1000 ms: the wait doubles until it would pass the longest duration
 * (2^53 - 1024 ms; @fastify/rate-limit's cap is 2^53 - 1): from k = 45 (1000 x 2^44 > 2^53), it is the longest.
 */
function backoffCap (algorithm: Algorithm): Case {
  return {
    name: 'backoff: the wait doubles until it would pass the longest duration, and stops there; the key\'s TTL is that wait',
    limits: [lim(1, 1000)],
    overLimit: 'backoff',
    steps: [
      { at: 0, expect: allowed(1, algorithm === 'sliding-window' ? 2000 : 1000) },
      { at: 10, expect: limited(1, 1000, 1000) },
      // k = 2 to 44: 2000 ... 1000 × 2^43.
      ...times(43, (i): Step => ({ at: 11 + i, expect: limited(1, 1000 * 2 ** (i + 1)) })),
      { at: 54, expect: limited(1, LONGEST) },
      { at: 56, expect: limited(1, LONGEST) },
      { at: 56, inspect: 'backoff', holds: { type: 'string', value: '46', ttl: LONGEST } },
      // What is left of one window since the last denial, 1 ms ago (the twin's expiry, T0 + 56 + LONGEST, is
      // past 2^53 but even: exact in a double).
      { at: 57, peek: true, expect: limited(2, 999) }
    ]
  }
}

/** The same in the twin on a clock at 0 (all requests at 0). */
function backoffCapAtZero (algorithm: Algorithm): Case {
  return {
    name: 'backoff, the twin\'s clock at 0: the wait stops at the longest duration',
    limits: [lim(1, 1000)],
    overLimit: 'backoff',
    steps: [
      { at: 0, expect: allowed(1, algorithm === 'sliding-window' ? 2000 : 1000) },
      ...times(44, (i): Step => ({ at: 0, expect: limited(1, 1000 * 2 ** i) })),
      { at: 0, expect: limited(1, LONGEST) },
      { at: 0, expect: limited(1, LONGEST) },
      { at: 0, peek: true, expect: limited(2, 1000) }
    ]
  }
}

/** overLimit under a ban policy (threshold 3): a ban is answered first; denials over the limit strike. */
function overLimitBans (algorithm: Algorithm, over: Over): Case {
  const backoff = over === 'backoff'
  return {
    name: `${over} with bans: the first denial and the held ones are strikes alike; the third starts the ban, answered first`,
    limits: [lim(1, 1000)],
    overLimit: over,
    threshold: 3,
    ladder: [5000],
    steps: [
      { at: 0, expect: allowed(1, algorithm === 'sliding-window' ? 2000 : 1000) },
      { at: 10, expect: limited(1, 1000, 1000) },
      { at: 20, expect: limited(1, backoff ? 2000 : 1000) },
      { at: 30, expect: banStarts(1, backoff ? 4000 : 1000, 5000) },
      // Still held (to 4030 or 1030), but banned: the ban answers.
      { at: 40, expect: banned(4990) },
      { at: 40, peek: true, expect: banned(4990) },
      { at: 5029, expect: banned(1) },
      // The hold ended; the request of 0 has left every window.
      { at: 5030, expect: allowed(1, { 'sliding-log': 1000, 'fixed-window': 970, 'sliding-window': 1970, 'token-bucket': 1000 }[algorithm]) }
    ]
  }
}

/**
 * The peeks of @fastify/rate-limit's own tests ("With { increment: false } and continueExceeding /
 * exponentialBackoff"), max 1 per 1000 ms: after the denials, a peek sees the client exceeded (count 2) for
 * what is left of a window since the last denial (900), then the algorithm's answer.
 */
function upstreamPeeks (algorithm: Algorithm, over: Over): Case {
  const sw = algorithm === 'sliding-window'
  const backoff = over === 'backoff'
  // The last denial at 100 ('continue') or 200 ('backoff'); a window later, the request of 0 has left, but
  // for the sliding window's estimate (its previous window, weighted).
  const later = backoff ? 1300 : 1200
  return {
    name: `${over}: a peek after the denials sees the client one over its limit for what is left of the window, then the algorithm`,
    limits: [lim(1, 1000)],
    overLimit: over,
    steps: [
      { at: 0, expect: allowed(1, sw ? 2000 : 1000) },
      { at: 100, expect: limited(1, 1000) },
      ...(backoff ? [{ at: 200, expect: limited(1, 2000) }] : []),
      { at: later - 1000, peek: true, expect: limited(2, 900) },
      { at: later, peek: true, expect: sw ? limited(1, 2000 - later) : EMPTY }
    ]
  }
}

/**
 * overLimit with two limits (the sliding log, 1 per 100 ms and 3 per 2000 ms): the hold is the longest
 * window, and every limit shows none left (a peek: one over) until it ends.
 */
function overLimitTwoLimits (over: Over): Case {
  const second = over === 'backoff' ? 4000 : 2000
  return {
    name: `${over}, two limits: held for the longest window (2000), then ${second}; every limit at its capacity`,
    limits: [lim(1, 100), lim(3, 2000)],
    overLimit: over,
    steps: [
      { at: 0, expect: allowed(1, 100), each: [[1, 100, 1, 100], [3, 2000, 1, 2000]] },
      { at: 50, expect: limited(1, 2000), each: [[1, 100, 1, 2000], [3, 2000, 3, 2000]] },
      { at: 60, expect: limited(1, second), each: [[1, 100, 1, second], [3, 2000, 3, second]] },
      { at: 60, inspect: 'backoff', holds: { type: 'string', value: '2', ttl: second } },
      { at: 1000, peek: true, expect: limited(2, 1060), each: [[1, 100, 2, 1060], [3, 2000, 4, 1060]] },
      { at: 4059, peek: true, expect: EMPTY, each: [[1, 100, 0, 0], [3, 2000, 0, 0]] },
      { at: 4060, expect: allowed(1, 100), each: [[1, 100, 1, 100], [3, 2000, 1, 2000]] }
    ]
  }
}

function describe (step: Step): string {
  const { at, ...rest } = step
  return `at ${at}: ${JSON.stringify(rest)}`
}

const rowsOf = (d: Decision): Row[] => d.limits.map(l => [l.limit, l.windowMs, l.count, l.resetMs])

/** Runs a case's steps at `origin` + each step's `at` (T0 unless told). */
async function runCase (t: Test, store: StoreUnderTest, algorithm: Algorithm, c: Case, origin = T0): Promise<void> {
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:192.0.2.7', algorithm)
  const saved = new Map<string, { decision: Decision, cost: number | undefined }>()
  for (const step of c.steps) {
    const now = origin + step.at
    const what = `${store.kind} ${describe(step)}`
    if ('override' in step) {
      await store.setValue(keys.override, step.override, step.ttl, now)
    } else if ('clearOverride' in step) {
      await store.delete([keys.override], now)
    } else if ('setBan' in step) {
      await store.setBan(keys.banned, step.setBan, now)
    } else if ('undo' in step) {
      const { decision: d, cost } = saved.get(step.undo)!
      await store.settle({ keys, limits: c.limits, algorithm, member: d.member, at: d.at, ...(cost === undefined ? {} : { cost }), final: step.final ?? 0 }, now)
    } else if ('offences' in step) {
      if (store.inspect === undefined) continue
      const stored = await store.inspect(keys.offences, now)
      t.strictSame(stored, step.offences === null ? { type: 'none' } : { type: 'string', ...step.offences }, what)
    } else if ('logHolds' in step) {
      if (store.inspect === undefined) continue
      const stored = await store.inspect(keys.log, now)
      const entries = stored.type === 'zset' ? stored.scores.filter((_, i) => stored.members[i] !== '+') : []
      t.strictSame(entries.map(s => s - T0), step.logHolds, what)
      const units = stored.type === 'zset' ? stored.scores.filter((_, i) => stored.members[i] === '+') : []
      t.strictSame(units.map(s => -s), step.units === undefined || step.units === 0 ? [] : [step.units], `${what}: units above one per entry`)
    } else if ('holds' in step) {
      if (store.inspect === undefined) continue
      t.strictSame(await store.inspect(keys[step.inspect], now), step.holds, what)
    } else {
      const input = decideInput({
        keys,
        algorithm,
        limits: step.limits ?? c.limits,
        banThreshold: c.threshold ?? 0,
        ladder: c.ladder,
        forgetMs: c.forgetMs,
        peek: step.peek === true,
        overLimit: c.overLimit,
        cost: step.cost
      })
      const d = await store.decide(input, now)
      t.strictSame(summary(d), step.expect, what)
      if (step.each !== undefined) {
        t.strictSame(rowsOf(d), step.each, `${what}: every limit`)
        t.strictSame([d.limit, d.windowMs, d.count, d.resetMs], step.each[step.binding ?? 0], `${what}: the binding limit`)
      }
      if (step.offence !== undefined) t.equal(d.offence, step.offence, `${what}: offence`)
      if (step.save !== undefined) saved.set(step.save, { decision: d, cost: step.cost })
    }
  }
}

for (const algorithm of ALGORITHMS) {
  t.test(`${algorithm}: the table, on both stores`, async t => {
    const redises = await redisPaths(t, algorithm)
    for (const c of TABLES[algorithm]) {
      t.test(c.name, async t => {
        for (const redis of redises) await runCase(t, redis, algorithm, c)
        await runCase(t, memoryStore(t), algorithm, c)
      })
    }
  })
}

for (const algorithm of ALGORITHMS) {
  t.test(`${algorithm}: overLimit 'continue' and 'backoff', on both stores`, async t => {
    const redises = await redisPaths(t, algorithm)
    const cases = (['continue', 'backoff'] as const).flatMap(over => [overLimit(algorithm, over), overLimitBans(algorithm, over), upstreamPeeks(algorithm, over)])
    for (const c of [...cases, backoffCap(algorithm)]) {
      t.test(c.name, async t => {
        for (const redis of redises) await runCase(t, redis, algorithm, c)
        await runCase(t, memoryStore(t), algorithm, c)
      })
    }
    const c = backoffCapAtZero(algorithm)
    t.test(c.name, async t => { await runCase(t, memoryStore(t), algorithm, c, 0) })
  })
}

// The log and the fixed window only add and compare times, so they take any window a duration can be: up to
// the longest, 2^53 - 1024 ms (@fastify/rate-limit's '285421 years'). The log's reset, oldest + window - now,
// passes 2^53 on the way: both stores round it alike (here its entries are at even offsets from an even T0, so
// it is exact).
t.test('the longest window, 2^53 - 1024 ms, on the log and the fixed window, on both stores', async t => {
  const redis = await redisStore(t)
  const cases: Array<[Algorithm, Case]> = [
    ['sliding-log', {
      name: 'sliding log, 2 per 2^53 - 1024 ms',
      limits: [lim(2, LONGEST)],
      steps: [
        { at: 0, expect: allowed(1, LONGEST) },
        { at: 1000, expect: allowed(2, LONGEST - 1000) },
        { at: 2000, expect: limited(2, LONGEST - 2000) },
        { at: 2000, logHolds: [0, 1000] }
      ]
    }],
    ['fixed-window', {
      name: 'fixed window, 2 per 2^53 - 1024 ms: the window started at the epoch',
      limits: [lim(2, LONGEST)],
      steps: [
        { at: 1, expect: allowed(1, LONGEST - T0 - 1) },
        { at: 1001, expect: allowed(2, LONGEST - T0 - 1001) },
        { at: 2001, expect: limited(2, LONGEST - T0 - 2001) }
      ]
    }]
  ]
  for (const [algorithm, c] of cases) {
    t.test(c.name, async t => {
      await runCase(t, redis, algorithm, c)
      await runCase(t, memoryStore(t), algorithm, c)
    })
  }
})

t.test('overLimit on the sliding log: @fastify/rate-limit\'s continueExceeding example, and two limits', async t => {
  const redises = await redisPaths(t, 'sliding-log')
  for (const c of [UPSTREAM_CONTINUE, overLimitTwoLimits('continue'), overLimitTwoLimits('backoff')]) {
    t.test(c.name, async t => {
      for (const redis of redises) await runCase(t, redis, 'sliding-log', c)
      await runCase(t, memoryStore(t), 'sliding-log', c)
    })
  }
})

// Redis keeps a key through its expiry millisecond (PTTL 0, GET still answers; see helpers/stores.ts). A
// ban is over at that millisecond (decide.lua reads PTTL > 0), and strikes start over (PTTL <= 0). An
// override, the offences count and a budget's state are read as Redis keeps them (GET, INCR, ZRANGE...):
// through their expiry millisecond, in the twin too (MemoryStore's #live).
t.test('an override, the offences count and a log live through their expiry millisecond, as in Redis; a ban ends at it', async t => {
  const redises = await redisPaths(t, 'sliding-log')
  const cases: Case[] = [
    {
      name: 'override set for 500 ms at 0: in force through 500, gone at 501',
      limits: [lim(1, 1000)],
      steps: [
        { at: 0, override: '3 1000 3', ttl: 500 },
        { at: 100, expect: allowed(1, 1000), each: [[3, 1000, 1, 1000]] },
        { at: 200, expect: allowed(2, 900), each: [[3, 1000, 2, 900]] },
        { at: 499, expect: allowed(3, 601), each: [[3, 1000, 3, 601]] },
        { at: 500, expect: limited(3, 600, 600), each: [[3, 1000, 3, 600]] },
        // The budget's max 1 with 3 logged: 100 and 200 must leave, retry 499 + 1000 - 501.
        { at: 501, expect: limited(3, 998), each: [[1, 1000, 3, 998]] },
        // A ban set for 500 ms at 1000 is over at 1500.
        { at: 1000, setBan: 500 },
        { at: 1499, expect: banned(1) },
        { at: 1500, expect: allowed(1, 1000), each: [[1, 1000, 1, 1000]] }
      ]
    },
    {
      name: 'offences (ban 1000 + forget 1000 from 10): still counted through 2010, forgotten at 2011',
      limits: [lim(1, 100)],
      threshold: 1,
      ladder: [1000, 5000],
      forgetMs: 1000,
      steps: [
        { at: 0, expect: allowed(1, 100) },
        { at: 10, expect: banStarts(1, 90, 1000), offence: 1 },
        { at: 10, offences: { value: '1', ttl: 2000 } },
        { at: 2000, expect: allowed(1, 100) },
        { at: 2009, offences: { value: '1', ttl: 1 } },
        { at: 2011, expect: banStarts(1, 89, 1000), offence: 1 }
      ]
    },
    {
      name: 'a log kept 100 ms (the budget\'s window) and read through a longer override: counted through 100',
      limits: [lim(2, 100)],
      steps: [
        { at: 0, expect: allowed(1, 100), each: [[2, 100, 1, 100]] },
        { at: 10, override: '3 1000 3', ttl: 5000 },
        { at: 50, peek: true, expect: allowed(1, 950), each: [[3, 1000, 1, 950]] },
        { at: 99, peek: true, expect: allowed(1, 901), each: [[3, 1000, 1, 901]] },
        { at: 100, expect: allowed(2, 900), each: [[3, 1000, 2, 900]] }
      ]
    }
  ]
  for (const c of cases) {
    t.test(c.name, async t => {
      for (const redis of redises) await runCase(t, redis, 'sliding-log', c)
      await runCase(t, memoryStore(t), 'sliding-log', c)
    })
  }
})

// lua/sliding-log.lua: "the log lives until its newest entry leaves, and at most one longest window more"
// (its TTL is set to two windows when less than one is left, never lowered). When a call with shorter
// windows (an override) trims every entry, the ZSET is empty and Redis deletes it, TTL and all: the entry
// added next makes a new log of two of its own (short) windows. After the override, that log is gone.
t.test('sliding log: a log emptied under a shorter window lives two of its new entry\'s windows', async t => {
  const redises = await redisPaths(t, 'sliding-log')
  const c: Case = {
    name: 'budget 1 per 800 ms; at 100 a 70 ms override trims the entry of 0; its own log is gone at 240',
    limits: [lim(1, 800)],
    steps: [
      { at: 0, expect: allowed(1, 800) },
      { at: 10, override: '5 70 5', ttl: 200 },
      { at: 100, expect: allowed(1, 70), each: [[5, 70, 1, 70]] },
      { at: 100, logHolds: [100] },
      { at: 169, peek: true, expect: allowed(1, 1), each: [[5, 70, 1, 1]] },
      { at: 171, peek: true, expect: allowed(0, 0), each: [[5, 70, 0, 0]] },
      { at: 240, logHolds: [100] },
      { at: 241, logHolds: [] },
      // The override ended at 210: the budget's window again, and nothing logged.
      { at: 300, expect: allowed(1, 800), each: [[1, 800, 1, 800]] }
    ]
  }
  for (const redis of redises) await runCase(t, redis, 'sliding-log', c)
  await runCase(t, memoryStore(t), 'sliding-log', c)
})

// Requests that cost more than one unit (`cost`): counted, refused and given back in units; one that costs more
// than a limit's capacity is refused with a retry of 0 (it never passes), counting nothing and no strike.
const COSTS: Record<Algorithm, Case[]> = {
  'sliding-log': [
    {
      name: 'costs: each entry keeps its cost, the log its units above one; a wait lasts until enough units leave',
      limits: [lim(10, 1000)],
      steps: [
        { at: 0, cost: 4, expect: allowed(4, 1000) },
        { at: 100, cost: 5, expect: allowed(9, 900) },
        // One unit must leave: the entry of 0, worth 4, leaves at 1000.
        { at: 200, cost: 2, expect: limited(9, 800, 800) },
        { at: 300, expect: allowed(10, 700) },
        { at: 400, cost: 11, expect: limited(10, 600, 0) },
        { at: 1000, cost: 4, expect: allowed(10, 100), save: 'e' },
        { at: 1000, logHolds: [100, 300, 1000], units: 7 },
        { at: 1050, expect: limited(10, 50, 50) },
        // 100 (worth 5) has left: 300 (1) and 1000 (4) remain.
        { at: 1100, expect: allowed(6, 200) },
        { at: 1100, logHolds: [300, 1000, 1100], units: 3 },
        { at: 1150, undo: 'e' },
        { at: 1150, logHolds: [300, 1100], units: 0 },
        // Every entry one unit again: the wait is found by rank.
        { at: 1200, cost: 9, expect: limited(2, 100, 100) }
      ]
    },
    {
      name: 'costs under two limits: the shorter window counts the units inside it',
      limits: [lim(5, 100), lim(8, 1000)],
      steps: [
        { at: 0, cost: 3, expect: allowed(3, 100), each: [[5, 100, 3, 100], [8, 1000, 3, 1000]] },
        { at: 50, cost: 2, expect: allowed(5, 50), each: [[5, 100, 5, 50], [8, 1000, 5, 950]] },
        { at: 120, cost: 2, expect: allowed(7, 880), each: [[5, 100, 4, 30], [8, 1000, 7, 880]], binding: 1 },
        { at: 130, cost: 2, peek: true, expect: limited(7, 870, 870), each: [[5, 100, 4, 20], [8, 1000, 7, 870]], binding: 1 },
        { at: 130, cost: 2, expect: limited(7, 870, 870), each: [[5, 100, 4, 20], [8, 1000, 7, 870]], binding: 1 },
        { at: 130, logHolds: [0, 50, 120], units: 4 }
      ]
    }
  ],
  'fixed-window': [
    {
      name: 'costs: a window counts units; a cost above max is refused with no wait',
      limits: [lim(10, 1000)],
      steps: [
        { at: 0, cost: 4, expect: allowed(4, 1000) },
        { at: 100, cost: 6, expect: allowed(10, 900) },
        { at: 200, expect: limited(10, 800, 800) },
        { at: 300, cost: 11, expect: limited(10, 700, 0) },
        { at: 1000, cost: 7, expect: allowed(7, 1000), save: 'a' },
        { at: 1100, undo: 'a' },
        { at: 1100, cost: 10, expect: allowed(10, 900) }
      ]
    }
  ],
  'sliding-window': [
    {
      name: 'costs: both counters count units; the wait is when the request\'s units fit the estimate',
      limits: [lim(10, 1000)],
      steps: [
        { at: 0, cost: 4, expect: allowed(4, 1250) },
        { at: 500, cost: 6, expect: allowed(10, 600) },
        // This window has no room: it fits once 10 x (1000 - elapsed) + 1000 <= 10000 in the next, at 1100.
        { at: 600, expect: limited(10, 500) },
        { at: 700, cost: 11, expect: limited(10, 400, 0) },
        { at: 1500, cost: 5, expect: allowed(10, 100), save: 'a' },
        // 10 x (1000 - elapsed) + 7000 <= 10000 from 1700.
        { at: 1600, cost: 2, expect: limited(9, 100) },
        { at: 1600, undo: 'a' },
        { at: 1600, cost: 2, expect: allowed(6, 100) }
      ]
    }
  ],
  'token-bucket': [
    {
      name: 'costs: a unit is one emission interval; a cost above the burst is refused with no wait',
      limits: [lim(10, 1000)],
      steps: [
        { at: 0, cost: 4, expect: allowed(4, 100) },
        { at: 0, cost: 6, expect: allowed(10, 100) },
        // 9 units in use at 100; 3 more fit once 2 have dripped out, at 300.
        { at: 100, cost: 3, expect: limited(9, 100, 200) },
        { at: 100, cost: 11, expect: limited(9, 100, 0) },
        { at: 300, cost: 3, expect: allowed(10, 100), save: 'a' },
        { at: 300, undo: 'a' },
        { at: 300, cost: 3, expect: allowed(10, 100) }
      ]
    },
    {
      name: 'costs: the capacity is the burst, not max',
      limits: [lim(10, 1000, 5)],
      steps: [
        { at: 0, cost: 6, expect: limited(0, 0, 0) },
        { at: 0, cost: 5, expect: allowed(5, 100) }
      ]
    }
  ]
}

// Settling (`final`): a request counted at one cost comes to count another, up or down (0 gives it back), on the
// state it was counted in; once that is gone (the entry left, the window ended) nothing changes. The token
// bucket takes or returns the difference when it is settled.
const SETTLES: Record<Algorithm, Case> = {
  'sliding-log': {
    name: 'settle: an entry comes to weigh what the request cost, up or down; one that has left stays gone',
    limits: [lim(10, 1000)],
    steps: [
      { at: 0, cost: 2, expect: allowed(2, 1000), save: 'a' },
      { at: 100, expect: allowed(3, 900), save: 'b' },
      { at: 150, undo: 'a', final: 6 },
      { at: 150, logHolds: [0, 100], units: 5 },
      { at: 200, cost: 4, expect: limited(7, 800, 800) },
      { at: 250, undo: 'b', final: 0 },
      { at: 250, logHolds: [0], units: 5 },
      { at: 300, cost: 4, expect: allowed(10, 700) },
      { at: 1000, expect: allowed(5, 300) },
      { at: 1000, undo: 'a', final: 0 },
      { at: 1000, logHolds: [300, 1000], units: 3 },
      // A log's only entry settled up: the log is never empty on the way, so it keeps its TTL.
      { at: 5000, expect: allowed(1, 1000), save: 'y' },
      { at: 5010, undo: 'y', final: 3 },
      { at: 5010, logHolds: [5000], units: 2 },
      { at: 5020, expect: allowed(4, 980) },
      // Two entries at one time, of different costs: the one settled is the one of the request's cost.
      { at: 6000, expect: allowed(2, 20) },
      { at: 6000, cost: 3, expect: allowed(5, 20), save: 'q' },
      { at: 6010, undo: 'q', final: 0 },
      { at: 6010, logHolds: [5020, 6000], units: 0 }
    ]
  },
  'fixed-window': {
    name: 'settle: the window the request was counted in counts its final cost; a later window is not touched',
    limits: [lim(10, 1000)],
    steps: [
      { at: 0, cost: 2, expect: allowed(2, 1000), save: 'a' },
      { at: 100, undo: 'a', final: 7 },
      { at: 200, cost: 3, expect: allowed(10, 800) },
      { at: 300, expect: limited(10, 700, 700) },
      { at: 1000, expect: allowed(1, 1000) },
      { at: 1100, undo: 'a', final: 0 },
      { at: 1100, expect: allowed(2, 900) }
    ]
  },
  'sliding-window': {
    name: 'settle: the current window\'s counter, or the previous one\'s once the request\'s window has passed',
    limits: [lim(10, 1000)],
    steps: [
      // One unit fewer once 2 x (1000 - e) / 1000 <= 1 in the next window: at 1500.
      { at: 0, cost: 2, expect: allowed(2, 1500), save: 'a' },
      { at: 100, undo: 'a', final: 5 },
      // 10 x (1000 - e) / 1000 <= 9 at e = 100: 1100.
      { at: 100, cost: 5, expect: allowed(10, 1000), save: 'b' },
      { at: 200, expect: limited(10, 900) },
      // b's 5 leave its window's count, the previous window's now: its other 5 weigh 5 x (1000 - 500) / 1000, 3 rounded up;
      // 2 at 1600.
      { at: 1500, undo: 'b', final: 0 },
      { at: 1500, cost: 7, expect: allowed(10, 100) }
    ]
  },
  'token-bucket': {
    name: 'settle: the difference is taken from the bucket or put back when settled, even once it has refilled',
    limits: [lim(10, 1000)],
    steps: [
      { at: 0, cost: 2, expect: allowed(2, 100), save: 'a' },
      { at: 100, undo: 'a', final: 8 },
      { at: 100, cost: 4, expect: limited(7, 100) },
      { at: 100, cost: 3, expect: allowed(10, 100), save: 'b' },
      { at: 5000, undo: 'b', final: 5 },
      { at: 5000, cost: 9, expect: limited(2, 100) }
    ]
  }
}

/** A refused costly request counts no strike; a denial that does counts as any other. Max 2 per second. */
function costsAndBans (algorithm: Algorithm): Case {
  // One unit is free again when the log's first entry leaves or the window ends (1000), when the sliding window's
  // estimate of 2 x (1000 - e) / 1000 is 1 (1500), when the bucket's first token is back (500).
  const reset = (at: number): number => ({ 'sliding-window': 1500, 'token-bucket': 500 }[algorithm as string] ?? 1000) - at
  const retry = { 'sliding-log': 970, 'fixed-window': 970, 'sliding-window': 1470, 'token-bucket': 470 }[algorithm]
  return {
    name: 'costs: a request above the capacity strikes nothing; an ordinary denial strikes',
    limits: [lim(2, 1000)],
    threshold: 2,
    ladder: [5000],
    steps: [
      { at: 0, cost: 2, expect: allowed(2, reset(0)) },
      { at: 10, cost: 3, expect: limited(2, reset(10), 0) },
      { at: 20, cost: 3, expect: limited(2, reset(20), 0) },
      { at: 30, expect: limited(2, reset(30), retry) },
      { at: 40, expect: banStarts(2, reset(40), 5000), offence: 1 }
    ]
  }
}

for (const algorithm of ALGORITHMS) {
  t.test(`${algorithm}: costs, on both stores`, async t => {
    const redises = await redisPaths(t, algorithm)
    for (const c of [...COSTS[algorithm], SETTLES[algorithm], costsAndBans(algorithm)]) {
      t.test(c.name, async t => {
        for (const redis of redises) await runCase(t, redis, algorithm, c)
        await runCase(t, memoryStore(t), algorithm, c)
      })
    }
  })
}

// A fixed seed whose traffic reaches every kind of answer, and a fresh one each run to explore further.
// CONFORMANCE_SEED=<n> replays one.
const FIXED_SEED = 4
const seeds = process.env.CONFORMANCE_SEED !== undefined
  ? [Number(process.env.CONFORMANCE_SEED)]
  : [FIXED_SEED, Math.floor(Math.random() * 2 ** 32)]

for (const algorithm of ALGORITHMS) {
  // An algorithm's requests of the lean shape go to its lean script (LEAN_ALGORITHMS) unless `lean` is false:
  // both paths, the general one on the fixed seed (the random one explores the default path).
  for (const lean of LEAN_ALGORITHMS.includes(algorithm) ? [true, false] : [true]) {
    for (const seed of lean ? seeds : seeds.slice(0, 1)) {
      t.test(`differential (${algorithm}${lean ? '' : ', general path only'}): several limits, costs, overrides and settling, identical on both stores step by step (seed ${seed})`, async t => {
        await costsDifferential(t, algorithm, seed, seed === FIXED_SEED || seeds.length === 1, { lean })
      })
    }
  }
}
