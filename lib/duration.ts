// Human durations: parsed once at register into integer milliseconds, formatted for messages.

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
 * The longest duration, 2^53 - 1024 ms (about 285,421 years): a window, a ban, a wait. Every duration a script
 * replies stays at most this: ioredis 6's RESP3 decoder reads an integer within 48 of 2^53 one off (it adds
 * the digit's byte before it takes away '0'), so a reply of 2^53 - 1 would come back as 2^53.
 */
export const LONGEST = 2 ** 53 - 1024

/** The longest a timer waits (Node fires one of more than 2^31 - 1 ms at once): the bound of a wait or a lease. */
export const LONGEST_TIMER_MS = 2 ** 31 - 1

/**
 * Milliseconds from a number of milliseconds or a string such as `'1 minute'`, `'10s'`, `'1.5h'`, `'500'`.
 * Returns undefined for anything that is not a positive, finite duration of at least one millisecond and at
 * most `LONGEST` (see `pastLongest`).
 */
export function toMilliseconds (value: unknown): number | undefined {
  const ms = parse(value)
  return ms !== undefined && Number.isInteger(ms) && ms >= 1 && ms <= LONGEST ? ms : undefined
}

/** Whether `value` reads as a finite duration longer than `LONGEST`. */
export function pastLongest (value: unknown): boolean {
  const ms = parse(value)
  return ms !== undefined && Number.isFinite(ms) && ms > LONGEST
}

function parse (value: unknown): number | undefined {
  if (typeof value === 'number') return value
  if (typeof value !== 'string' || value.length > 32) return undefined
  const match = PATTERN.exec(value.trim())
  if (match === null) return undefined
  const unit = match[2] === '' ? 1 : UNITS.get(match[2]!.toLowerCase())
  return unit === undefined ? undefined : Math.round(Number(match[1]) * unit)
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
