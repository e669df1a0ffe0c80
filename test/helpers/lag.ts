// The lag: the control every wall-clock bound in the suite is measured against. From the moment this module is
// loaded, a timer ticks every TICK_MS. A tick that runs late, by more than the CPU this process used since
// the tick before, shows time in which the process wanted to run and could not: the machine (2 cores; two
// test files at a time, their redis-servers and whatever else runs beside them) gave its cores to others.
// That time is recorded as a span. Anything timed over such spans is late by about as much, so a bound is
// what the operation takes on a quiet machine, plus QUIET_MS, plus twice the lag measured while it ran: on a
// loaded machine the bound grows with the load measured in the same run, on a quiet one it stays tight
// enough to catch what the test was written for (an answer held for a whole outage, a cache scanned on every
// insert). The process's own work is not lag (its CPU is taken off), so a test that times a busy loop of its
// own is not excused by it.
import { performance } from 'node:perf_hooks'

/** The tick's period: stalls shorter than this may go unseen, and QUIET_MS covers them. */
const TICK_MS = 10
/** Lateness below this is the timer's own granularity, not lag. */
const JITTER_MS = 1

/**
 * What a quiet machine adds to anything timed, unseen by the ticks: timer granularity, the poll phase's turn
 * after a deadline, stalls shorter than a tick, a garbage collection. (CI once saw a whole process stall
 * ~55 ms: the ticks see those.)
 */
export const QUIET_MS = 100

/** Spans of lag, in order, as triples: when the late tick was due, when it ran, and the lag in between. */
const spans: number[] = []
/** When the next tick is due: past it, the process is late right now. */
let due = 0
/** The process's CPU time (ms) when the last tick ran. */
let cpuAt = 0

function cpuMs (): number {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}

function schedule (): void {
  due = performance.now() + TICK_MS
  setTimeout(tick, TICK_MS).unref()
}

function tick (): void {
  const ran = performance.now()
  const cpu = cpuMs()
  const lag = ran - due - (cpu - cpuAt)
  if (lag > JITTER_MS) spans.push(due, ran, lag)
  cpuAt = cpu
  schedule()
}
cpuAt = cpuMs()
schedule()

/** The part of a span's lag that falls between `from` and `to`. */
function within (start: number, end: number, lag: number, from: number, to: number): number {
  const overlap = Math.min(end, to) - Math.max(start, from)
  return overlap <= 0 ? 0 : lag * overlap / (end - start)
}

/** Milliseconds between `from` and `to` (performance.now() times) in which this process wanted to run and could not. */
export function lagDuring (from: number, to = performance.now()): number {
  // The first span that may end after `from`: spans are in order, and none overlaps the next.
  let lo = 0
  let hi = spans.length / 3
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (spans[3 * mid + 1]! <= from) lo = mid + 1
    else hi = mid
  }
  let lag = 0
  for (let i = 3 * lo; i < spans.length && spans[i]! < to; i += 3) lag += within(spans[i]!, spans[i + 1]!, spans[i + 2]!, from, to)
  // Asked from a callback that runs late: the span it is in is not recorded yet.
  const now = performance.now()
  const pending = now - due - (cpuMs() - cpuAt)
  if (pending > JITTER_MS) lag += within(due, now, pending, from, to)
  return lag
}

/**
 * The bound for something that takes `expectedMs` on a quiet machine (a deadline, a cool-down, a control
 * timed in the same run) and was timed from `from` to `to`: that, plus QUIET_MS, plus twice the lag meanwhile.
 */
export function allowing (expectedMs: number, from: number, to = performance.now()): number {
  return expectedMs + QUIET_MS + 2 * lagDuring(from, to)
}

/** Something timed: sent (or started) at `at`, taking `ms` (performance.now() times). */
export interface Span { at: number, ms: number }

/** Whether `span` took at most `expectedMs` plus the slack the lag during it allows. */
export function inTime (expectedMs: number, span: Span): boolean {
  return span.ms <= allowing(expectedMs, span.at, span.at + span.ms)
}

/** The spans that took longer than `expectedMs` allows, each as `<ms> (bound <ms>)`: [] when all were in time. */
export function overdue (expectedMs: number, spans: readonly Span[]): string[] {
  return spans.filter(s => !inTime(expectedMs, s)).map(s => `${Math.round(s.ms)} (bound ${Math.round(allowing(expectedMs, s.at, s.at + s.ms))})`)
}

/** Whether `span` took less than `ms` once the lag during it is taken off: it did not wait that long. */
export function under (ms: number, span: Span): boolean {
  return span.ms - lagDuring(span.at, span.at + span.ms) < ms
}
