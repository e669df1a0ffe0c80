import type { TroubleReason } from './channels.js'

// What kind of trouble an error from Redis is: one that passes (the breaker counts it, failMode decides) or
// one in how Redis is set up (logged as an error, no breaker), and the reason the trouble channel gives.

// Faults in how Redis is set up (no permission, a wrong password, a foreign value at our key, a broken script): they will not
// pass by themselves, so they are logged as errors and do not trip the breaker, since Redis did answer.
// Everything else (connection lost, deadline, BUSY, LOADING, TRYAGAIN, CLUSTERDOWN, READONLY, OOM, …) passes.
const PERMANENT = new RegExp([
  '^(NOPERM|NOAUTH|WRONGPASS|WRONGTYPE|FST_RATE_GUARD_INVALID_REPLY)',
  String.raw`^ERR (?!.*\b(OOM|BUSY|LOADING|TRYAGAIN|CLUSTERDOWN|READONLY|MASTERDOWN)\b)`
].join('|'))

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
