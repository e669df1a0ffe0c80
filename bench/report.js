// Medians over rounds, ratios within each round, and the markdown the bench prints.
import { SCENARIOS } from './plan.js'
import { BANS, BARE, BARE_REFUSAL, REFERENCE } from './variants.js'

const METRICS = ['rps', 'p50Ms', 'p99Ms', 'p50SingleMs', 'serverCpuUsPerRequest', 'redisCpuUsPerRequest', 'commandsSentPerRequest', 'roundTripsPerRequest', 'redisCommandsPerRequest',
  'redisBytesPerClient', 'requestsPerClient', 'serverCpuShare', 'loadCpuShare', 'scriptCallsPerRequest', 'scriptUsPerRequest', 'fullBatchShare', 'redisReadsPerRequest']

function median (sorted) {
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** Median, min and max of the numbers in `values` (nulls left out); null when there are none. */
export function spread (values) {
  const xs = values.filter(x => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b)
  return xs.length === 0 ? null : { median: median(xs), min: xs[0], max: xs[xs.length - 1], n: xs.length }
}

/** The ratio of `metric` to another variant's in the same round and scenario, for each round: its spread. */
function ratio (runs, others, metric) {
  if (others.length === 0) return null
  return spread(runs.map(run => {
    const other = others.find(o => o.round === run.round)
    return other === undefined || !(other[metric] > 0) ? null : run[metric] / other[metric]
  }))
}

/** Server CPU µs per request of `run` above bare Fastify's in the same round, or null. */
function overBare (run, bares) {
  const bare = bares.find(o => o.round === run?.round)
  return run === undefined || bare === undefined || run.serverCpuUsPerRequest === null || bare.serverCpuUsPerRequest === null
    ? null
    : run.serverCpuUsPerRequest - bare.serverCpuUsPerRequest
}

/** One row per variant and scenario: each metric's spread over the rounds, and the ratios. */
export function aggregate (runs, variants, scenarios) {
  const rows = []
  for (const scenario of scenarios) {
    const of = (id) => runs.filter(run => run.scenario === scenario && run.variant === id)
    for (const variant of variants) {
      const mine = of(variant.id)
      if (mine.length === 0) continue
      const statuses = {}
      for (const run of mine) for (const [code, n] of Object.entries(run.statuses)) statuses[code] = (statuses[code] ?? 0) + n
      const total = Object.values(statuses).reduce((a, b) => a + b, 0)
      rows.push({
        variant: variant.id,
        scenario,
        rounds: mine.length,
        ...Object.fromEntries(METRICS.map(metric => [metric, spread(mine.map(run => run[metric]))])),
        vsBare: { rps: ratio(mine, of(BARE), 'rps'), serverCpu: ratio(mine, of(BARE), 'serverCpuUsPerRequest') },
        vsReference: { rps: ratio(mine, of(REFERENCE), 'rps'), serverCpu: ratio(mine, of(REFERENCE), 'serverCpuUsPerRequest'), redisCpu: ratio(mine, of(REFERENCE), 'redisCpuUsPerRequest') },
        // The limiter's own cost: server CPU per request above bare Fastify's, and as a share of frl-redis's.
        cpuOverBareUs: spread(mine.map(run => overBare(run, of(BARE)))),
        overheadVsReference: spread(mine.map(run => {
          const ours = overBare(run, of(BARE))
          const theirs = overBare(of(REFERENCE).find(o => o.round === run.round), of(BARE))
          return ours === null || theirs === null || !(theirs > 0) ? null : ours / theirs
        })),
        p50SingleOverBareMs: spread(mine.map(run => {
          const bare = of(BARE).find(o => o.round === run.round)
          return bare === undefined || run.p50SingleMs === null ? null : run.p50SingleMs - bare.p50SingleMs
        })),
        responses: Object.fromEntries(Object.entries(statuses).map(([code, n]) => [code, n / total])),
        // Requests rate-guard let through because Redis did not decide in time: a limiter's miss, never a cost saved.
        unenforced: statuses['200 unenforced'] ?? 0,
        errors: mine.reduce((a, run) => a + run.errors, 0)
      })
    }
  }
  return rows
}

const fmt = (x, digits = 1) => x === null || x === undefined ? '–' : x.toLocaleString('en', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const med = (s, digits) => s === null ? '–' : fmt(s.median, digits)
const range = (s, digits) => s === null ? '–' : s.n === 1 ? fmt(s.median, digits) : `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)})`
const scale = (s, k) => ({ ...s, median: s.median * k, min: s.min * k, max: s.max * k })
const times = (s) => s === null ? '–' : `${fmt(s.median, 2)}×`
/** A ratio's spread over the rounds: `0.69× (0.58–0.71)`. */
const ratioRange = (s) => s.n === 1 ? times(s) : `${fmt(s.median, 2)}× (${fmt(s.min, 2)}–${fmt(s.max, 2)})`

function responses (shares) {
  const digits = (share) => share < 0.01 ? 2 : share < 0.995 ? 1 : 0
  return Object.entries(shares).sort(([, a], [, b]) => b - a).map(([code, share]) => `${code} ${fmt(share * 100, digits(share))}%`).join(', ')
}

function scenarioTable (rows, scenario) {
  const mine = rows.filter(row => row.scenario === scenario)
  const memory = mine.some(row => row.redisBytesPerClient !== null)
  const head = ['server', 'req/s', '× bare', '× frl-redis', 'p50 ms', 'p99 ms', 'p50 ms, 1 conn', 'server µs/req', 'CPU × bare', 'CPU × frl-redis', 'µs/req over bare',
    'Redis µs/req', 'Redis × frl-redis', 'cmds sent/req (round trips)', 'Redis cmds/req', 'req per script call', ...memory ? ['Redis B/client (req/client)'] : [], 'core busy: server / load', 'unenforced', 'responses']
  const lines = [`| ${head.join(' | ')} |`, `|${head.map((_, i) => i === 0 || i === head.length - 1 ? '---' : '--:').join('|')}|`]
  for (const row of mine) {
    lines.push(`| ${[
      row.variant, range(row.rps, 0), times(row.vsBare.rps), times(row.vsReference.rps), med(row.p50Ms, 2), med(row.p99Ms, 2), med(row.p50SingleMs, 3),
      range(row.serverCpuUsPerRequest, 1), times(row.vsBare.serverCpu), times(row.vsReference.serverCpu), med(row.cpuOverBareUs, 1), med(row.redisCpuUsPerRequest, 1),
      row.vsReference.redisCpu === null || !(row.redisCpuUsPerRequest?.median > 1) ? '–' : ratioRange(row.vsReference.redisCpu),
      `${med(row.commandsSentPerRequest, 2)} (${med(row.roundTripsPerRequest, 2)})`, med(row.redisCommandsPerRequest, 2),
      row.scriptCallsPerRequest?.median > 0 ? fmt(1 / row.scriptCallsPerRequest.median, 1) : '–',
      ...memory ? [row.redisBytesPerClient === null ? '–' : `${med(row.redisBytesPerClient, 0)} (${med(row.requestsPerClient, 1)})`] : [],
      `${med(row.serverCpuShare === null ? null : scale(row.serverCpuShare, 100), 0)}% / ${med(row.loadCpuShare === null ? null : scale(row.loadCpuShare, 100), 0)}%`,
      fmt(row.unenforced, 0),
      responses(row.responses) + (row.errors > 0 ? `; ${row.errors} errors` : '')
    ].join(' | ')} |`)
  }
  return lines.join('\n')
}

function scriptsTable (scripts) {
  if (scripts === null) return 'Not run (BENCH_SCRIPTS=0).'
  if (scripts.skipped !== undefined) return `Not run: ${scripts.skipped}.`
  const lines = ['| script | path | µs per call inside Redis | µs per request | calls/s (redis-benchmark) | commands run per request (µs of each) |', '|---|---|--:|--:|--:|---|']
  for (const row of scripts.rows) {
    const requests = row.requests ?? 1
    const inside = Object.entries(row.inside ?? {}).sort(([, a], [, b]) => b.usPerCall - a.usPerCall)
      .map(([command, { perCall, usPerCall }]) => [command, perCall / requests, usPerCall / requests])
      .map(([command, perRequest, us]) => `${command}${Math.abs(perRequest - 1) < 0.01 ? '' : ` ×${fmt(perRequest, 2)}`} (${fmt(us, 2)})`).join(', ')
    const perRequest = row.usPerCall === null ? null : row.usPerCall / requests
    lines.push(`| ${row.script} | ${row.path} | ${fmt(row.usPerCall, 2)} | ${fmt(perRequest, 2)} | ${fmt(row.rps, 0)} | ${inside} |`)
  }
  return lines.join('\n')
}

/** The limiter's own CPU beside frl-redis's: what the ratios to frl-redis mean when both are close to bare. */
function overhead (row) {
  return `its own CPU (above bare) ${fmt(row?.cpuOverBareUs?.median, 1)} µs/req, ${fmt(row?.overheadVsReference?.median, 2)}× frl-redis's`
}

/**
 * Issue 16's targets, judged on this run for each algorithm (the autopipelining variant aside): allowed traffic
 * at 1.2x @fastify/rate-limit's Redis store in req/s and 0.5x its Redis CPU per request (the ratio of the
 * medians), the hot key at 1.6x and the banned flood at 1.3x its req/s and 0.85x bare Fastify's (beside what
 * Fastify's own refusal makes, `bare refusal`), the p50 at one connection within 0.1 ms of bare Fastify's, and
 * each algorithm's Redis CPU per allowed request within the sliding log's.
 * Returns [{ target, verdict, measured }].
 */
export function targets (rows) {
  const find = (variant, scenario) => rows.find(row => row.variant === variant && row.scenario === scenario)
  const ours = [...new Set(rows.map(row => row.variant).filter(v => v.startsWith('rate-guard ') && !v.endsWith('autopipelining') && !v.endsWith('subscribed')))]
  const out = []
  const judge = (target, ok, measured) => out.push({ target, verdict: ok === null ? 'not measured' : ok ? 'met' : 'not met', measured })
  const redisCpu = (variant) => find(variant, 'allowed')?.redisCpuUsPerRequest?.median
  const theirRedis = redisCpu(REFERENCE)
  // What no limiter refusing through Fastify's error handler can pass.
  const floor = find(BARE_REFUSAL, 'banned')?.vsBare.rps?.median
  for (const variant of ours) {
    const allowed = find(variant, 'allowed')
    const rps = allowed?.vsReference.rps?.median
    const redis = redisCpu(variant) === undefined || theirRedis === undefined ? undefined : redisCpu(variant) / theirRedis
    judge(`allowed, ${variant}: req/s ≥ 1.2× and Redis CPU ≤ 0.5× frl-redis`, rps === undefined || redis === undefined ? null : rps >= 1.2 && redis <= 0.5,
      `req/s ${fmt(rps, 2)}×, Redis CPU ${fmt(redis, 2)}× (${fmt(redisCpu(variant))} µs/req); ${overhead(allowed)}`)
    const hot = find(variant, 'hot')?.vsReference.rps?.median
    judge(`hot key, ${variant}: req/s ≥ 1.6× frl-redis`, hot === undefined ? null : hot >= 1.6, `${fmt(hot, 2)}×`)
    const banned = find(variant, 'banned')?.vsReference.rps?.median
    judge(`banned flood, ${variant}: req/s ≥ 1.3× frl-redis`, banned === undefined ? null : banned >= 1.3, `${fmt(banned, 2)}×`)
    const vsBare = find(variant, 'banned')?.vsBare.rps?.median
    judge(`banned flood, ${variant}: req/s ≥ 0.85× bare`, vsBare === undefined ? null : vsBare >= 0.85,
      `${fmt(vsBare, 2)}× (Fastify's own refusal, no limiter: ${fmt(floor, 2)}×)`)
    const single = allowed?.p50SingleOverBareMs?.median
    judge(`one connection, ${variant}: p50 ≤ bare + 0.1 ms`, single === undefined ? null : single <= 0.1, `bare + ${fmt(single, 3)} ms`)
    if (!variant.endsWith('sliding-log')) {
      const log = redisCpu('rate-guard sliding-log')
      judge(`Redis CPU, ${variant}: ≤ the sliding log's per allowed request`, redisCpu(variant) === undefined || log === undefined ? null : redisCpu(variant) <= log,
        `${fmt(redisCpu(variant))} µs vs ${fmt(log)} µs`)
    }
  }
  return out
}

function noise (share) {
  if (share === null) return '.'
  return `; over the measured windows, other processes kept the server's core ${fmt(share.median * 100, 0)}% busy ` +
    `(median; ${fmt(share.min * 100, 0)}–${fmt(share.max * 100, 0)}%): req/s suffers from that, CPU per request much less.`
}

export function markdown (results) {
  const { machine: m, settings: s, rows, scripts } = results
  const parts = [
    '# fastify-rate-guard: side-by-side benchmark',
    '',
    `Command: \`${results.command}\` (${results.elapsedS} s)`,
    '',
    `Machine: ${m.nproc} CPUs (${m.cpu}), Node ${m.node}, Redis ${m.redis} (maxmemory-policy ${m.redisMaxmemoryPolicy}); ` +
      Object.entries(m.packages).map(([name, v]) => `${name} ${v}`).join(', ') + '.',
    `Processes: ${m.pinning}; Redis: ${m.redisServer}. Load average ${m.loadAverageBefore} before, ${m.loadAverageAfter} after${noise(results.noise)}`,
    `Each figure: median of ${s.rounds} interleaved rounds (min–max in brackets), ${s.durationS} s measured after ${s.warmupS} s of warm-up at ` +
      `${s.connections} connections; "1 conn" is a further ${s.singleS} s at one connection. Ratios are taken within each round, then the median. ` +
      'CPU is the server process\'s (`process.cpuUsage`) and Redis\'s (`INFO cpu`) per answered request; commands sent and round trips are ' +
      'counted in the server process (a round trip: a command sent alone, or one pipeline / autopipelined batch); Redis cmds (`INFO stats`) ' +
      'include the commands scripts run. ' +
      '"Core busy" is the CPU the server and the load generator used over the window, as a share of one core: the one near 100% is what ' +
      'limits req/s. Redis B/client: Redis memory grown over the allowed run per client of the pool (with the requests each client sent).'
  ]
  for (const scenario of s.scenarios) parts.push('', `## ${SCENARIOS[scenario].title}`, '', scenarioTable(rows, scenario))
  if (s.scenarios.includes('banned')) {
    const kinds = [...new Set(results.variants.map(v => v.kind))]
    parts.push('', 'How each server bans:', '', ...kinds.map(kind => `- ${kind}: ${BANS[kind]}`))
  }
  parts.push('', '## Scripts inside Redis (redis-benchmark EVALSHA, INFO commandstats usec_per_call)', '', scriptsTable(scripts))
  const judged = targets(rows)
  parts.push('', '## Issue 16 targets on this run', '', ...judged.map(t => `- ${t.verdict === 'met' ? '✅' : t.verdict === 'not met' ? '❌' : '–'} ${t.target}: ${t.verdict} (${t.measured})`), '')
  return parts.join('\n')
}
