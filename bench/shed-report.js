// What bench/shed.js measured, judged against issue 46's done-when and written out as markdown: each bound with
// its figure and whether it held (a miss is printed as a miss; a bound the run could not measure says why).
import { availableParallelism, cpus } from 'node:os'
import { tableHead } from './harness.js'

const CLASSES = ['critical', 'normal', 'sheddable', 'exempt']
/** The adaptive limit "settled": its 1-second median within this share of where it ends. */
const SETTLED = 0.2

export function machineNote (pin) {
  return { nproc: availableParallelism(), cpu: cpus()[0]?.model ?? 'unknown', node: process.version, pinning: pin.note }
}

const median = (values) => {
  const sorted = values.filter(v => v !== null).sort((a, b) => a - b)
  return sorted.length === 0 ? null : sorted[Math.floor(sorted.length / 2)]
}

/** A critical class's p99 as judged: every request's (a 503 and a timeout included) or the 2xx alone's, the larger. */
const p99Of = (c) => Math.max(c.p99Ms ?? 0, c.okP99Ms ?? 0)

function cpuBounds ({ steps }, missing) {
  const [unloaded, without, ...shed] = steps
  const bounds = CLASSES.slice(0, 3).map(name => {
    const ratio = without.classes[name].p99Ms / unloaded.classes[name].p99Ms
    return { part: 'cpu', step: without.label, bound: `${name} p99 > 10× unloaded`, value: ratio, held: ratio > 10 }
  })
  for (const step of shed) {
    const c = step.classes.critical
    const ratio = p99Of(c) / unloaded.classes.critical.p99Ms
    const no503 = Object.values(step.classes).reduce((n, k) => n + k.shedWithoutRetryAfter, 0)
    const rows = [
      { bound: 'critical p99 ≤ 2× unloaded', value: ratio, held: ratio <= 2 },
      { bound: 'critical 2xx ≥ 95%', value: c.successShare, held: c.successShare >= 0.95 },
      { bound: 'every 503 has Retry-After', value: no503, held: no503 === 0 }
    ]
    for (const row of rows) {
      bounds.push({ part: 'cpu', step: step.label, ...row, ...(missing ? { held: null, note: 'no shedder in dist/' } : {}) })
    }
  }
  return bounds
}

/**
 * The adaptive run's figures: where the limit stood before the step (the median of its last third, at most 5 s),
 * where it ends, and the seconds from the step until its 1-second median stays within 20% of where it ends (null:
 * never within the run); the same from the start for the first settling.
 */
export function adaptiveFigures ({ series, stepAtS }, bestK) {
  const samples = series.filter(s => s.limit !== null)
  if (samples.length === 0 || stepAtS === null) return null
  const end = samples.at(-1).t
  const tail = (from, to) => median(samples.filter(s => s.t >= from && s.t < to).map(s => s.limit))
  const converged = tail(stepAtS - Math.min(5, stepAtS / 3), stepAtS)
  const final = tail(end - Math.min(5, (end - stepAtS) / 3), end + 1)
  const smooth = samples.map(s => ({ t: s.t, limit: median(samples.filter(o => Math.abs(o.t - s.t) <= 0.5).map(o => o.limit)) }))
  const settledAt = (from, to, level) => {
    const window = smooth.filter(s => s.t >= from && s.t < to)
    let at = null
    for (const s of window) {
      if (Math.abs(s.limit - level) > SETTLED * level) at = null
      else at ??= s.t
    }
    return at === null ? null : Math.round((at - from) * 10) / 10
  }
  return {
    converged,
    vsBestK: converged === null ? null : converged / bestK,
    final,
    firstSettleS: converged === null ? null : settledAt(0, stepAtS, converged),
    settleAfterStepS: final === null ? null : settledAt(stepAtS, end + 1, final)
  }
}

function dependencyBounds (dependency, missing) {
  const { figures } = dependency.adaptive
  const note = missing ? 'no shedder in dist/' : 'no limit read from stats().shed'
  const unread = { held: null, note }
  return [
    {
      part: 'dependency',
      step: 'adaptive',
      bound: `limit within 20% of the best fixed K (${dependency.bestK})`,
      ...figures?.vsBestK == null ? { value: null, ...unread } : { value: figures.vsBestK, held: Math.abs(figures.vsBestK - 1) <= 0.2 }
    },
    {
      part: 'dependency',
      step: 'adaptive',
      bound: 'after the step, the limit settles again within the run',
      ...figures === null ? { value: null, ...unread } : { value: figures.settleAfterStepS, held: figures.settleAfterStepS !== null }
    }
  ]
}

/** Every bound of the run: { part, step, bound, value, held (true, false, or null: not measured), note? }. */
export function judge (results) {
  const missing = !results.shedder.inDist
  return [
    ...results.cpu === null ? [] : cpuBounds(results.cpu, missing),
    ...results.dependency === null ? [] : dependencyBounds(results.dependency, missing)
  ]
}

const fixed = (x, digits = 1) => x === null || x === undefined ? '–' : x.toFixed(digits)
const code = (x) => x === null ? '–' : `\`${JSON.stringify(x)}\``
const pct = (x) => x === null || x === undefined ? '–' : `${(x * 100).toFixed(1)}%`

function cpuTable ({ capacity, steps }) {
  const unloaded = steps[0].classes
  const lines = [`Capacity (closed loop of the mix, 16 connections): **${capacity.perSecond.toFixed(0)} req/s**\n`]
  lines.push(...tableHead(['step', 'class', 'req/s sent', '2xx', '503', 'timeouts, errors', 'p50 ms', 'p99 ms', 'p99 2xx ms',
    'p99 / unloaded', 'app CPU', 'others on its core', 'send lag ms', 'shed options']))
  for (const step of steps) {
    for (const name of CLASSES) {
      const c = step.classes[name]
      if (c === undefined) continue
      lines.push(`| ${step.label} | ${name} | ${fixed(step.rates[name], 0)} | ${pct(c.successShare)} | ${pct(c.shedShare)} | ` +
        `${c.timeouts}, ${c.errors} | ${fixed(c.p50Ms, 2)} | ${fixed(c.p99Ms, 2)} | ${fixed(c.okP99Ms, 2)} | ` +
        `${fixed(c.p99Ms / unloaded[name].p99Ms)}× | ${pct(step.cpuShare)} | ${pct(step.othersOnAppCore)} | ${fixed(step.sendLagMs)} | ` +
        `${code(step.shed)} |`)
    }
  }
  for (const step of steps) {
    const window = (step.series ?? []).filter(r => r.admitted !== null && r.t >= step.settleS)
    if (window.length === 0) continue
    const share = (name) => {
      const values = window.map(r => r.admitted[name])
      return `${fixed(median(values), 2)} (${fixed(Math.min(...values), 2)}–${fixed(Math.max(...values), 2)})`
    }
    const over = {}
    for (const r of window) if (r.over !== null) over[r.over] = (over[r.over] ?? 0) + 1
    lines.push(`- ${step.label}, from stats().shed every 250 ms over the measured window: admitted share normal ${share('normal')}, ` +
      `sheddable ${share('sheddable')} (median, min–max); a signal over in ${Object.values(over).reduce((a, b) => a + b, 0)} ` +
      `of ${window.length} readings ${JSON.stringify(over)}`)
  }
  return lines
}

function dependencyTable ({ capacity, rate, sweep, bestK, adaptive }, settings) {
  const lines = [`Capacity (closed loop, ${settings.slots * 4} connections): **${capacity.perSecond.toFixed(0)} req/s** ` +
    `(${settings.slots} slots × ${settings.holdMs} ms: ${(settings.slots * 1000 / settings.holdMs).toFixed(0)} at most); ` +
    `offered ${rate.toFixed(0)} req/s, open loop\n`]
  lines.push(...tableHead(['inFlight', 'goodput (2xx/s)', '503', 'timeouts', 'mean ms (2xx)', 'p99 ms (2xx)', 'power',
    'normal admitted (median)', 'most in flight', 'app CPU', 'others on its core', 'best']))
  for (const k of sweep) {
    lines.push(`| ${k.k} | ${fixed(k.perSecond, 0)} | ${pct(k.shedShare)} | ${k.timeouts} | ${fixed(k.okMeanMs)} | ${fixed(k.okP99Ms)} | ` +
      `${fixed(k.power, 0)} | ${fixed(median(k.admitted), 2)} | ${k.maxInFlight} | ${pct(k.cpuShare)} | ${pct(k.othersOnAppCore)} | ` +
      `${k.k === bestK ? '**best**' : ''} |`)
  }
  const f = adaptive.figures
  const bySecond = (key, digits) => adaptive.bySecond.map(s => fixed(s[key], digits)).join(' ')
  const limits = Array.from({ length: Math.ceil(adaptive.series.at(-1)?.t ?? 0) }, (_, s) =>
    fixed(median(adaptive.series.filter(p => p.t >= s && p.t < s + 1).map(p => p.limit)), 0)).join(' ')
  lines.push('', `Adaptive ${code(adaptive.shed)}, then ${code(adaptive.change)} at ${fixed(adaptive.stepAtS)} s:`, '',
    `- limit before the step: ${fixed(f?.converged, 0)} (best fixed K ${bestK}: ${fixed(f?.vsBestK, 2)}×), ` +
    `first settled after ${fixed(f?.firstSettleS)} s`,
    `- limit at the end: ${fixed(f?.final, 0)}, settled ${fixed(f?.settleAfterStepS)} s after the step`,
    `- over the run: goodput ${fixed(adaptive.whole.perSecond, 0)}/s, 503 ${pct(adaptive.whole.shedShare)}, ` +
    `mean ${fixed(adaptive.whole.okMeanMs)} ms, p99 ${fixed(adaptive.whole.okP99Ms)} ms (2xx); app CPU ${pct(adaptive.cpuShare)}, ` +
    `others on its core ${pct(adaptive.othersOnAppCore)}`,
    `- limit, each second's median: ${limits}`,
    `- goodput, each second: ${bySecond('perSecond', 0)}`,
    `- mean latency (2xx) ms, each second: ${bySecond('okMeanMs', 0)}`)
  return lines
}

/** Others busy on the app's core more than this share of a step: the step's figures are the machine's. */
const NOISY = 0.2

/** The steps where others kept the app's core busy past NOISY, each `name (share)`. */
function noise ({ cpu, dependency }) {
  const steps = [
    ...cpu?.steps.map(s => [s.label, s.othersOnAppCore]) ?? [],
    ...dependency?.sweep.map(k => [`inFlight ${k.k}`, k.othersOnAppCore]) ?? [],
    ...dependency === null ? [] : [['adaptive', dependency.adaptive.othersOnAppCore]]
  ]
  return steps.filter(([, share]) => share !== null && share > NOISY).map(([name, share]) => `${name} (${pct(share)})`)
}

export function markdown (results) {
  const { machine, shedder } = results
  const lines = [`### Load shedding (bench/shed.js), ${results.date}`, '',
    `\`${results.command}\`; ${results.elapsedS} s; Node ${machine.node}, ${machine.nproc} CPUs (${machine.cpu}); ${machine.pinning}; ` +
    `load average ${machine.loadAverageBefore} before, ${machine.loadAverageAfter} after`, '']
  const noisy = noise(results)
  if (noisy.length > 0) {
    lines.push(`**The app's core was shared**: others kept it busy over ${NOISY * 100}% of the time in ${noisy.join(', ')}. ` +
      'Its figures there measure the machine as much as the shedder.', '')
  }
  if (!shedder.inDist) lines.push(`**dist/ has no shedder** (${shedder.note}): the shedder's steps ran without it.`, '')
  if (results.cpu !== null) {
    lines.push(`#### CPU-bound (${results.settings.cpuMs} ms a request), open loop at ${results.settings.overload}× capacity`, '')
    lines.push(`Measured: the requests sent in ${results.settings.durationS} s after ${results.settings.settleS} s of the load; ` +
      `timeout ${results.settings.timeoutMs / 1000} s (a failure, its latency the timeout).`, '', ...cpuTable(results.cpu), '')
  }
  if (results.dependency !== null) {
    lines.push(`#### Adaptive concurrency (${results.settings.depCpuMs} ms CPU, then a dependency slot)`, '')
    lines.push(...dependencyTable(results.dependency, results.settings), '')
  }
  lines.push('#### Done-when', '')
  for (const b of results.bounds) {
    const verdict = b.held === null ? `not measured (${b.note})` : b.held ? 'holds' : '**MISSED**'
    lines.push(`- ${b.part}, ${b.step}: ${b.bound}: ${typeof b.value === 'number' ? fixed(b.value, 2) : '–'} → ${verdict}`)
  }
  return lines.join('\n') + '\n'
}
