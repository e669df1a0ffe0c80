import { fail } from './checks.js'
import { toMilliseconds } from '../duration.js'
import { InvalidOptionError } from '../errors.js'
import type { ResolvedRoute } from './resolved.js'

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

/** The longest a timer waits (Node fires one of more than 2^31 - 1 ms at once). */
const LONGEST_WAIT_MS = 2 ** 31 - 1

/** `maxWait`: `false` (the default, no request waits) or a duration; resolved to ms, or null. */
export function checkMaxWait (value: unknown, name: string): number | null {
  if (value === false) return null
  const ms = toMilliseconds(value)
  if (ms === undefined || ms > LONGEST_WAIT_MS) fail(name, value, `false, or a duration up to ${LONGEST_WAIT_MS} ms, such as '1 second'`)
  return ms
}

/**
 * How `maxWait` meets a budget's other options, once they are merged (`where` prefixes the names): not with `continueExceeding` / `exponentialBackoff`, which
 * hold a client off where `maxWait` lets it through; not with `shared`, whose budget would count the request
 * when it is decided and the client's when its wait ends. `maxQueue` given where no request waits says nothing.
 */
export function checkWaiting (route: ResolvedRoute, given: { readonly maxQueue?: unknown }, where: string): void {
  if (route.maxWait === null) {
    if (given.maxQueue !== undefined) throw new InvalidOptionError(`${where}maxQueue`, 'maxWait too: maxQueue bounds the requests that wait')
    return
  }
  const refuse = (why: string): never => { throw new InvalidOptionError(`${where}maxWait`, why) }
  if (route.overLimit !== undefined) refuse('false with continueExceeding or exponentialBackoff: they hold a client off over the limit, maxWait lets it through')
  if (route.shared !== null) refuse('false with shared: the shared budget would count the request when it is decided, the client\'s when its wait ends')
}
