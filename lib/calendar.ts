// Calendar periods: the day, week (Monday to Sunday, as ISO 8601 counts) or month that holds an instant in an
// IANA time zone, as the instants it starts and ends. A period starts at the first instant whose date there
// is its first day: midnight, or, where a clock change skips midnight (America/Santiago in September), the
// first instant after the jump; a day a zone skipped altogether (Pacific/Apia's 30 December 2011) is in no
// period; were a clock change to bring the day before back (Asia/Beirut turns its midnight into 23:00, which
// does not), at one of the day's starts, the same on every instance. Each period ends where the next starts. So
// a day lasts 23 or 25 hours across a daylight saving change, and a month as long as it is.
//
// What calendar quotas count in (`per` and `timeZone` on a limit, lib/request/computed.ts's `calendarLimit`).
// The decision is made on Redis's clock, which has no time zones: the app works out the periods and sends
// their instants, and `Calendar` keeps the one before, the current and the next one per zone, so only a
// request that finds its period over works them out again.

/** A calendar period a limit can count in. */
export type Per = 'day' | 'week' | 'month'

export const PERS: readonly Per[] = Object.freeze(['day', 'week', 'month'])

/** A period: from `start` (in it) to `end` (the next one's start), in ms since the epoch. */
export interface Period {
  readonly start: number
  readonly end: number
}

const DAY = 86_400_000
// How far a zone's date can be from UTC's, with room: offsets run from -12 h to +14 h today, and local mean
// times before standard time went up to about ±16 h.
const REACH = 2 * DAY

const FORMATS = new Map<string, Intl.DateTimeFormat>()

/** The formatter of `timeZone`'s dates, made once per zone (a RangeError for a zone Intl does not know). */
function format (timeZone: string): Intl.DateTimeFormat {
  let made = FORMATS.get(timeZone)
  if (made === undefined) {
    made = new Intl.DateTimeFormat('en-US', { timeZone, year: 'numeric', month: 'numeric', day: 'numeric', era: 'short' })
    FORMATS.set(timeZone, made)
  }
  return made
}

/** Whether `timeZone` is a time zone this Node knows: an IANA name (`'Asia/Kathmandu'`), or `'UTC'`. */
export function isTimeZone (timeZone: unknown): timeZone is string {
  if (typeof timeZone !== 'string' || timeZone === '') return false
  try {
    format(timeZone)
    return true
  } catch {
    return false
  }
}

/** The date in `timeZone` at the instant `at`, as days since 1970-01-01 (the day's number, UTC's calendar). */
function dayAt (timeZone: string, at: number): number {
  let year = 0
  let month = 0
  let day = 0
  let bc = false
  for (const { type, value } of format(timeZone).formatToParts(at)) {
    if (type === 'year') year = Number(value)
    else if (type === 'month') month = Number(value)
    else if (type === 'day') day = Number(value)
    else if (type === 'era') bc = value === 'BC'
  }
  return dayNumber(bc ? 1 - year : year, month, day)
}

/** Days since 1970-01-01 of a date (proleptic Gregorian; `month` from 1, and past 12 or `day` past the month's end roll over). */
function dayNumber (year: number, month: number, day: number): number {
  const date = new Date(0)
  date.setUTCFullYear(year, month - 1, day)
  return Math.round(date.getTime() / DAY)
}

/** The first instant whose date in `timeZone` is day `n` or later (days since 1970-01-01). */
function startOfDay (timeZone: string, n: number): number {
  // The date only moves forward with time within reach of the day: search between an instant before it and one in it or after.
  let before = n * DAY - REACH
  let after = n * DAY + REACH
  while (after - before > 1) {
    const middle = Math.floor((before + after) / 2)
    if (dayAt(timeZone, middle) >= n) after = middle
    else before = middle
  }
  return after
}

/** The period of `per` in `timeZone` that holds the instant `at` (ms). */
export function periodOf (per: Per, timeZone: string, at: number): Period {
  const today = dayAt(timeZone, at)
  let first: number
  let next: number
  if (per === 'day') {
    first = today
    next = today + 1
  } else if (per === 'week') {
    // 1970-01-01 was a Thursday, 3 days after a Monday.
    first = today - (((today + 3) % 7) + 7) % 7
    next = first + 7
  } else {
    const date = new Date(today * DAY)
    first = dayNumber(date.getUTCFullYear(), date.getUTCMonth() + 1, 1)
    next = dayNumber(date.getUTCFullYear(), date.getUTCMonth() + 2, 1)
  }
  return Object.freeze({ start: startOfDay(timeZone, first), end: startOfDay(timeZone, next) })
}

/**
 * One limit's periods (`per` in `timeZone`), kept: `around(at)` gives the period that holds `at`, the one before
 * it and the one after it, worked out again only when `at` is past or before them. The store chooses among the
 * three on its own clock (lua/quota.lua), so an app whose clock is off by less than a period still names the
 * period the store is in.
 */
/** The periods around an instant: the one that holds it, the one before and the one after. */
export interface Around {
  readonly previous: Period
  readonly current: Period
  readonly next: Period
}

export class Calendar {
  readonly per: Per
  readonly timeZone: string
  #around: Around | undefined

  constructor (per: Per, timeZone: string) {
    this.per = per
    this.timeZone = timeZone
  }

  around (at: number): Around {
    const kept = this.#around
    if (kept === undefined || at < kept.current.start || at >= kept.next.end) {
      const current = periodOf(this.per, this.timeZone, at)
      const previous = periodOf(this.per, this.timeZone, current.start - 1)
      this.#around = Object.freeze({ previous, current, next: periodOf(this.per, this.timeZone, current.end) })
    } else if (at >= kept.current.end) {
      const next = periodOf(this.per, this.timeZone, kept.next.end)
      this.#around = Object.freeze({ previous: kept.current, current: kept.next, next })
    }
    return this.#around!
  }
}
