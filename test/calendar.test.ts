// Calendar periods (lib/calendar.ts) in the zones whose rules catch the simple ways of doing it: an offset of
// 5 h 45 min (Asia/Kathmandu), daylight saving at 2:00 (America/New_York: days of 23 and 25 hours), at
// midnight (America/Santiago: the day starts at 01:00), a day skipped (Pacific/Apia, 30 December 2011), half
// an hour of it (Australia/Lord_Howe); weeks from Monday, months of every length, across a year's end. And, for
// every zone Node knows, instants all through a year: each period starts on its first day there, the instant
// before it is on the day before, and periods meet.
import t from 'tap'
import { Calendar, PERS, isTimeZone, periodOf } from '../lib/calendar.js'
import type { Per } from '../lib/calendar.js'
import { FULL } from './helpers/thorough.js'

const at = (iso: string): number => Date.parse(iso)
const iso = (ms: number): string => new Date(ms).toISOString()
const HOUR = 3_600_000

/** The date and time at `ms` in `timeZone`, as `2026-11-27 15:45`. */
function local (timeZone: string, ms: number): string {
  const parts = Object.fromEntries(new Intl.DateTimeFormat('en-US', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' })
    .formatToParts(ms).map(({ type, value }) => [type, value]))
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}`
}

function period (per: Per, timeZone: string, when: string): [string, string] {
  const { start, end } = periodOf(per, timeZone, at(when))
  return [iso(start), iso(end)]
}

t.test('a day in Kathmandu (UTC+5:45) and a month in New York (daylight saving ends on its 1st)', async t => {
  t.strictSame(period('day', 'Asia/Kathmandu', '2026-11-27T10:00:00Z'), ['2026-11-26T18:15:00.000Z', '2026-11-27T18:15:00.000Z'])
  t.strictSame(period('day', 'Asia/Kathmandu', '2026-11-27T18:15:00Z'), ['2026-11-27T18:15:00.000Z', '2026-11-28T18:15:00.000Z'], 'midnight there starts the next day')
  t.strictSame(period('month', 'America/New_York', '2026-11-27T12:00:00Z'), ['2026-11-01T04:00:00.000Z', '2026-12-01T05:00:00.000Z'], 'from midnight EDT to midnight EST')
  t.strictSame(period('month', 'America/New_York', '2026-12-01T04:59:59.999Z'), ['2026-11-01T04:00:00.000Z', '2026-12-01T05:00:00.000Z'], 'still November there')
  t.strictSame(period('month', 'UTC', '2028-02-29T23:59:59.999Z'), ['2028-02-01T00:00:00.000Z', '2028-03-01T00:00:00.000Z'], 'a leap February')
  t.strictSame(period('month', 'UTC', '2026-12-31T12:00:00Z'), ['2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'], 'December, to the next year')
})

t.test('days of 23 and 25 hours, a day that starts at 01:00, a day skipped, half an hour of daylight saving', async t => {
  const length = (per: Per, timeZone: string, when: string): number => { const { start, end } = periodOf(per, timeZone, at(when)); return (end - start) / HOUR }
  t.equal(length('day', 'America/New_York', '2026-03-08T12:00:00Z'), 23, 'spring forward')
  t.equal(length('day', 'America/New_York', '2026-11-01T12:00:00Z'), 25, 'fall back')
  t.strictSame(period('day', 'America/Santiago', '2026-09-06T12:00:00Z'), ['2026-09-06T04:00:00.000Z', '2026-09-07T03:00:00.000Z'], 'Chile skips from 00:00 to 01:00')
  t.equal(local('America/Santiago', at('2026-09-06T04:00:00Z')), '2026-09-06 01:00')
  t.strictSame(period('day', 'Pacific/Apia', '2011-12-29T12:00:00Z'), ['2011-12-29T10:00:00.000Z', '2011-12-30T10:00:00.000Z'], 'Samoa\'s 29 December 2011 ran into its 31st: 30 December was skipped')
  t.equal(local('Pacific/Apia', at('2011-12-30T10:00:00Z')), '2011-12-31 00:00')
  t.equal(length('day', 'Australia/Lord_Howe', '2026-10-04T06:00:00Z'), 23.5, 'Lord Howe Island moves its clocks by half an hour')
})

t.test('weeks run from Monday', async t => {
  // Friday 27 November 2026.
  t.strictSame(period('week', 'UTC', '2026-11-27T12:00:00Z'), ['2026-11-23T00:00:00.000Z', '2026-11-30T00:00:00.000Z'])
  t.strictSame(period('week', 'UTC', '2026-11-23T00:00:00Z'), ['2026-11-23T00:00:00.000Z', '2026-11-30T00:00:00.000Z'], 'Monday 00:00 is its first instant')
  t.strictSame(period('week', 'UTC', '2026-11-22T23:59:59.999Z'), ['2026-11-16T00:00:00.000Z', '2026-11-23T00:00:00.000Z'], 'Sunday is its last day')
  t.strictSame(period('week', 'Asia/Kathmandu', '2026-12-31T20:00:00Z'), ['2026-12-27T18:15:00.000Z', '2027-01-03T18:15:00.000Z'], 'across the year\'s end, Friday 1 January 2027 there')
  t.strictSame(period('week', 'UTC', '1969-12-31T12:00:00Z'), ['1969-12-29T00:00:00.000Z', '1970-01-05T00:00:00.000Z'], 'before 1970')
  t.strictSame(period('month', 'UTC', '-000100-03-15T00:00:00Z'), ['-000100-03-01T00:00:00.000Z', '-000100-04-01T00:00:00.000Z'], 'before the common era (101 BC, year -100)')
})

/** Instants a zone: 4 in `npm test`, 52 under FULL=1 (test/helpers/thorough.ts). */
const INSTANTS = FULL ? 52 : 4

t.test('every zone, every period, through a year: starts on its first day, the instant before on the day before, periods meet', async t => {
  const zones = Intl.supportedValuesOf('timeZone')
  t.ok(zones.length > 300, `${zones.length} zones`)
  const dateOf = (timeZone: string, ms: number): string => local(timeZone, ms).slice(0, 10)
  let checked = 0
  for (const [z, timeZone] of zones.entries()) {
    // A few instants a zone, spread over 2026 and different for each zone; under FULL=1, one a week.
    for (let i = 0; i < INSTANTS; i++) {
      const when = at('2026-01-01T00:00:00Z') + ((z * 7919 + i * 104_729) % 365) * 86_400_000 + ((z * 31 + i * 17) % 24) * HOUR
      for (const per of PERS) {
        const { start, end } = periodOf(per, timeZone, when)
        const first = dateOf(timeZone, start)
        const ok = start <= when && when < end &&
          dateOf(timeZone, start - 1) < first && dateOf(timeZone, end - 1) < dateOf(timeZone, end) &&
          periodOf(per, timeZone, end).start === end &&
          (per !== 'month' || first.endsWith('-01') || dateOf(timeZone, start - 1).slice(0, 7) < first.slice(0, 7)) &&
          (per !== 'week' || new Date(`${first}T00:00:00Z`).getUTCDay() === 1 || dateOf(timeZone, start - 1) < first)
        if (!ok) t.fail(`${timeZone} ${per} at ${iso(when)}: ${iso(start)} (${local(timeZone, start)}) to ${iso(end)} (${local(timeZone, end)})`)
        checked++
      }
    }
  }
  t.pass(`${checked} periods checked`)
})

t.test('a Calendar keeps the period before, the current one and the next, and works them out again only when one is over', async t => {
  const calendar = new Calendar('day', 'Asia/Kathmandu')
  const first = calendar.around(at('2026-11-27T10:00:00Z'))
  t.strictSame([iso(first.previous.start), iso(first.previous.end)], ['2026-11-25T18:15:00.000Z', '2026-11-26T18:15:00.000Z'], 'the day before')
  t.strictSame([iso(first.current.start), iso(first.next.start), iso(first.next.end)], ['2026-11-26T18:15:00.000Z', '2026-11-27T18:15:00.000Z', '2026-11-28T18:15:00.000Z'])
  t.equal(calendar.around(at('2026-11-27T18:14:59.999Z')).current, first.current, 'the same period, kept')
  const later = calendar.around(at('2026-11-27T18:15:00Z'))
  t.equal(later.current, first.next, 'the next period is now the current one')
  t.equal(later.previous, first.current, 'and the current one the one before')
  t.equal(iso(later.next.end), '2026-11-29T18:15:00.000Z')
  t.equal(iso(calendar.around(at('2026-11-20T00:00:00Z')).current.start), '2026-11-19T18:15:00.000Z', 'an instant before them: worked out again')
  t.equal(iso(calendar.around(at('2027-02-01T00:00:00Z')).current.start), '2027-01-31T18:15:00.000Z', 'an instant past both: worked out again')
})

t.test('time zones: IANA names and UTC are, anything else is not', async t => {
  for (const zone of ['UTC', 'Asia/Kathmandu', 'America/New_York', 'Etc/GMT+5']) t.ok(isTimeZone(zone), zone)
  for (const zone of ['Mars/Olympus_Mons', '', 'utc+1', 42, null, undefined]) t.notOk(isTimeZone(zone), String(zone))
})
