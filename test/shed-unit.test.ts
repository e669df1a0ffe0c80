// The load shedder's decisions on their own (lib/shed/shedder.ts, lib/shed/adaptive.ts), on a clock the test
// moves: the reserve of the critical class, each class's share halved under pressure lowest first and ramped
// back when calm, shares admitted exactly; and the adaptive in-flight capacity against a simulated dependency of
// N parallel slots (each request holding one for S ms, the rest queueing): it must settle within 20% of the
// best fixed capacity a sweep finds on the same dependency, and follow a step in S (or N) within seconds.
// test/shed.test.ts takes the shedder over HTTP.
import t from 'tap'
import { checkShed } from '../lib/options/shed.js'
import type { ResolvedAdaptive, ResolvedShed } from '../lib/options/shed.js'
import { AdaptiveLimit } from '../lib/shed/adaptive.js'
import { NO_READINGS, Shedder } from '../lib/shed/shedder.js'

const options = (given: object): ResolvedShed => checkShed({ eventLoopDelay: false, eventLoopUtilization: false, ...given }, 'shed')!

t.test('the critical class keeps its reserve: the others stop at limit × (1 − reserve), critical at the limit', async t => {
  const shedder = new Shedder(options({ inFlight: 10, reserve: 0.3 }), 0)
  for (let i = 0; i < 7; i++) {
    t.equal(shedder.decide('normal'), null, `normal ${i + 1} of 7`)
    shedder.started()
  }
  t.equal(shedder.decide('normal'), 'in-flight', 'the eighth normal request is shed: 7 = 10 × 0.7')
  t.equal(shedder.decide('sheddable'), 'in-flight')
  for (let i = 0; i < 3; i++) {
    t.equal(shedder.decide('critical'), null, `critical ${i + 1} of the 3 reserved`)
    shedder.started()
  }
  t.equal(shedder.decide('critical'), 'in-flight', 'critical shed once the whole capacity is in flight')
  t.equal(shedder.decide('exempt'), null, 'exempt never')
  shedder.done(5, 0)
  t.equal(shedder.decide('critical'), null, 'one done: room for a critical one')
  t.equal(shedder.decide('normal'), 'in-flight', 'but not for a normal one (9 in flight)')
  t.equal(shedder.snapshot().inFlight, 9)
  t.equal(shedder.snapshot().limit, 10)
})

t.test('without an in-flight capacity nothing is shed for it', async t => {
  const shedder = new Shedder(options({}), 0)
  for (let i = 0; i < 10_000; i++) shedder.started()
  t.equal(shedder.decide('sheddable'), null)
  shedder.sample(100, null, NO_READINGS)
  t.equal(shedder.snapshot().over, null)
  t.equal(shedder.snapshot().limit, null)
  t.equal(shedder.snapshot().minRttMs, null)
})

t.test('under pressure the lowest class is halved first, each sample; critical and exempt never', async t => {
  const shedder = new Shedder(options({ sampleInterval: 100, recovery: 1000 }), 0)
  const shares = (): [number, number] => [shedder.snapshot().admitted.normal, shedder.snapshot().admitted.sheddable]
  const seen: Array<[number, number]> = []
  for (let i = 1; i <= 8; i++) {
    shedder.sample(i * 100, 'pressure', NO_READINGS)
    seen.push(shares())
  }
  t.strictSame(seen, [[1, 0.5], [1, 0.25], [1, 0.125], [1, 0.0625], [1, 0.03125], [1, 0], [0.5, 0], [0.25, 0]],
    'sheddable halved to nothing (below 2% it is shed whole), then normal')
  t.equal(shedder.decide('sheddable'), 'pressure')
  t.equal(shedder.decide('critical'), null)
  t.equal(shedder.decide('exempt'), null)
  t.equal(shedder.snapshot().over, 'pressure')
  // Calm: normal regains 100 / 1000 a sample first, then sheddable; the reason stays the last signal's.
  const calm: Array<[number, number]> = []
  for (let i = 1; i <= 10; i++) {
    shedder.sample(1000 + i * 100, null, NO_READINGS)
    calm.push(shares().map(share => Math.round(share * 100) / 100) as [number, number])
  }
  t.strictSame(calm, [[0.35, 0], [0.45, 0], [0.55, 0], [0.65, 0], [0.75, 0], [0.85, 0], [0.95, 0], [1, 0], [1, 0.1], [1, 0.2]],
    'ramped back a step a sample, normal before sheddable: no flapping back to all at once')
  t.equal(shedder.decide('sheddable'), 'pressure', 'a sheddable request shed while its class ramps back says the last reason')
  t.equal(shedder.snapshot().over, null)
})

t.test('a share is admitted exactly: 0.25 lets in every fourth request', async t => {
  const shedder = new Shedder(options({}), 0)
  shedder.sample(100, 'event-loop-delay', NO_READINGS)
  shedder.sample(200, 'event-loop-delay', NO_READINGS)
  t.equal(shedder.snapshot().admitted.sheddable, 0.25)
  const answers = Array.from({ length: 12 }, () => shedder.decide('sheddable'))
  t.strictSame(answers.map(a => a === null), [false, false, false, true, false, false, false, true, false, false, false, true])
  t.ok(answers.every(a => a === null || a === 'event-loop-delay'))
})

t.test('a full capacity sheds lowest class first by its own lines, and is no pressure on the shares', async t => {
  const shedder = new Shedder(options({ inFlight: 10 }), 0)
  for (let i = 0; i < 7; i++) shedder.started()
  t.equal(shedder.decide('sheddable'), 'in-flight', 'sheddable from 10 × 0.8² = 6.4: 7')
  t.equal(shedder.decide('normal'), null, 'normal until 10 × 0.8 = 8')
  shedder.started()
  t.equal(shedder.decide('normal'), 'in-flight')
  shedder.sample(100, null, NO_READINGS)
  t.equal(shedder.snapshot().over, null, 'requests turned away for room: no signal')
  t.strictSame(shedder.snapshot().admitted, { critical: 1, normal: 1, sheddable: 1 }, 'the shares stay whole: the capacity sheds exactly what does not fit')
})

t.test('a probe of the adaptive capacity sheds no critical request', async t => {
  const shedder = new Shedder(options({ inFlight: { floor: 2, ceiling: 100, probeInterval: '1 second' } }), 0)
  // Grown to 11 by nine busy samples, then the tenth starts a probe (a second since the start), holding it at its floor.
  for (let i = 1; i <= 10; i++) {
    while (shedder.inFlight < shedder.limit) shedder.started()
    shedder.done(10, i * 100 - 50)
    shedder.sample(i * 100, null, NO_READINGS)
  }
  t.equal(shedder.limit, 2, 'probing')
  for (let i = 0; i < 5; i++) shedder.done(10, 0)
  t.equal(shedder.inFlight, 5)
  t.equal(shedder.decide('critical'), null, 'a critical request goes in: 5 in flight, the probe\'s floor 2, the capacity held 11')
  t.equal(shedder.decide('normal'), 'in-flight', 'a normal one waits for the probe')
})

t.test('the signal given wins over in flight as the reason', async t => {
  const shedder = new Shedder(options({ inFlight: 1 }), 0)
  shedder.started()
  const readings = { ...NO_READINGS, redisTimeMs: 500 }
  shedder.sample(100, 'redis-time', readings)
  t.equal(shedder.snapshot().over, 'redis-time')
  t.strictSame(shedder.snapshot().readings, readings)
})

// A dependency of `slots` parallel slots, each request holding one for `serviceMs`, the rest queueing in order;
// requests arrive evenly at `perMs`, and are admitted while fewer than `limit()` are in flight (queued or
// served). Simulated a millisecond at a time; `sample` every 100 ms.
interface Dependency {
  slots: number
  serviceMs: number
}

interface Run {
  readonly served: number
  readonly meanMs: number
  /** The limit at each sample (NaN while it probes: held at its floor on purpose). */
  readonly limits: number[]
}

function simulate (
  dependency: Dependency, perMs: number, ms: number, limit: () => number, done: (rttMs: number, at: number) => void,
  sample: (now: number, peak: number) => void, change?: { at: number, to: Dependency }, probing = () => false
): Run {
  const queue: number[] = []
  const serving: Array<{ start: number, end: number }> = []
  let due = 0
  let served = 0
  let total = 0
  let peak = 0
  const limits: number[] = []
  for (let now = 0; now < ms; now++) {
    if (change !== undefined && now === change.at) Object.assign(dependency, change.to)
    for (let i = serving.length - 1; i >= 0; i--) {
      if (serving[i]!.end > now) continue
      const { start } = serving.splice(i, 1)[0]!
      done(now - start, start)
      served++
      total += now - start
    }
    for (due += perMs; due >= 1; due--) if (queue.length + serving.length < limit()) queue.push(now)
    while (serving.length < dependency.slots && queue.length > 0) serving.push({ start: queue.shift()!, end: now + dependency.serviceMs })
    peak = Math.max(peak, queue.length + serving.length)
    if (now % 100 === 99) {
      sample(now, peak)
      limits.push(probing() ? NaN : limit())
      peak = queue.length + serving.length
    }
  }
  return { served, meanMs: total / Math.max(1, served), limits }
}

const ADAPTIVE: ResolvedAdaptive = { floor: 2, ceiling: 1000, tolerance: 1.1, probeMs: 30_000 }

/** The fixed capacity with the most power (requests served per ms over their mean latency), swept over 1 to 64. */
function bestFixed (dependency: Dependency, perMs: number): number {
  let best = { limit: 0, power: 0 }
  for (let limit = 1; limit <= 64; limit++) {
    const run = simulate({ ...dependency }, perMs, 10_000, () => limit, () => {}, () => {})
    const power = run.served / 10_000 / run.meanMs
    if (power > best.power) best = { limit, power }
  }
  return best.limit
}

const mean = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0) / values.length

t.test('the adaptive capacity settles within 20% of the best fixed one, on dependencies of several sizes', async t => {
  for (const dependency of [{ slots: 16, serviceMs: 20 }, { slots: 40, serviceMs: 10 }, { slots: 8, serviceMs: 50 }]) {
    const perMs = 1.5 * dependency.slots / dependency.serviceMs
    const best = bestFixed(dependency, perMs)
    const limit = new AdaptiveLimit(ADAPTIVE, 0)
    const run = simulate({ ...dependency }, perMs, 60_000, () => limit.limit, (rtt, at) => limit.completed(rtt, at),
      (now, peak) => limit.sample(now, peak), undefined, () => limit.probing)
    const settled = mean(run.limits.slice(-200).filter(limit => !Number.isNaN(limit)))
    t.ok(Math.abs(settled - best) <= 0.2 * best,
      `${dependency.slots} slots of ${dependency.serviceMs} ms at 1.5× their rate: settled at ${settled.toFixed(1)}, the sweep's best ${best}`)
    t.ok(limit.minRtt >= dependency.serviceMs && limit.minRtt <= dependency.serviceMs * 1.1, `no-load latency ${limit.minRtt}`)
  }
})

t.test('the adaptive capacity follows a step in the work\'s latency, and in the dependency\'s slots, within seconds', async t => {
  const steps = [
    { name: 'each request twice as slow', from: { slots: 16, serviceMs: 20 }, to: { slots: 16, serviceMs: 40 } },
    { name: 'half the slots', from: { slots: 32, serviceMs: 20 }, to: { slots: 16, serviceMs: 20 } },
    { name: 'twice as fast', from: { slots: 16, serviceMs: 40 }, to: { slots: 16, serviceMs: 20 } }
  ]
  for (const { name, from, to } of steps) {
    const perMs = 2 * Math.max(from.slots / from.serviceMs, to.slots / to.serviceMs)
    const best = bestFixed(to, perMs)
    const limit = new AdaptiveLimit(ADAPTIVE, 0)
    const run = simulate({ ...from }, perMs, 40_000, () => limit.limit, (rtt, at) => limit.completed(rtt, at),
      (now, peak) => limit.sample(now, peak), { at: 20_000, to }, () => limit.probing)
    // Samples after the step: the first from which the limit stays within 20% of the new best for the rest
    // (but while it probes: the periodic probe, 30 s after the start, holds it at its floor for a sample).
    const after = run.limits.slice(200)
    let settledAt = after.length
    while (settledAt > 0 && (Number.isNaN(after[settledAt - 1]) || Math.abs(after[settledAt - 1]! - best) <= 0.2 * best)) settledAt--
    t.ok(after.filter(Number.isNaN).length <= 3, 'it probes a few samples at most')
    t.ok(settledAt * 100 <= 5000, `${name}: within 20% of the new best (${best}) ${settledAt * 100} ms after the step, and stays`)
  }
})

t.test('an idle process proves nothing: the capacity grows only while half of it is in flight', async t => {
  const limit = new AdaptiveLimit(ADAPTIVE, 0)
  for (let i = 1; i <= 50; i++) {
    limit.completed(10, i * 100 - 50)
    limit.sample(i * 100, 0)
  }
  t.equal(limit.limit, 2, 'stays at its floor')
  for (let i = 51; i <= 60; i++) {
    limit.completed(10, i * 100 - 50)
    limit.sample(i * 100, limit.limit)
  }
  t.equal(limit.limit, 12, 'a step of 1 (or 5%) a sample while it is used')
  limit.sample(6100, limit.limit)
  t.equal(limit.limit, 12, 'an interval in which nothing completed says nothing')
})

t.test('a probe holds the capacity at its floor until floor requests admitted since are done, then puts it back', async t => {
  const limit = new AdaptiveLimit({ ...ADAPTIVE, probeMs: 1000 }, 0)
  for (let i = 1; i <= 9; i++) {
    limit.completed(10, i * 100 - 50)
    limit.sample(i * 100, limit.limit)
  }
  const before = limit.limit
  limit.completed(10, 950)
  limit.sample(1000, before)
  t.equal(limit.limit, 2, 'probing: the floor')
  limit.completed(30, 900)
  limit.sample(1100, 2)
  t.equal(limit.limit, 2, 'a request admitted before the probe does not end it')
  limit.completed(12, 1050)
  limit.completed(14, 1060)
  limit.sample(1200, 2)
  t.equal(limit.limit, before, 'back where it was')
  t.equal(limit.minRtt, 13, 'the no-load latency is the probe\'s mean')
  // A probe nobody completes ends after 2 s, keeping the no-load latency it had.
  const idle = new AdaptiveLimit({ ...ADAPTIVE, probeMs: 1000 }, 0)
  idle.completed(10, 50)
  idle.sample(1000, 2)
  t.equal(idle.limit, 2)
  idle.sample(2000, 0)
  t.equal(idle.limit, 2, 'still probing')
  idle.sample(3000, 0)
  t.equal(idle.minRtt, Infinity, 'never measured: the probe gave up')
})

t.test('the adaptive capacity within its floor and ceiling', async t => {
  const limit = new AdaptiveLimit({ ...ADAPTIVE, floor: 3, ceiling: 5 }, 0)
  for (let i = 1; i <= 20; i++) {
    limit.completed(10, i * 100 - 50)
    limit.sample(i * 100, 5)
  }
  t.equal(limit.limit, 5, 'the ceiling')
  for (let i = 21; i <= 40; i++) {
    limit.completed(1000, i * 100 - 50)
    limit.sample(i * 100, 5)
  }
  t.ok(limit.limit >= 3, 'never under the floor')
  const shedder = new Shedder(options({ inFlight: { floor: 3, ceiling: 5 } }), 0)
  t.equal(shedder.snapshot().limit, 3, 'the shedder starts an adapted capacity at its floor')
  for (let i = 0; i < 2; i++) shedder.started()
  t.equal(shedder.decide('critical'), null, 'a critical request has the whole of it')
  shedder.started()
  t.equal(shedder.decide('critical'), 'in-flight')
})
