// Issue 46's load shedder under load: whether it keeps the critical class served when the process is overloaded,
// and where its adaptive in-flight limit settles. Each app (bench/shed-app.js) runs in its own process, pinned to
// CPU 0 when taskset allows; this process sends the load (bench/shed-load.js: open loop) from CPU 1.
//
// 1. CPU-bound: /checkout (critical), /search (normal), /recommend (sheddable), each burning BENCH_SHED_CPU_MS of
//    CPU; /health (exempt) probed at BENCH_SHED_HEALTH_RATE a second beside. (a) capacity: a closed loop of the mix;
//    (b) unloaded: the mix at BENCH_SHED_UNLOADED × capacity; then at BENCH_SHED_OVERLOAD × capacity, each on a fresh
//    app: (c) without the shedder, (d) with BENCH_SHED_OPTIONS (default `{}`: its defaults), (e) with
//    BENCH_SHED_TUNED (default below; '' skips it). Per class: p50/p99 (every request, a timeout at the timeout; and
//    the 2xx alone), the 2xx and 503 shares, 503s without Retry-After. Judged: with the shedder, critical p99 ≤ 2× unloaded and
//    ≥ 95% of critical served; without, every class's p99 > 10× unloaded.
// 2. Adaptive concurrency: /work burns BENCH_SHED_DEP_CPU_MS, then holds one of BENCH_SHED_SLOTS slots of a simulated
//    dependency for BENCH_SHED_HOLD_MS (beyond: queued). At BENCH_SHED_DEP_LOAD × its capacity: a fixed
//    `inFlight: K` for each K of BENCH_SHED_KS (goodput, mean and p99 latency; the best K by power = goodput / mean
//    latency); then the adaptive limit (BENCH_SHED_ADAPTIVE), read from GET /stats (stats().shed) every 250 ms: where
//    it settles against the best K (judged: within 20%), and, after BENCH_SHED_STEP (slots: the slots halve; hold:
//    the hold doubles) mid-run, how long until it settles again. Part 2's shedder: the in-flight rule alone (reserve 0,
//    the event-loop signals off), /work of the normal class.
//
//   npm run build && node bench/shed.js      (or BENCH_HARNESSES=shed npm run bench; about 2 minutes)
//
// Before the shedder is in dist/ (the plugin refuses `shed`), the shedder's steps run without it and say so, and
// their bounds are not judged. Prints markdown to stdout (progress to stderr), its JSON to BENCH_OUT when set.
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { number, writeJson } from './harness.js'
import { coreBusy, coreTimes, loadAverage } from './machine.js'
import { pinning } from './processes.js'
import { agent, closedLoop, openLoop, request, schedule, summary } from './shed-load.js'
import { adaptiveFigures, judge, markdown, machineNote } from './shed-report.js'

const env = process.env
const json = (name, fallback) => env[name] === undefined ? fallback : env[name] === '' ? null : JSON.parse(env[name])
const settings = {
  parts: (env.BENCH_SHED_PARTS || 'cpu,dependency').split(','),
  cpuMs: number('BENCH_SHED_CPU_MS', 4),
  mix: (env.BENCH_SHED_MIX || '20,40,40').split(',').map(Number),
  healthRate: number('BENCH_SHED_HEALTH_RATE', 10),
  timeoutMs: number('BENCH_SHED_TIMEOUT', 10) * 1000,
  warmupS: number('BENCH_SHED_WARMUP', 1),
  capacityS: number('BENCH_SHED_CAPACITY_S', 3),
  unloaded: number('BENCH_SHED_UNLOADED', 0.2),
  unloadedS: number('BENCH_SHED_UNLOADED_S', 5),
  overload: number('BENCH_SHED_OVERLOAD', 2),
  settleS: number('BENCH_SHED_SETTLE', 2),
  durationS: number('BENCH_SHED_DURATION', 6),
  shed: json('BENCH_SHED_OPTIONS', {}),
  // A stricter setting beside the defaults (utilization 0.7, delay 20 ms since 2026-11-29, when 50 ms of delay alone
  // let a queue of ~50 ms build before it shed, the critical class's p99 4.5-11× unloaded): less busy, fewer served.
  tuned: json('BENCH_SHED_TUNED', { eventLoopUtilization: 0.6, eventLoopDelay: 10 }),
  depCpuMs: number('BENCH_SHED_DEP_CPU_MS', 1),
  slots: number('BENCH_SHED_SLOTS', 16),
  holdMs: number('BENCH_SHED_HOLD_MS', 40),
  depLoad: number('BENCH_SHED_DEP_LOAD', 1.5),
  ks: (env.BENCH_SHED_KS || '4,8,12,16,24,32,64').split(',').map(Number),
  kS: number('BENCH_SHED_K_S', 3),
  adaptive: json('BENCH_SHED_ADAPTIVE', { floor: 2, ceiling: 512 }),
  adaptiveS: (env.BENCH_SHED_ADAPTIVE_S || '15,20').split(',').map(Number),
  step: env.BENCH_SHED_STEP || 'slots'
}
if (settings.mix.length !== 3 || settings.mix.some(x => !(x >= 0))) {
  throw new Error(`BENCH_SHED_MIX: three shares (critical, normal, sheddable), got ${env.BENCH_SHED_MIX}`)
}
if (!['slots', 'hold'].includes(settings.step)) throw new Error(`BENCH_SHED_STEP: slots or hold, got ${settings.step}`)
const PATHS = { critical: '/checkout', normal: '/search', sheddable: '/recommend' }
/** Part 2's shedder: the in-flight rule alone, every request one class, the whole limit theirs. */
const IN_FLIGHT_ONLY = { reserve: 0, eventLoopDelay: false, eventLoopUtilization: false }
const pin = pinning()
// The plugin's note that it counts in process (no Redis here), said by every app: not printed.
process.removeAllListeners('warning')
process.on('warning', (warning) => { if (warning.code !== 'FST_RATE_GUARD_IN_PROCESS') console.error(warning) })
const log = (...args) => console.error(...args)

/** Whether dist/'s plugin takes the `shed` option: null when it does, else what it said. */
async function shedderMissing () {
  const { default: Fastify } = await import('fastify')
  const { default: rateGuard } = await import('fastify-rate-guard')
  const app = Fastify()
  try {
    await app.register(rateGuard, { global: false, shed: false })
    await app.ready()
    return null
  } catch (err) {
    return err.message
  } finally {
    await app.close()
  }
}

/** An app of bench/shed-app.js in its own process (on the server's core): its port, its CPU, and its stop. */
async function startApp (config) {
  const node = [process.execPath, fileURLToPath(new URL('./shed-app.js', import.meta.url)), JSON.stringify(config)]
  const command = pin.taskset ? ['taskset', '-c', pin.server, ...node] : node
  const child = spawn(command[0], command.slice(1), { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const exited = once(child, 'exit')
  const reply = (type) => Promise.race([
    new Promise(resolve => {
      const on = (msg) => {
        if (msg.type !== type) return
        child.off('message', on)
        resolve(msg)
      }
      child.on('message', on)
    }),
    exited.then(([code]) => { throw new Error(`bench/shed-app.js exited (${code}) before its ${type}`) })
  ])
  const { port } = await reply('ready')
  return {
    port,
    async cpuUs () {
      child.send({ type: 'cpu' })
      return (await reply('cpu')).cpuUs
    },
    async stop () {
      child.send({ type: 'close' })
      if (await Promise.race([exited.then(() => true), sleep(5000, false)])) return
      child.kill()
      await exited
    }
  }
}

/** The CPU part's rates a second at `total` for the mix, and /health's. */
function mixRates (total) {
  const sum = settings.mix.reduce((a, b) => a + b, 0)
  const rates = Object.fromEntries(Object.entries(PATHS).map(([name, path], i) => [name, { path, rate: total * settings.mix[i] / sum }]))
  return { ...rates, exempt: { path: '/health', rate: settings.healthRate } }
}

/**
 * `app` under `rates` for `settleS` + `seconds`, the requests sent in the last `seconds` summed up per class, with
 * the app's CPU share over the run; `during(t0)` runs beside (the adaptive run's poll and step).
 */
async function openRun (app, rates, settleS, seconds, during = () => Promise.resolve()) {
  const events = schedule(rates, settleS + seconds)
  const usage = async () => ({ app: await app.cpuUs(), cores: coreTimes(), own: process.cpuUsage(), at: performance.now() })
  const before = await usage()
  // CPU read over the sending alone, not the answers still coming after it (an overload without a shedder drains
  // for seconds).
  const after = sleep((settleS + seconds) * 1000).then(usage)
  const [{ records, lagMs }, extra] = await Promise.all([openLoop(app.port, events, settings.timeoutMs), during(before.at)])
  const { app: appUs, cores, own, at } = await after
  const elapsedS = (at - before.at) / 1000
  const cpuShare = (appUs - before.app) / 1e6 / elapsedS
  // This process's share of its core: near 1, the load (not the app) is what ran out.
  const loadCpuShare = (own.user + own.system - before.own.user - before.own.system) / 1e6 / elapsedS
  // The app's core busy with anything but the app: the noise of a shared machine (null: no pinning, or no /proc).
  const busy = coreBusy(before.cores, cores)
  const othersOnAppCore = pin.taskset && busy !== null ? Math.max(0, busy[Number(pin.server)] - cpuShare) : null
  const classes = Object.fromEntries(Object.keys(rates).map(name =>
    [name, summary(records.filter(r => r.name === name), settleS * 1000, (settleS + seconds) * 1000)]))
  const sent = Object.fromEntries(Object.entries(rates).map(([n, { rate }]) => [n, rate]))
  return { rates: sent, sendLagMs: lagMs, cpuShare, othersOnAppCore, loadCpuShare, classes, records, extra }
}

/** A fresh app warmed up (JIT) at half of `rates`, not counted. */
async function warmApp (config, rates) {
  const app = await startApp(config)
  const half = Object.fromEntries(Object.entries(rates).map(([n, r]) => [n, { ...r, rate: r.rate / 2 }]))
  if (settings.warmupS > 0) await openLoop(app.port, schedule(half, settings.warmupS), settings.timeoutMs)
  return app
}

/** A step of an overload on a fresh app with `shed` (undefined: no shedder), without its records. */
async function overloadStep (label, config, rates, shed) {
  log(`shed: ${label}`)
  const app = await warmApp({ ...config, shed }, rates)
  try {
    const seconds = settings.settleS + settings.durationS
    const poll = t0 => pollStats(app, t0, seconds)
    const { records, extra: series, ...run } = await openRun(app, rates, settings.settleS, settings.durationS, poll)
    return { label, shed: shed ?? null, settleS: settings.settleS, ...run, series }
  } finally {
    await app.stop()
  }
}

async function cpuPart (missing) {
  const config = { kind: 'cpu', cpuMs: settings.cpuMs }
  const plain = await startApp(config)
  let capacity, unloaded
  try {
    const paths = ['critical', 'normal', 'normal', 'sheddable', 'sheddable'].map(name => PATHS[name])
    await closedLoop(plain.port, paths, 4, settings.warmupS, settings.timeoutMs)
    capacity = await closedLoop(plain.port, paths, 16, settings.capacityS, settings.timeoutMs)
    log(`shed: CPU-bound capacity ${capacity.perSecond.toFixed(0)} req/s`)
    const { records, ...run } = await openRun(plain, mixRates(capacity.perSecond * settings.unloaded), 0, settings.unloadedS)
    unloaded = { label: 'unloaded', shed: null, ...run }
  } finally {
    await plain.stop()
  }
  const rates = mixRates(capacity.perSecond * settings.overload)
  const shedOr = (options) => missing === null ? options : undefined
  const steps = [unloaded, await overloadStep('without the shedder', config, rates, undefined)]
  steps.push(await overloadStep('with the shedder', config, rates, shedOr(settings.shed)))
  if (settings.tuned !== null) steps.push(await overloadStep('with the shedder, tuned', config, rates, shedOr(settings.tuned)))
  return { capacity, steps }
}

async function dependencyPart (missing) {
  const config = { kind: 'dependency', cpuMs: settings.depCpuMs, slots: settings.slots, holdMs: settings.holdMs }
  const plain = await startApp(config)
  let capacity
  try {
    await closedLoop(plain.port, ['/work'], settings.slots, settings.warmupS, settings.timeoutMs)
    capacity = await closedLoop(plain.port, ['/work'], settings.slots * 4, settings.capacityS, settings.timeoutMs)
    log(`shed: dependency capacity ${capacity.perSecond.toFixed(0)} req/s (${settings.slots} slots × ${settings.holdMs} ms)`)
  } finally {
    await plain.stop()
  }
  const rates = { normal: { path: '/work', rate: capacity.perSecond * settings.depLoad } }
  const sweep = []
  for (const k of settings.ks) {
    const shed = missing === null ? { ...IN_FLIGHT_ONLY, inFlight: k } : undefined
    log(`shed: inFlight ${k}`)
    const app = await warmApp({ ...config, shed }, rates)
    try {
      const seconds = settings.settleS + settings.kS
      const poll = t0 => pollStats(app, t0, seconds)
      const { records, classes: { normal }, extra: series, ...run } = await openRun(app, rates, settings.settleS, settings.kS, poll)
      const power = normal.okMeanMs === null ? null : normal.perSecond / (normal.okMeanMs / 1000)
      // The most requests stats().shed saw in flight at once (a reading every 250 ms; the reading's own request is
      // exempt, outside the shedder): K at most.
      const maxInFlight = Math.max(...series.map(r => r.inFlight ?? 0))
      // The normal class's admitted share (stats().shed.admitted) over the measured window, each reading: a full
      // capacity sheds by its line, not by cutting the share.
      const admitted = series.filter(r => r.t >= settings.settleS && r.admitted !== null).map(r => r.admitted.normal)
      const { cpuShare, othersOnAppCore, sendLagMs } = run
      sweep.push({ k, ...normal, power, maxInFlight, admitted, cpuShare, othersOnAppCore, sendLagMs })
    } finally {
      await app.stop()
    }
  }
  const best = sweep.reduce((a, b) => (b.power ?? -1) > (a.power ?? -1) ? b : a)
  const adaptive = await adaptiveRun(config, rates, missing)
  return { capacity, rate: rates.normal.rate, sweep, bestK: best.k, adaptive: { ...adaptive, figures: adaptiveFigures(adaptive, best.k) } }
}

/**
 * stats().shed read every 250 ms over its own connection for `seconds` from `t0` (performance.now()), `before(s, via)`
 * awaited ahead of each reading (the adaptive run's step): a reading per sample.
 */
async function pollStats (app, t0, seconds, before = async () => {}) {
  const via = agent()
  const series = []
  const at = () => (performance.now() - t0) / 1000
  while (at() < seconds) {
    await before(at(), via)
    const { status, body } = await request(via, app.port, '/stats', performance.now() + settings.timeoutMs)
    const stats = status === 200 ? JSON.parse(body) : null
    const { limit = null, inFlight = null, admitted = null, over = null } = stats ?? {}
    series.push({ t: Math.round(at() * 100) / 100, limit, inFlight, admitted, over })
    await sleep(250)
  }
  via.destroy()
  return series
}

/**
 * The adaptive limit under `rates`: stats().shed read every 250 ms, the step (BENCH_SHED_STEP) made after the first
 * of BENCH_SHED_ADAPTIVE_S; the limit's series, and each second's goodput and mean latency.
 */
async function adaptiveRun (config, rates, missing) {
  const [beforeS, afterS] = settings.adaptiveS
  const shed = missing === null ? { ...IN_FLIGHT_ONLY, inFlight: settings.adaptive } : undefined
  const change = settings.step === 'slots' ? { slots: Math.max(1, Math.round(settings.slots / 2)) } : { holdMs: settings.holdMs * 2 }
  log(`shed: adaptive inFlight ${JSON.stringify(settings.adaptive)}, then ${JSON.stringify(change)} at ${beforeS} s`)
  const app = await warmApp({ ...config, shed }, rates)
  let stepAtS = null
  const step = async (s, via) => {
    if (stepAtS !== null || s < beforeS) return
    await request(via, app.port, '/control', performance.now() + settings.timeoutMs, { method: 'POST', body: change })
    stepAtS = Math.round(s * 100) / 100
  }
  const poll = t0 => pollStats(app, t0, beforeS + afterS, step)
  try {
    const { records, extra: series, classes, ...run } = await openRun(app, rates, 0, beforeS + afterS, poll)
    const bySecond = Array.from({ length: beforeS + afterS }, (_, s) => {
      const { perSecond, okMeanMs, shedShare } = summary(records, s * 1000, (s + 1) * 1000)
      return { second: s, perSecond, okMeanMs, shedShare }
    })
    const { cpuShare, othersOnAppCore, sendLagMs } = run
    return { shed: shed ?? null, change, stepAtS, series, bySecond, whole: classes.normal, cpuShare, othersOnAppCore, sendLagMs }
  } finally {
    await app.stop()
  }
}

const started = new Date()
const loadBefore = loadAverage()
const machine = machineNote(pin)
// This process sends the load: on the core the apps do not use.
if (pin.taskset) spawnSync('taskset', ['-a', '-p', '-c', pin.load, String(process.pid)], { stdio: 'ignore' })
const missing = await shedderMissing()
if (missing !== null) log(`shed: dist/'s plugin has no shedder (${missing}): its steps run without it`)
const results = {
  date: started.toISOString(),
  command: commandLine(),
  settings,
  shedder: missing === null ? { inDist: true } : { inDist: false, note: missing },
  cpu: settings.parts.includes('cpu') ? await cpuPart(missing) : null,
  dependency: settings.parts.includes('dependency') ? await dependencyPart(missing) : null
}
results.machine = { ...machine, loadAverageBefore: loadBefore, loadAverageAfter: loadAverage() }
results.elapsedS = Math.round((Date.now() - started.getTime()) / 1000)
results.bounds = judge(results)
process.stdout.write(markdown(results))
writeJson(results)

/** The run's command: the settings given, as `npm run bench` (through bench/run.js) or `node bench/shed.js` ran it. */
function commandLine () {
  const given = Object.keys(env).filter(name => name.startsWith('BENCH_SHED_') || name === 'BENCH_HARNESSES').sort()
  const vars = given.map(name => `${name}=${/[\s"'{}]/.test(env[name]) ? `'${env[name]}'` : env[name]} `).join('')
  return env.BENCH_HARNESSES === undefined ? `${vars}node bench/shed.js` : `${vars}npm run bench`
}
