import { checkDuration, checkKeys, checkMax, fail } from './checks.js'
import type { BanPolicy } from '../types.js'
import type { ResolvedLimit, ResolvedRoute } from './resolved.js'

// `ban` as an option: a policy (`{ threshold, duration, escalate, maxDuration, forget }`), `false`, or
// `@fastify/rate-limit`'s number of denials, and how a route's merges over the plugin's.

/** A ban's defaults: the cap on a growing ban's length, and how long a ban counts toward the next one's. */
const BAN_DEFAULTS = Object.freeze({ maxDuration: 24 * 3600_000, forget: 24 * 3600_000 })

/** Steps a factor ladder may take before it reaches its cap: 2^40 ms outlasts any cap worth setting. */
const MAX_LADDER = 64

/** `ban` as given: a number of denials (theirFallbacks made it 0 or more), a policy, or null for `false`. */
export function checkBanOption (value: unknown, name: string): number | BanPolicy | null {
  return typeof value === 'number' ? checkDenials(value, name) : checkBan(value, name)
}

/** `ban` given as a number of denials (theirFallbacks made it 0 or more): a safe integer, or the coded error. */
function checkDenials (value: number, name: string): number {
  if (!Number.isSafeInteger(value)) fail(name, value, 'false, { threshold, duration }, or a number of denials (an integer, 0 or more)')
  return value
}

function checkBan (value: unknown, name: string): BanPolicy | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, 'false or { threshold, duration, escalate }')
  const ban = value as Record<string, unknown>
  checkKeys(ban, new Set(['threshold', 'duration', 'escalate', 'maxDuration', 'forget']), `${name}.`)
  const threshold = checkMax(ban.threshold, `${name}.threshold`)
  const forgetMs = ban.forget === undefined ? BAN_DEFAULTS.forget : checkDuration(ban.forget, `${name}.forget`)
  const ladder = Array.isArray(ban.escalate) ? listedLadder(ban, ban.escalate, name) : factorLadder(ban, name)
  return Object.freeze({ threshold, ladder: Object.freeze(ladder), forgetMs })
}

/** `escalate` as the list of every ban's length. */
function listedLadder (ban: Record<string, unknown>, escalate: unknown[], name: string): number[] {
  if (ban.duration !== undefined || ban.maxDuration !== undefined) {
    fail(`${name}.escalate`, escalate, 'a list of ban lengths without duration or maxDuration (the list holds them all)')
  }
  if (escalate.length === 0 || escalate.length > MAX_LADDER) fail(`${name}.escalate`, escalate, `a list of 1 to ${MAX_LADDER} ban lengths`)
  return escalate.map((step: unknown, i) => checkDuration(step, `${name}.escalate[${i}]`))
}

/** `duration`, each ban in a row `escalate` times the one before (none: all as long) up to `maxDuration`. */
function factorLadder (ban: Record<string, unknown>, name: string): number[] {
  const { escalate } = ban
  const ladder = [checkDuration(ban.duration, `${name}.duration`)]
  if (escalate === undefined) {
    if (ban.maxDuration !== undefined) fail(`${name}.maxDuration`, ban.maxDuration, 'no cap without escalate')
    return ladder
  }
  if (typeof escalate !== 'number' || !Number.isFinite(escalate) || escalate <= 1) {
    fail(`${name}.escalate`, escalate, 'a factor above 1, or a list of ban lengths')
  }
  const cap = ban.maxDuration === undefined
    ? Math.max(BAN_DEFAULTS.maxDuration, ladder[0]!)
    : checkDuration(ban.maxDuration, `${name}.maxDuration`)
  if (cap < ladder[0]!) fail(`${name}.maxDuration`, ban.maxDuration, 'at least duration')
  while (ladder[ladder.length - 1]! < cap && ladder.length < MAX_LADDER) {
    ladder.push(Math.min(cap, Math.ceil(ladder[ladder.length - 1]! * escalate)))
  }
  return ladder
}

/**
 * `ban: N`: `@fastify/rate-limit` answers 403 from the (N + 1)th denial within a window until that window
 * ends. Here: a ban of one window (the budget's longest) from the (N + 1)th denial, on every route; null when
 * a window is a function of the request, whose ban is made per request (see lib/request/limits.ts).
 */
export function banPerWindow (denials: number, windows: ReadonlyArray<ResolvedLimit['windowMs']>): BanPolicy | null {
  if (!windows.every(window => typeof window === 'number')) return null
  return Object.freeze({ threshold: denials + 1, ladder: Object.freeze([Math.max(...windows)]), forgetMs: 0 })
}

/**
 * A ban as given (checked by checkBanOption; undefined: not given), or the base's; a number inherited from the
 * plugin bans for this budget's own window.
 */
export function resolveBan (
  given: number | BanPolicy | null | undefined, base: ResolvedRoute, limits: readonly ResolvedLimit[]
): Pick<ResolvedRoute, 'ban' | 'banDenials'> {
  const windows = limits.map(limit => limit.windowMs)
  if (typeof given === 'number') return { ban: banPerWindow(given, windows), banDenials: given }
  if (given !== undefined) return { ban: given, banDenials: null }
  const { banDenials } = base
  return { ban: banDenials === null ? base.ban : banPerWindow(banDenials, windows), banDenials }
}
