import type { FastifyBaseLogger } from 'fastify'
import { troubleChannel } from './channels.js'
import type { TroubleReason } from './channels.js'
import type { FailMode } from './types.js'
import { warn } from './warnings.js'

// Redis trouble: what kind an error from Redis is (one that passes, which the breaker counts and failMode
// decides, or one in how Redis is set up, logged as an error, no breaker), and how it is told: on the trouble
// channel each time, in the log at most once per interval.

// Faults in how Redis is set up (no permission, a wrong password, a foreign value at our key, a broken script): they will not
// pass by themselves, so they are logged as errors and do not trip the breaker, since Redis did answer.
// Everything else (connection lost, deadline, BUSY, LOADING, TRYAGAIN, CLUSTERDOWN, READONLY, OOM, …) passes.
const PERMANENT = new RegExp([
  '^(NOPERM|NOAUTH|WRONGPASS|WRONGTYPE|FST_RATE_GUARD_INVALID_REPLY)',
  String.raw`^ERR (?!.*\b(OOM|BUSY|LOADING|TRYAGAIN|CLUSTERDOWN|READONLY|MASTERDOWN)\b)`
].join('|'))

/** Redis trouble is logged at most once per this many ms, with the count of what was held back. */
export const TROUBLE_LOG_INTERVAL = 10_000

/** What kind of trouble `err` is, as the trouble channel names it. */
export function troubleReason (err: Error): TroubleReason {
  const code = (err as { code?: unknown }).code
  if (code === 'FST_RATE_GUARD_DEADLINE') return 'deadline'
  if (code === 'FST_RATE_GUARD_SILENT_CONNECTION') return 'silent'
  if (code === 'FST_RATE_GUARD_LATE_REPLIES') return 'late'
  if (/\bOOM\b/.test(err.message)) return 'oom'
  return err.name === 'ReplyError' || isPermanent(err) ? 'redis' : 'connection'
}

/** Whether `err` is a fault in how Redis is set up rather than one that passes. */
export function isPermanent (err: Error): boolean {
  return PERMANENT.test((err as { code?: unknown }).code === undefined ? err.message : String((err as { code?: unknown }).code))
}

/** One registration's Redis trouble, told: on the trouble channel, and in the log at most once per interval. */
export class Trouble {
  readonly #nameSpace: string
  #lastLogged = -Infinity
  #heldBack = 0

  /** `nameSpace`: the registration's, named on `rate-guard:redis-trouble`. */
  constructor (nameSpace: string) {
    this.#nameSpace = nameSpace
  }

  /**
   * Tells `err` on the channel, and logs it at most once per interval, with how much was held back since the
   * last line (and what decided, when a request was refused by it).
   */
  readonly report = (err: Error, log: FastifyBaseLogger, failMode?: FailMode): void => {
    this.publish(err, failMode)
    const now = Date.now()
    if (now - this.#lastLogged < TROUBLE_LOG_INTERVAL) {
      this.#heldBack++
      return
    }
    const heldBack = this.#heldBack
    this.#lastLogged = now
    this.#heldBack = 0
    const level = isPermanent(err) ? 'error' : 'warn'
    // A call that decides nothing (a settlement, a lease's release or renewal) has no failMode to answer it.
    const message = failMode === undefined
      ? 'rate-guard: Redis did not answer a call that decides no request (a settlement, a lease released or renewed)'
      : 'rate-guard: Redis did not decide; failMode decides'
    warn(log, 'REDIS_TROUBLE', message, { err, failMode, heldBack }, level)
  }

  /** Tells the trouble channel, when someone listens. */
  publish (error: Error, failMode?: FailMode): void {
    if (troubleChannel.hasSubscribers) troubleChannel.publish({ nameSpace: this.#nameSpace, error, failMode, reason: troubleReason(error) })
  }
}
