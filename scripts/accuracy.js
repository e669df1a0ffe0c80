// `npm run measure:accuracy`: how often the sliding window (two counters, an estimate) decides differently
// from the exact sliding log, on large random traffic. Uses the in-process twins from dist/ (run
// `npm run build` first), which decide exactly as the Lua scripts do (test/conformance-log-table.test.ts holds them to it).
//
// Each row: many clients, each with its own budget, sending the given traffic shape. Every decision of the
// sliding window is judged by the exact rule: would a sliding log holding the requests the sliding window
// actually let through allow this one (fewer than max in (now - window, now])?
//   false allow  the sliding window allowed, the log would deny (the client went over the limit)
//   false deny   the sliding window denied, the log would allow (the client was refused within the limit)
// Beside it: how many requests an exact sliding log running on its own allows on the same arrivals, and a
// fixed window judged the same way (the control: its only errors are false allows, at window edges), and the
// most requests either let through within any one window of a client's (the limit is max).
//
// ACCURACY_SEED=<n> for another seed; ACCURACY_CLIENTS / ACCURACY_REQUESTS (per client) to resize.

import { STEPS } from '../dist/algorithms/index.js'

const SEED = Number(process.env.ACCURACY_SEED ?? 1)
const CLIENTS = Number(process.env.ACCURACY_CLIENTS ?? 1000)
const PER_CLIENT = Number(process.env.ACCURACY_REQUESTS ?? 1000)
const T0 = 1_700_000_000_000

/** mulberry32, as test/helpers/random.ts: seedable, so a run can be replayed. */
function prng (seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const exponential = (random, mean) => -Math.log(1 - random()) * mean

/** Poisson arrivals at `factor` times the limit's rate (max per window). */
const poisson = factor => (random, { max, windowMs }) => {
  let t = 0
  return () => (t += exponential(random, windowMs / max / factor))
}

/** On for ~half a window at 4x the rate, then idle for ~1.5 windows (exponential lengths): 1x on average. */
const onOff = (random, { max, windowMs }) => {
  let t = 0
  let onUntil = exponential(random, windowMs / 2)
  return () => {
    t += exponential(random, windowMs / max / 4)
    while (t > onUntil) {
      t = onUntil + exponential(random, 1.5 * windowMs)
      onUntil = t + exponential(random, windowMs / 2)
    }
    return t
  }
}

const SHAPES = [
  { name: 'Poisson, 0.5x the limit', arrivals: poisson(0.5) },
  { name: 'Poisson, 1x the limit', arrivals: poisson(1) },
  { name: 'Poisson, 2x the limit', arrivals: poisson(2) },
  { name: 'on/off bursts (4x when on, 1x on average)', arrivals: onOff }
]

const LIMITS = [
  { max: 10, windowMs: 1000, burst: 10 },
  { max: 100, windowMs: 60_000, burst: 100 }
]

/** Arrival times (ms) inside the window, oldest first: a queue of what a sliding log holds. */
class Log {
  #times = []
  #head = 0
  /** Requests in (now - window, now]. */
  count (now, windowMs) {
    while (this.#head < this.#times.length && this.#times[this.#head] <= now - windowMs) this.#head++
    if (this.#head > 1024) {
      this.#times = this.#times.slice(this.#head)
      this.#head = 0
    }
    return this.#times.length - this.#head
  }

  add (now) { this.#times.push(now) }
}

/** One algorithm's twin for one client, its state dropped when it expires as the store would. */
function twin (algorithm, limit) {
  const step = STEPS[algorithm]
  let state
  return now => {
    if (state !== undefined && state.expiresAt <= now) state = undefined
    const counted = step.count(state, [limit], now, false)
    if (counted.state !== undefined) state = counted.state
    return counted.allowed
  }
}

/** A twin's decisions judged by the exact rule; `tally` gets its false allows and false denies. */
function judged (algorithm, limit, tally) {
  const decide = twin(algorithm, limit)
  const log = new Log()
  return now => {
    const counted = log.count(now, limit.windowMs)
    const exact = counted < limit.max
    const allowed = decide(now)
    if (allowed) {
      log.add(now)
      tally.allowed++
      tally.most = Math.max(tally.most, counted + 1)
      if (!exact) tally.falseAllows++
    } else if (exact) {
      tally.falseDenies++
    }
  }
}

function measure (shape, limit, seed) {
  const random = prng(seed)
  const estimate = { allowed: 0, falseAllows: 0, falseDenies: 0, most: 0 }
  const control = { allowed: 0, falseAllows: 0, falseDenies: 0, most: 0 }
  let exactAllowed = 0
  for (let c = 0; c < CLIENTS; c++) {
    // Each client starts somewhere in a window, so clients' requests do not line up with the window edges.
    const start = T0 + Math.floor(random() * limit.windowMs)
    const next = shape.arrivals(random, limit)
    const slidingWindow = judged('sliding-window', limit, estimate)
    const fixedWindow = judged('fixed-window', limit, control)
    const exact = new Log()
    for (let i = 0; i < PER_CLIENT; i++) {
      const now = start + Math.floor(next())
      slidingWindow(now)
      fixedWindow(now)
      if (exact.count(now, limit.windowMs) < limit.max) {
        exact.add(now)
        exactAllowed++
      }
    }
  }
  return { requests: CLIENTS * PER_CLIENT, estimate, control, exactAllowed }
}

const count = n => n.toLocaleString('en-US')
const percent = (n, of) => `${(100 * n / of).toFixed(3)}%`
const both = (n, of) => `${count(n)} (${percent(n, of)})`
const describe = ({ max, windowMs }) => `${count(max)} / ${windowMs >= 60_000 ? `${windowMs / 60_000} min` : `${windowMs / 1000} s`}`

console.log(`Sliding window (estimate) vs the exact sliding log: ${count(CLIENTS)} clients x ${count(PER_CLIENT)} requests per row, seed ${SEED}\n`)
console.log('| traffic | limit | requests | allowed: sliding window / exact log alone | wrong decisions | false allows | false denies | fixed window false allows (control) | most in one window: sliding / fixed |')
console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|')
const began = Date.now()
let row = 0
for (const shape of SHAPES) {
  for (const limit of LIMITS) {
    const { requests, estimate, control, exactAllowed } = measure(shape, limit, SEED * 1000 + row++)
    console.log(`| ${shape.name} | ${describe(limit)} | ${count(requests)} | ${count(estimate.allowed)} / ${count(exactAllowed)} | ` +
      `${both(estimate.falseAllows + estimate.falseDenies, requests)} | ${both(estimate.falseAllows, requests)} | ` +
      `${both(estimate.falseDenies, requests)} | ${both(control.falseAllows, requests)} | ${count(estimate.most)} / ${count(control.most)} |`)
  }
}
console.log(`\n(${((Date.now() - began) / 1000).toFixed(1)} s; percentages are of all requests in the row)`)
