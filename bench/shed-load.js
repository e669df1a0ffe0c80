// The load of bench/shed.js (issue 46) and what it came to. Open loop: requests sent at fixed times whatever the
// answers (each class evenly spaced at its share of the rate), each on a keep-alive connection of its own while it
// waits (node:http's agent opens one more whenever all are busy), so an overloaded server sees the whole rate, as
// users arriving on their own do; a closed loop (each connection's next request after its answer) slows down with
// the server and hides an overload, so it only measures capacity here. A request's latency runs from the time it
// was due to be sent (a late send is the client's delay, counted, never hidden), and one not answered within the
// timeout is a failure, its latency the timeout.
import http from 'node:http'
import { performance } from 'node:perf_hooks'

/** A keep-alive agent with no cap on connections: an open loop must never wait for one. */
export function agent () {
  return new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 4096 })
}

/**
 * One request; resolves (never rejects) `{ status, retryAfter, code, endedAt }`: status is the HTTP status, or
 * 'timeout' when no answer came by `deadline` (performance.now() time), or 'error' (the connection failed).
 */
export function request (via, port, path, deadline, { method = 'GET', body } = {}) {
  return new Promise((resolve) => {
    let settled = false
    const done = (outcome) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve({ ...outcome, endedAt: performance.now() })
    }
    const headers = body === undefined ? {} : { 'content-type': 'application/json' }
    const req = http.request({ agent: via, host: '127.0.0.1', port, path, method, headers }, (res) => {
      const chunks = []
      res.on('data', chunk => chunks.push(chunk))
      res.on('error', () => done({ status: 'error' }))
      res.on('end', () => done({ status: res.statusCode, retryAfter: res.headers['retry-after'], body: Buffer.concat(chunks).toString() }))
    })
    const timer = setTimeout(() => {
      done({ status: 'timeout' })
      req.destroy()
    }, Math.max(0, deadline - performance.now()))
    req.on('error', () => done({ status: 'error' }))
    req.end(body === undefined ? undefined : JSON.stringify(body))
  })
}

/** A 503's body: its `code` (FST_RATE_GUARD_SHED from the shedder), or null when it is not JSON. */
function codeOf (body) {
  try {
    return JSON.parse(body).code ?? null
  } catch {
    return null
  }
}

/**
 * The send times of `durationS` seconds, each class (`rates`: name → { path, rate } a second) evenly spaced at
 * its rate, the classes offset from each other; ms from the start, in order.
 */
export function schedule (rates, durationS) {
  const events = []
  const classes = Object.entries(rates).filter(([, { rate }]) => rate > 0)
  for (const [c, [name, { path, rate }]] of classes.entries()) {
    const gap = 1000 / rate
    for (let at = gap * (c + 1) / classes.length; at < durationS * 1000; at += gap) events.push({ at, name, path })
  }
  return events.sort((a, b) => a.at - b.at)
}

/**
 * Sends `events` (from `schedule`) on time to `port`; resolves, once each is answered or timed out, a record per
 * request: { name, at (ms from the start), ms (latency), status, retryAfter, code } and the send's worst lag (ms).
 */
export async function openLoop (port, events, timeoutMs, via = agent()) {
  const t0 = performance.now()
  const answers = []
  let next = 0
  let lagMs = 0
  await new Promise((resolve) => {
    const tick = () => {
      const now = performance.now() - t0
      for (; next < events.length && events[next].at <= now; next++) {
        const { at, name, path } = events[next]
        lagMs = Math.max(lagMs, now - at)
        const due = t0 + at
        answers.push(request(via, port, path, due + timeoutMs).then(({ status, retryAfter, body, endedAt }) => {
          const ms = status === 'timeout' ? timeoutMs : endedAt - due
          return { name, at, ms, status, retryAfter, code: status === 503 ? codeOf(body) : undefined }
        }))
      }
      if (next < events.length) setTimeout(tick, Math.min(1, events[next].at - now))
      else resolve()
    }
    tick()
  })
  const records = await Promise.all(answers)
  return { records, lagMs }
}

/** A closed loop of `connections`, each sending the next of `paths` (in turn) once answered, for `durationS`: answers a second. */
export async function closedLoop (port, paths, connections, durationS, timeoutMs) {
  const via = new http.Agent({ keepAlive: true, maxSockets: connections })
  const end = performance.now() + durationS * 1000
  const statuses = {}
  let sent = 0
  const worker = async () => {
    while (performance.now() < end) {
      const { status } = await request(via, port, paths[sent++ % paths.length], performance.now() + timeoutMs)
      statuses[status] = (statuses[status] ?? 0) + 1
    }
  }
  const started = performance.now()
  await Promise.all(Array.from({ length: connections }, worker))
  const seconds = (performance.now() - started) / 1000
  via.destroy()
  return { perSecond: (statuses[200] ?? 0) / seconds, statuses }
}

/** The `q` quantile (0..1) of sorted `values`, or null for none. */
export function quantile (sorted, q) {
  return sorted.length === 0 ? null : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]
}

const byNumber = (a, b) => a - b
const round2 = x => x === null ? null : Math.round(x * 100) / 100

/**
 * What the requests sent between `fromMs` and `toMs` of the run (by their send time) came to, for one class:
 * counts by outcome, shares of the requests, latency percentiles (all answers, a timeout at the timeout; and the
 * 2xx alone), the 503s without Retry-After or without the shedder's code.
 */
export function summary (records, fromMs, toMs) {
  const mine = records.filter(r => r.at >= fromMs && r.at < toMs)
  const all = mine.map(r => r.ms).sort(byNumber)
  const ok = mine.filter(r => typeof r.status === 'number' && r.status < 300).map(r => r.ms).sort(byNumber)
  const shed = mine.filter(r => r.status === 503)
  const count = status => mine.filter(r => r.status === status).length
  const sent = mine.length
  return {
    sent,
    ok: ok.length,
    shed: shed.length,
    otherStatus: sent - ok.length - shed.length - count('timeout') - count('error'),
    timeouts: count('timeout'),
    errors: count('error'),
    perSecond: round2(ok.length / ((toMs - fromMs) / 1000)),
    successShare: sent === 0 ? null : ok.length / sent,
    shedShare: sent === 0 ? null : shed.length / sent,
    p50Ms: round2(quantile(all, 0.5)),
    p99Ms: round2(quantile(all, 0.99)),
    okP50Ms: round2(quantile(ok, 0.5)),
    okP99Ms: round2(quantile(ok, 0.99)),
    okMeanMs: ok.length === 0 ? null : round2(ok.reduce((a, b) => a + b, 0) / ok.length),
    shedWithoutRetryAfter: shed.filter(r => r.retryAfter === undefined).length,
    shedWithoutCode: shed.filter(r => r.code !== 'FST_RATE_GUARD_SHED').length
  }
}
