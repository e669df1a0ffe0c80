import { quotasAt, quotasOverridden } from '../algorithms/index.js'
import type { Limit, Quota } from '../algorithms/index.js'

// An override (`setOverride`) as the stores keep it, in the identity's override key, and read it: the limits
// it gives the budget's algorithm, `'max window burst;...'` (replacing all the budget's), then a calendar quota's
// max for each quota it names, `'<max> q<j>'` (quota j of the budget's). lua/decide.lua's `parse` and
// `overridden` read it in Redis; these, in process.

/** Limits as the scripts take them (ARGV and the override key): `'max window burst;...'`. */
export function encodeLimits (limits: readonly Limit[]): string {
  return limits.map(({ max, windowMs, burst }) => `${max} ${windowMs} ${burst}`).join(';')
}

/** A calendar quota's max in an override: quota `j` (from 1) of the budget's counts to `max`. */
export function encodeQuota (max: number, j: number): string {
  return `${max} q${j}`
}

/** The twin of the scripts' `parse`: the limits an override gives the algorithm. */
export function parseLimits (text: string): Limit[] {
  return [...text.matchAll(/(\d+) (\d+) (\d+)/g)]
    .map(([, max, windowMs, burst]) => ({ max: Number(max), windowMs: Number(windowMs), burst: Number(burst) }))
}

/**
 * A budget's limits at `now` under its `override` (the override key's text), as lua/decide.lua's `overridden`:
 * the algorithm's (the override's when it names any), and the calendar quotas (the last of `given`), with the
 * maxes it names; undefined when it names no limit.
 */
export function limitsUnder (
  override: string | undefined, given: readonly Limit[], now: number
): { stepLimits: readonly Limit[], quotas: readonly Quota[] } | undefined {
  const quotas = quotasAt(given, now)
  const stepLimits = quotas.length === 0 ? given : given.slice(0, given.length - quotas.length)
  if (override === undefined) return { stepLimits, quotas }
  const named = parseLimits(override)
  const changed = quotasOverridden(override, quotas)
  if (named.length === 0 && changed === quotas) return undefined
  return { stepLimits: named.length > 0 ? named : stepLimits, quotas: changed }
}
