import { fail } from './checks.js'
import type { Algorithm } from '../algorithms/index.js'
import type { Warn } from './compat.js'
import { LONGEST_TIMER_MS, formatDuration, toMilliseconds } from '../duration.js'
import type { ResolvedLimit, ResolvedRoute } from './resolved.js'

// `maxWait` and `maxQueue`: a request its limits deny, which every one of them would allow within `maxWait`, is
// not refused: its place is counted at the end of that wait, in the same decision (so the requests waiting
// never pass a limit, across instances), and it goes on once the wait is over (lib/request/wait.ts). At most
// `maxQueue` requests of one client's budget wait at once (default: the smallest `max` of its limits); one
// that would wait longer, or find the queue full, is refused as before. Every algorithm keeps the places
// (`reserve` in lua/<algorithm>.lua and its twin): the sliding log as an entry ahead of the clock; the fixed
// window and the sliding window as a count of the next window (one window ahead at most); the token bucket as
// its tokens taken now, a debt paid off by the end of the wait (its queue counted in units).

/**
 * `maxWaiting`'s default: the requests that wait at once in one registration. Each holds an open connection (a
 * file descriptor), its request and response, a timer and a promise in the app: about 11 KB of heap a waiting
 * request, measured over HTTP with 1000 and 2000 of them (both ends of each connection in one process). A
 * thousand hold ~11 MB and a thousand sockets, well inside Node's default heap and descriptors, and are more
 * than honest traffic keeps waiting (a few requests of a client slightly over its rate).
 */
export const MAX_WAITING = 1000

/** `maxWait`: `false` (the default, no request waits) or a duration; resolved to ms, or null. */
export function checkMaxWait (value: unknown, name: string): number | null {
  if (value === false) return null
  const ms = toMilliseconds(value)
  if (ms === undefined || ms > LONGEST_TIMER_MS) fail(name, value, `false, or a duration up to ${LONGEST_TIMER_MS} ms, such as '1 second'`)
  return ms
}

/** A limit whose `max` and window are known at register: one of the request's functions is not. */
type Fixed = ResolvedLimit & { readonly max: number, readonly windowMs: number }

/**
 * `maxWait` and `maxQueue` past what the limits can make wait are accepted (each still bounds what it says, and
 * the limits bound the rest: nothing is loosened) with a warning that says how far they reach. The longest a
 * request can wait, per limit: the fixed window one window (it reserves the next window only), the sliding
 * window two (later in this one, or in the next), the sliding log and the token bucket one window per
 * `max` units queued ahead (an entry leaves, a token drips back, a window after the one before); a calendar
 * quota as its algorithm, on its period's longest length. A request waits for every limit: the longest of
 * theirs. The most that can wait, per limit: what it frees within `maxWait` (`max` for the fixed window, twice
 * that for the sliding window, `max` per window of `maxWait` for the others); every limit must free a place:
 * the fewest of theirs. Limits a function of the request gives are not known at register: nothing is said.
 */
export function saidOfWaiting (route: ResolvedRoute, where: string, warn: Warn): void {
  const { algorithm, limits, maxWait } = route
  if (maxWait === null) return
  if (!limits.every((limit): limit is Fixed => typeof limit.max === 'number' && typeof limit.windowMs === 'number')) return
  const queue = route.maxQueue ?? Math.min(...limits.map(limit => limit.max))
  const longest = Math.max(...limits.map(limit => limit.windowMs * windowsWaited(algorithm, queue, limit.max)))
  if (maxWait > longest) {
    warn('WAIT_UNREACHABLE', `rate-guard: ${where}maxWait ${formatDuration(maxWait)} cannot take effect past ${formatDuration(longest)}: ` +
      `no request waits longer on these limits (${algorithm}, maxQueue ${queue})`)
  }
  if (route.maxQueue === undefined) return
  const most = Math.min(...limits.map(limit => limit.max * windowsFreed(algorithm, maxWait, limit.windowMs)))
  if (route.maxQueue > most) {
    warn('WAIT_UNREACHABLE', `rate-guard: ${where}maxQueue ${route.maxQueue} cannot take effect past ${most}: ` +
      `the limits free no more places within maxWait ${formatDuration(maxWait)} (${algorithm})`)
  }
}

function windowsWaited (algorithm: Algorithm, queue: number, max: number): number {
  if (algorithm === 'fixed-window') return 1
  if (algorithm === 'sliding-window') return 2
  return Math.ceil(queue / max)
}

function windowsFreed (algorithm: Algorithm, maxWait: number, windowMs: number): number {
  if (algorithm === 'fixed-window') return 1
  if (algorithm === 'sliding-window') return 2
  return Math.ceil(maxWait / windowMs)
}
