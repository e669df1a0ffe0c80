// The load shedder's harness (bench/shed.js, issue 46) runs short through `npm run bench` (bench/run.js): every step
// runs, its JSON has the shape the report reads, and what must hold whatever the machine's speed holds: each request
// counted once, nothing but 2xx without a shedder, every 503 the shedder's with Retry-After, critical and exempt never
// shed by a signal, a fixed in-flight limit never passed, the adaptive limit within its floor and ceiling, each bound
// judged. No figure of speed is held to anything (a run this short measures none), nor whether a bound held.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { distIsBuilt } from './helpers/built.js'
import { escape, runBench as run } from './helpers/bench-runner.js'

t.setTimeout(120_000)

interface ClassSummary {
  sent: number
  ok: number
  shed: number
  otherStatus: number
  timeouts: number
  errors: number
  p50Ms: number | null
  p99Ms: number | null
  shedWithoutRetryAfter: number
  shedWithoutCode: number
}
interface Step { label: string, shed: object | null, classes: Record<string, ClassSummary> }
interface Bound { part: string, step: string, bound: string, value: number | null, held: boolean | null }
interface Shed {
  shedder: { inDist: boolean }
  machine: { loadAverageBefore: string, loadAverageAfter: string }
  command: string
  cpu: { capacity: { perSecond: number }, steps: Step[] }
  dependency: {
    sweep: Array<ClassSummary & { k: number, maxInFlight: number }>
    bestK: number
    adaptive: { stepAtS: number | null, series: Array<{ t: number, limit: number | null }>, figures: object | null }
  }
  bounds: Bound[]
}

/** Each request counted once: answered 2xx, shed, another status, timed out, or failed. */
function countedOnce (t: Test, c: ClassSummary, what: string): void {
  t.ok(c.sent > 0, `${what}: requests were sent`)
  t.equal(c.ok + c.shed + c.otherStatus + c.timeouts + c.errors, c.sent, `${what}: each request counted once`)
  t.equal(c.otherStatus + c.errors, 0, `${what}: no status but 2xx and 503, no failed connection`)
  if (c.p50Ms !== null && c.p99Ms !== null) t.ok(c.p50Ms <= c.p99Ms, `${what}: p50 ≤ p99`)
}

t.test('the shed harness runs through `npm run bench`: every step, its JSON, its report', async (t) => {
  distIsBuilt(t, fileURLToPath(new URL('../', import.meta.url)))
  const out = join(t.testdir(), 'latest.json')
  const { code, stdout, stderr } = await run({
    BENCH_HARNESSES: 'shed',
    BENCH_SHED_CPU_MS: '1',
    BENCH_SHED_WARMUP: '0.2',
    BENCH_SHED_CAPACITY_S: '0.5',
    BENCH_SHED_UNLOADED_S: '0.5',
    BENCH_SHED_SETTLE: '0.3',
    BENCH_SHED_DURATION: '0.7',
    BENCH_SHED_TUNED: '{"eventLoopDelay":20}',
    BENCH_SHED_KS: '4,16',
    BENCH_SHED_K_S: '0.7',
    BENCH_SHED_ADAPTIVE_S: '1,1',
    BENCH_OUT: out
  })
  t.equal(code, 0, `exits 0; stderr: ${stderr}`)
  const shed = (JSON.parse(readFileSync(out, 'utf8')) as { harnesses: { shed: Shed } }).harnesses.shed
  t.equal(shed.shedder.inDist, true, 'dist/\'s plugin has the shedder (npm run build)')
  t.match(shed.command, /BENCH_SHED_CPU_MS=1 .*npm run bench$/, 'the command that ran it')
  t.match(shed.machine, { loadAverageBefore: /^\d/, loadAverageAfter: /^\d/ }, 'the load average before and after')

  const [unloaded, without, ...withShedder] = shed.cpu.steps
  const labels = ['unloaded', 'without the shedder', 'with the shedder', 'with the shedder, tuned']
  t.same(shed.cpu.steps.map(s => s.label), labels, 'every step ran')
  t.same(withShedder.map(s => s.shed), [{}, { eventLoopDelay: 20 }], 'the shedder\'s steps with the options given')
  for (const step of shed.cpu.steps) {
    t.same(Object.keys(step.classes), ['critical', 'normal', 'sheddable', 'exempt'], `${step.label}: each class`)
    for (const [name, c] of Object.entries(step.classes)) countedOnce(t, c, `${step.label}, ${name}`)
  }
  for (const step of [unloaded!, without!]) {
    for (const [name, c] of Object.entries(step.classes)) t.equal(c.shed, 0, `${step.label}, ${name}: no shedder, no 503`)
  }
  for (const step of withShedder) {
    for (const [name, c] of Object.entries(step.classes)) {
      t.equal(c.shedWithoutRetryAfter + c.shedWithoutCode, 0, `${step.label}, ${name}: every 503 the shedder's, with Retry-After`)
    }
    // No in-flight capacity given: only the signals shed, and they never shed these two.
    t.equal(step.classes.critical!.shed + step.classes.exempt!.shed, 0, `${step.label}: critical and exempt never shed by a signal`)
  }

  const { sweep, bestK, adaptive } = shed.dependency
  t.same(sweep.map(k => k.k), [4, 16], 'a run for each fixed inFlight')
  t.ok([4, 16].includes(bestK), 'the best K is one of them')
  for (const k of sweep) {
    countedOnce(t, k, `inFlight ${k.k}`)
    t.ok(k.maxInFlight <= k.k, `inFlight ${k.k}: never more in flight (${k.maxInFlight} seen)`)
  }
  t.ok(adaptive.stepAtS !== null, 'the adaptive run\'s step was made')
  const limits = adaptive.series.map(s => s.limit)
  const within = limits.every(l => l !== null && l >= 2 && l <= 512)
  t.ok(limits.length > 0 && within, `the adaptive limit read, within floor and ceiling: ${limits.join(' ')}`)
  t.not(adaptive.figures, null, 'the adaptive run\'s figures')

  t.equal(shed.bounds.length, 3 + 3 * 2 + 2, 'each bound: three without the shedder, three per shedder step, two adaptive')
  for (const b of shed.bounds) {
    t.ok(b.held === true || b.held === false, `${b.step}: ${b.bound}: judged`)
    const line = new RegExp(`^- ${escape(`${b.part}, ${b.step}: ${b.bound}: `)}.* → (holds|\\*\\*MISSED\\*\\*)$`, 'm')
    t.match(stdout, line, `${b.bound}: printed`)
  }
  t.match(stdout, /^### Load shedding \(bench\/shed\.js\)/m, 'the report\'s title')
})
