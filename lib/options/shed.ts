import { checkFunction, checkKeys, checkOneOf, fail } from './checks.js'
import { toMilliseconds } from '../duration.js'
import type { FastifyRequest } from 'fastify'
import type { Priority } from '../shed-types.js'

// `shed`: the process-level load shedder as an option (lib/shed/), checked once at register. `true` takes the
// defaults, `false` (the default) none; an object says which signals are read, with their thresholds.

export const PRIORITIES: readonly Priority[] = ['exempt', 'critical', 'normal', 'sheddable']

/** The in-flight capacity adapted to latency (lib/shed/adaptive.ts). */
export interface ResolvedAdaptive {
  readonly floor: number
  readonly ceiling: number
  readonly tolerance: number
  readonly probeMs: number
}

export interface ResolvedShed {
  /** Each signal's threshold, null where it is not read. */
  readonly eventLoopDelayMs: number | null
  readonly eventLoopUtilization: number | null
  readonly redisTimeMs: number | null
  readonly pressure: (() => boolean) | null
  /** A fixed capacity, an adapted one, or none. */
  readonly inFlight: number | ResolvedAdaptive | null
  readonly reserve: number
  readonly classify: ((request: FastifyRequest) => unknown) | null
  readonly sampleMs: number
  readonly recoveryMs: number
  /** Whole seconds. */
  readonly retryAfter: number
  /** Undefined: the plugin's `mode` decides. */
  readonly mode: 'enforce' | 'shadow' | undefined
}

const NAMES = new Set([
  'eventLoopDelay', 'eventLoopUtilization', 'redisTime', 'pressure', 'inFlight', 'reserve', 'classify', 'sampleInterval', 'recovery',
  'retryAfter', 'mode'
])
const ADAPTIVE_NAMES = new Set(['floor', 'ceiling', 'tolerance', 'probeInterval'])

/** The defaults, as an app would write them. */
export const SHED_DEFAULTS = Object.freeze({
  eventLoopDelay: 20,
  eventLoopUtilization: 0.7,
  reserve: 0.2,
  sampleInterval: 100,
  recovery: 5000,
  retryAfter: 1000,
  floor: 2,
  ceiling: 1000,
  tolerance: 1.1,
  probeInterval: 30_000
})

export function checkShed (value: unknown, name: string): ResolvedShed | null {
  if (value === false) return null
  if (value === true) return checkShed({}, name)
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(name, value, 'false, true (the defaults), or an object such as { eventLoopUtilization: 0.7, inFlight: 100 }')
  }
  checkKeys(value, NAMES, `${name}.`)
  const given = value as Record<string, unknown>
  const at = (option: string): string => `${name}.${option}`
  return Object.freeze({
    eventLoopDelayMs: optional(given.eventLoopDelay, SHED_DEFAULTS.eventLoopDelay, v => between(v, at('eventLoopDelay'), 1, 60_000)),
    eventLoopUtilization: optional(given.eventLoopUtilization, SHED_DEFAULTS.eventLoopUtilization,
      v => share(v, at('eventLoopUtilization'), 0.01, 1)),
    redisTimeMs: optional(given.redisTime, false, v => between(v, at('redisTime'), 1, 60_000)),
    pressure: given.pressure === undefined ? null : checkFunction<() => boolean>(given.pressure, at('pressure')),
    inFlight: inFlightOf(given.inFlight, at('inFlight')),
    reserve: share(given.reserve ?? SHED_DEFAULTS.reserve, at('reserve'), 0, 0.9),
    classify: given.classify === undefined ? null : checkFunction<(request: FastifyRequest) => unknown>(given.classify, at('classify')),
    sampleMs: between(given.sampleInterval ?? SHED_DEFAULTS.sampleInterval, at('sampleInterval'), 10, 10_000),
    recoveryMs: between(given.recovery ?? SHED_DEFAULTS.recovery, at('recovery'), 1, 600_000),
    retryAfter: Math.ceil(between(given.retryAfter ?? SHED_DEFAULTS.retryAfter, at('retryAfter'), 1, 86_400_000) / 1000),
    mode: given.mode === undefined ? undefined : checkOneOf(given.mode, at('mode'), ['enforce', 'shadow'] as const)
  })
}

/** A signal's threshold: its default when not given, null when false. */
function optional (value: unknown, fallback: number | false, check: (value: unknown) => number): number | null {
  const given = value === undefined ? fallback : value
  return given === false ? null : check(given)
}

/** Milliseconds (a number or a duration such as '50 ms') from `least` to `most`. */
function between (value: unknown, name: string, least: number, most: number): number {
  const ms = toMilliseconds(value)
  if (ms === undefined || ms < least || ms > most) {
    fail(name, value, `a duration from ${least} ms to ${most} ms, such as '${least * 10} ms'`)
  }
  return ms
}

/** A number from `least` to `most`. */
function share (value: unknown, name: string, least: number, most: number): number {
  if (typeof value !== 'number' || !(value >= least && value <= most)) fail(name, value, `a number from ${least} to ${most}`)
  return value
}

/** A whole number from `least` to `most`. */
function whole (value: unknown, name: string, least: number, most: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < least || value > most) {
    fail(name, value, `an integer from ${least} to ${most}`)
  }
  return value
}

const MOST_IN_FLIGHT = 1_000_000

function inFlightOf (value: unknown, name: string): number | ResolvedAdaptive | null {
  if (value === undefined || value === false) return null
  if (typeof value === 'number') return whole(value, name, 1, MOST_IN_FLIGHT)
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(name, value, 'false, a number of requests, or { floor, ceiling } to adapt it to latency')
  }
  checkKeys(value, ADAPTIVE_NAMES, `${name}.`)
  const given = value as Record<string, unknown>
  const floor = whole(given.floor ?? SHED_DEFAULTS.floor, `${name}.floor`, 1, MOST_IN_FLIGHT)
  const ceiling = whole(given.ceiling ?? Math.max(floor, SHED_DEFAULTS.ceiling), `${name}.ceiling`, floor, MOST_IN_FLIGHT)
  return Object.freeze({
    floor,
    ceiling,
    tolerance: share(given.tolerance ?? SHED_DEFAULTS.tolerance, `${name}.tolerance`, 1, 10),
    probeMs: between(given.probeInterval ?? SHED_DEFAULTS.probeInterval, `${name}.probeInterval`, 1000, 3_600_000)
  })
}
