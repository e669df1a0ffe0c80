import { MAX_DEADLINE } from '../deadline.js'
import { toMilliseconds } from '../duration.js'
import { InvalidOptionError } from '../errors.js'
import { unknownName } from './suggestions.js'

// The checks every option goes through: each returns the value, typed, or throws the coded error naming the
// option and the value. The checks of one kind of option are their files' (limits.ts, bans.ts, headers.ts,
// identity.ts, stores.ts); the table (table.ts) names each option's.

/** Renders a bad value for an error message without dumping whole objects or functions. */
export function show (value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? value.slice(0, 64) + '…' : value)
  if (typeof value === 'object' && value !== null) return Array.isArray(value) ? 'an array' : 'an object'
  return String(value)
}

export function fail (name: string, value: unknown, expected: string): never {
  throw new InvalidOptionError(name, `expected ${expected}, got ${show(value)}`)
}

/** A positive safe integer (or 0 with `least` 0), or the coded error naming the option and the value. */
export function checkMax (value: unknown, name = 'max', least: 0 | 1 = 1): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < least) {
    fail(name, value, least === 0 ? 'an integer, 0 (every request refused) or more' : 'a positive integer')
  }
  return value
}

/** Milliseconds a timer waits: an integer from 1 to `MAX_DEADLINE` (Node fires a timer of more than 2^31 - 1 ms at once). */
export function checkDeadline (value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > MAX_DEADLINE) {
    fail(name, value, `an integer number of milliseconds from 1 to ${MAX_DEADLINE}`)
  }
  return value
}

/** Integer milliseconds from a number or a human string, or the coded error. */
export function checkDuration (value: unknown, name: string): number {
  const ms = toMilliseconds(value)
  if (ms === undefined) fail(name, value, "a positive number of milliseconds or a duration such as '1 minute'")
  return ms
}

export function checkFunction<T> (value: unknown, name: string): T {
  if (typeof value !== 'function') fail(name, value, 'a function')
  return value as T
}

export function checkBoolean (value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') fail(name, value, 'true or false')
  return value
}

export function checkOneOf<T extends string> (value: unknown, name: string, allowed: readonly T[]): T {
  if (!allowed.includes(value as T)) fail(name, value, `one of ${allowed.map(a => `'${a}'`).join(', ')}`)
  return value as T
}

/**
 * Every name of `input` among `allowed`, or the coded error naming the first that is not (`where`: how names are
 * prefixed), with what `unknown` says of it: by default the nearest allowed name, if one is near.
 */
export function checkKeys (
  input: object, allowed: ReadonlySet<string>, where: string, unknown = (name: string) => unknownName(name, allowed)
): void {
  for (const key of Object.keys(input)) {
    if (!allowed.has(key)) throw new InvalidOptionError(`${where}${key}`, unknown(key))
  }
}

/** `shadow: { ban }`: whether shadow denials strike toward bans. */
export function checkShadow (value: unknown, name: string): { readonly ban: boolean } {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, '{ ban: true } or { ban: false }')
  checkKeys(value, new Set(['ban']), `${name}.`)
  return Object.freeze({ ban: checkBoolean((value as { ban?: unknown }).ban, `${name}.ban`) })
}
