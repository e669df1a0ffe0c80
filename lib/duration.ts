/** Human durations: parsed once at register into integer milliseconds, formatted for messages. */

const SECOND = 1000
const MINUTE = 60 * SECOND
const HOUR = 60 * MINUTE
const DAY = 24 * HOUR
const WEEK = 7 * DAY
const YEAR = 365.25 * DAY

const UNIT_NAMES: Array<[number, string[]]> = [
  [1, ['ms', 'msec', 'msecs', 'millisecond', 'milliseconds']],
  [SECOND, ['s', 'sec', 'secs', 'second', 'seconds']],
  [MINUTE, ['m', 'min', 'mins', 'minute', 'minutes']],
  [HOUR, ['h', 'hr', 'hrs', 'hour', 'hours']],
  [DAY, ['d', 'day', 'days']],
  [WEEK, ['w', 'wk', 'wks', 'week', 'weeks']],
  [YEAR, ['y', 'yr', 'yrs', 'year', 'years']]
]
const UNITS = new Map(UNIT_NAMES.flatMap(([ms, names]) => names.map(name => [name, ms] as const)))

const PATTERN = /^(\d+(?:\.\d+)?|\.\d+) *([a-z]*)$/i

/**
 * Milliseconds from a number of milliseconds or a string such as `'1 minute'`, `'10s'`, `'1.5h'`, `'500'`.
 * Returns undefined for anything that is not a positive, finite duration of at least one millisecond.
 */
export function toMilliseconds (value: unknown): number | undefined {
  let ms: number
  if (typeof value === 'number') {
    ms = value
  } else if (typeof value === 'string' && value.length <= 32) {
    const match = PATTERN.exec(value.trim())
    if (match === null) return undefined
    const unit = match[2] === '' ? 1 : UNITS.get(match[2]!.toLowerCase())
    if (unit === undefined) return undefined
    ms = Math.round(Number(match[1]) * unit)
  } else {
    return undefined
  }
  return Number.isSafeInteger(ms) && ms >= 1 ? ms : undefined
}

const LONG: Array<[number, string]> = [[YEAR, 'year'], [DAY, 'day'], [HOUR, 'hour'], [MINUTE, 'minute'], [SECOND, 'second']]

/** `'7 seconds'`, `'1 minute'`, `'10 minutes'`: the long form `@lukeed/ms` and `@fastify/rate-limit` print. */
export function formatDuration (ms: number): string {
  for (const [unit, name] of LONG) {
    if (ms >= unit) {
      const n = Math.round(ms / unit)
      return `${n} ${name}${n === 1 ? '' : 's'}`
    }
  }
  return `${ms} ms`
}
