// The load generator: its own process (pinned by the runner to the core the server does not use), driven over
// IPC. It keeps `connections` HTTP/1.1 keep-alive sockets, each with one request in flight, and writes
// pre-built request buffers (one per key), so a request costs it one socket write and a small parse: cheaper
// than autocannon or undici, so the server, not the generator, is what runs out of CPU.
//
// Messages from the runner:
//   { type: 'start', port, plan, connections }  connect and send until stopped; replies { type: 'started' }
//   { type: 'mark' }   forget everything counted so far (the warm-up); replies { type: 'marked' }
//   { type: 'stop' }   stop sending; replies { type: 'result', ...counts since the mark }
import net from 'node:net'
import { performance } from 'node:perf_hooks'
import { requestPicker } from './plan.js'

/** Latencies in whole microseconds, one bucket each, up to this; slower ones land in the last bucket. */
const MAX_US = 2_000_000
const CRLF2 = Buffer.from('\r\n\r\n')
const LENGTH = Buffer.from('content-length:')
/** rate-guard's header on a request let through because Redis did not decide in time (failMode 'open'). */
const UNENFORCED = Buffer.from('x-ratelimit-enforced')

let run = null

function newCounts () {
  return { requests: 0, statuses: {}, errors: 0, histogram: new Uint32Array(MAX_US + 1), maxUs: 0, at: performance.now(), cpu: process.cpuUsage() }
}

/** The position just after `content-length:` in the header block, case-insensitively (Node writes it lower case). */
function contentLength (buf, end) {
  let i = buf.indexOf(LENGTH, 0)
  if (i === -1 || i > end) i = buf.indexOf('Content-Length:', 0, 'latin1')
  if (i === -1 || i > end) return -1
  i += LENGTH.length
  while (buf[i] === 32) i++
  let n = 0
  for (let c = buf[i]; c >= 48 && c <= 57; c = buf[++i]) n = n * 10 + c - 48
  return n
}

function connect (state, port) {
  const socket = net.connect({ port, host: '127.0.0.1', noDelay: true })
  let pending = null
  let sentAt = 0
  const send = () => {
    if (state.stopped) return
    sentAt = performance.now()
    socket.write(state.pick(state.sent++))
  }
  socket.on('connect', send)
  socket.on('data', (chunk) => {
    pending = pending === null ? chunk : Buffer.concat([pending, chunk])
    for (;;) {
      const head = pending.indexOf(CRLF2)
      if (head === -1) return
      const length = contentLength(pending, head)
      if (length === -1) {
        state.counts.errors++
        socket.destroy()
        return
      }
      const total = head + 4 + length
      if (pending.length < total) return
      let status = (pending[9] - 48) * 100 + (pending[10] - 48) * 10 + (pending[11] - 48)
      if (status === 200) {
        const unenforced = pending.indexOf(UNENFORCED)
        if (unenforced !== -1 && unenforced < head) status = '200 unenforced'
      }
      pending = pending.length === total ? null : pending.subarray(total)
      const counts = state.counts
      const us = Math.round((performance.now() - sentAt) * 1000)
      counts.requests++
      counts.statuses[status] = (counts.statuses[status] ?? 0) + 1
      counts.histogram[us < MAX_US ? us : MAX_US]++
      if (us > counts.maxUs) counts.maxUs = us
      send()
      if (pending === null) return
    }
  })
  socket.on('error', () => { state.counts.errors++ })
  socket.on('close', () => {
    state.open--
    if (!state.stopped) {
      state.counts.errors++
      state.open++
      connect(state, port)
    } else if (state.open === 0) state.closed()
  })
  state.sockets.add(socket)
}

function percentile (histogram, total, p) {
  const rank = Math.max(1, Math.ceil(total * p))
  let seen = 0
  for (let us = 0; us < histogram.length; us++) {
    seen += histogram[us]
    if (seen >= rank) return us
  }
  return histogram.length - 1
}

function summary (counts) {
  const elapsedMs = performance.now() - counts.at
  const cpu = process.cpuUsage(counts.cpu)
  const { requests } = counts
  return {
    requests,
    elapsedMs,
    rps: requests / (elapsedMs / 1000),
    statuses: counts.statuses,
    errors: counts.errors,
    p50Ms: requests === 0 ? null : percentile(counts.histogram, requests, 0.5) / 1000,
    p99Ms: requests === 0 ? null : percentile(counts.histogram, requests, 0.99) / 1000,
    maxMs: counts.maxUs / 1000,
    // The generator's own CPU over the window, as a share of one core: near 1, it is what limits req/s.
    cpuShare: (cpu.user + cpu.system) / (elapsedMs * 1000)
  }
}

process.on('message', (msg) => {
  if (msg.type === 'start') {
    const state = { pick: requestPicker(msg.plan), sent: 0, stopped: false, open: msg.connections, counts: newCounts(), sockets: new Set(), closed: null }
    run = state
    for (let i = 0; i < msg.connections; i++) connect(state, msg.port)
    process.send({ type: 'started' })
  } else if (msg.type === 'mark') {
    run.counts = newCounts()
    process.send({ type: 'marked' })
  } else if (msg.type === 'stop') {
    const state = run
    run = null
    state.stopped = true
    const result = { ...summary(state.counts), sentSinceStart: state.sent }
    state.closed = () => process.send({ type: 'result', ...result })
    for (const socket of state.sockets) socket.destroy()
  } else if (msg.type === 'exit') {
    process.disconnect()
  }
})
