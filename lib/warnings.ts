import type { FastifyBaseLogger } from 'fastify'

// Every warning the plugin says, by its stable code, and the one way it is said: to the app's logger when the
// app has one (an object first, with the code in it), else as a process warning (`process.emitWarning`, type
// `RateGuardWarning`), which Node prints to stderr without a logger and `--no-warnings` silences.
//
// "Has a logger" is decided from the logger itself: Fastify without one (`Fastify()`, `logger: false`) gives
// abstract-logging's, whose methods are one function named `noop` and which has no `level`. Any other logger
// is the app's, even one at level 'silent' (pino's), whose `level` says the app silenced it on purpose: then
// nothing is emitted through the process either. Info lines (e.g. "clients are keyed by ...") stay the logger's.

/** The code of each warning, `FST_RATE_GUARD_<NAME>`; `process.on('warning')` sees it as `warning.code`. */
export const WARNINGS = Object.freeze({
  VALUE_REPLACED: 'FST_RATE_GUARD_VALUE_REPLACED',
  OPTION_UNUSED: 'FST_RATE_GUARD_OPTION_UNUSED',
  WAIT_UNREACHABLE: 'FST_RATE_GUARD_WAIT_UNREACHABLE',
  RATE_LIMIT_BESIDE_CONFIG: 'FST_RATE_GUARD_RATE_LIMIT_BESIDE_CONFIG',
  ROUTES_BEFORE_PLUGIN: 'FST_RATE_GUARD_ROUTES_BEFORE_PLUGIN',
  TRUSTS_EVERY_PROXY: 'FST_RATE_GUARD_TRUSTS_EVERY_PROXY',
  DECORATOR_TAKEN: 'FST_RATE_GUARD_DECORATOR_TAKEN',
  NESTED_REGISTRATION: 'FST_RATE_GUARD_NESTED_REGISTRATION',
  IN_PROCESS: 'FST_RATE_GUARD_IN_PROCESS',
  STORE_FULL: 'FST_RATE_GUARD_STORE_FULL',
  APP_CLOCK: 'FST_RATE_GUARD_APP_CLOCK',
  OFFLINE_QUEUE: 'FST_RATE_GUARD_OFFLINE_QUEUE',
  NO_ERROR_LISTENER: 'FST_RATE_GUARD_NO_ERROR_LISTENER',
  REDIS_NOT_READY: 'FST_RATE_GUARD_REDIS_NOT_READY',
  EVICTION_POLICY: 'FST_RATE_GUARD_EVICTION_POLICY',
  REDIS_TROUBLE: 'FST_RATE_GUARD_REDIS_TROUBLE',
  REDIS_LATE: 'FST_RATE_GUARD_REDIS_LATE',
  REDIS_STALLED: 'FST_RATE_GUARD_REDIS_STALLED',
  SUBSCRIBE_FAILED: 'FST_RATE_GUARD_SUBSCRIBE_FAILED',
  LEASES_LOST: 'FST_RATE_GUARD_LEASES_LOST',
  CALLBACK_FAILED: 'FST_RATE_GUARD_CALLBACK_FAILED',
  SETTLED_PAST_LIMITS: 'FST_RATE_GUARD_SETTLED_PAST_LIMITS',
  UNREADABLE_FORWARDED_FOR: 'FST_RATE_GUARD_UNREADABLE_FORWARDED_FOR',
  UNTRUSTED_FORWARDED_FOR: 'FST_RATE_GUARD_UNTRUSTED_FORWARDED_FOR',
  UNVERIFIED_API_KEY: 'FST_RATE_GUARD_UNVERIFIED_API_KEY',
  ADDRESSLESS: 'FST_RATE_GUARD_ADDRESSLESS'
})

export type WarningName = keyof typeof WARNINGS

/** Says one start-up warning (`name`, `message`) once per registration; see `startupWarnings`. */
export type Warn = (name: WarningName, message: string, fields?: object) => void

/** Whether `log` is the app's logger, not Fastify's stand-in for none (see the top of this file). */
export function hasLogger (log: FastifyBaseLogger): boolean {
  const partial = log as Partial<FastifyBaseLogger>
  return partial.level !== undefined || partial.warn?.name !== 'noop'
}

/**
 * Says warning `name`: `log[level]` with `{ code, ...fields }` first when the app has a logger, else
 * `process.emitWarning(message, { type: 'RateGuardWarning', code })`. How often is the caller's to decide.
 */
export function warn (
  log: FastifyBaseLogger, name: WarningName, message: string, fields?: object, level: 'warn' | 'error' = 'warn'
): void {
  const code = WARNINGS[name]
  if (hasLogger(log)) log[level]({ ...fields, code }, message)
  else process.emitWarning(withCause(message, fields), { type: 'RateGuardWarning', code })
}

/** A registration's start-up warnings: each said once (a GET route's HEAD twin is declared with the same config). */
export function startupWarnings (log: FastifyBaseLogger): Warn {
  const said = new Set<string>()
  return (name, message, fields) => {
    if (said.has(message)) return
    said.add(message)
    warn(log, name, message, fields)
  }
}

/** The message of a process warning: the logger's, and the error's own message when one is among `fields`. */
function withCause (message: string, fields: object | undefined): string {
  const err = (fields as { err?: unknown } | undefined)?.err
  return err instanceof Error ? `${message} (${err.message})` : message
}
