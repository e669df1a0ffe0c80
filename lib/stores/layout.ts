// The keys and arguments of the scripts' calls, named once, in the order they are sent: each call is built from
// these lists (`scriptArgs`, `leanArgs`), and lib/stores/scripts.ts fills in the line of lua/decide.lua and
// lua/lean.lua that declares where each one sits (`withLayout`), so a script and its caller cannot drift.
import type { Limit, CalendarPeriods } from '../algorithms/index.js'
import type { BanPolicy } from '../types.js'
import { indexOf } from './ban-index.js'
import type { IdentityKeys } from './key-names.js'
import type { DecideInput, SettleInput, WaitPolicy } from './store.js'

/**
 * Fields sent one after another, by name in their order. A field's offset is its place counted from `from`: a
 * request's keys from KEYS[k + 1] (k: the last key of the requests before it), a policy's arguments from ARGV[s].
 */
export interface Fields<N extends string = string> {
  readonly names: readonly N[]
  readonly from: number
}

const fields = <const N extends string>(from: number, ...names: N[]): Fields<N> => Object.freeze({ names: Object.freeze(names), from })

/** A script's records by the name its Lua gives their offsets (`KEY`: `KEYS[k + KEY_STATE]`). */
export type Layout = Readonly<Record<string, Fields>>

/** The keys every request sends first, from KEYS[k + 1]: its state, its identity's ban and override. */
const KEY = fields(1, 'state', 'banned', 'override')
/** Then, from KEYS[k + 4], those of a denial's strike: its identity's strikes and offences, and the ban index. */
const BAN_KEY = fields(4, 'strikes', 'offences', 'index')

/**
 * lua/decide.lua's call (its header says what each field is). A request's keys: `KEY`, `BAN_KEY` when it is
 * decided under a ban policy, then one more each, in this order, when sent: its over-limit key, under an
 * overLimit (decided or peeked); its calendar quotas' key (decided, peeked or settled). The arguments: `HEAD`,
 * each policy (`POLICY`, then its limits, `LIMIT` each), then each request's `REQUEST` (`SETTLE` to settle).
 */
export const DECIDE_LAYOUT = Object.freeze({
  KEY,
  BAN_KEY,
  HEAD: fields(1, 'mode', 'base', 'requests', 'policies'),
  POLICY: fields(0, 'threshold', 'ladder', 'forget', 'over', 'wait', 'queue', 'limits'),
  LIMIT: fields(0, 'max', 'window', 'burst'),
  REQUEST: fields(0, 'policy'),
  SETTLE: fields(0, 'policy', 'member', 'at', 'final')
}) satisfies Layout

/**
 * lua/lean.lua's call: each request's `KEY`, and `BAN_KEY` under a ban policy; `HEAD`, each policy (`POLICY`),
 * then, when there are several, each request's policy.
 */
export const LEAN_LAYOUT = Object.freeze({
  KEY,
  BAN_KEY,
  HEAD: fields(1, 'base', 'requests', 'policies'),
  POLICY: fields(0, 'max', 'window', 'burst', 'threshold', 'ladder', 'forget')
}) satisfies Layout

/**
 * lua/lease.lua's call (lib/stores/redis-leases.ts builds it; test/layout.test.ts holds it to this): `KEY`, and
 * `BAN_KEY` to acquire under a ban policy; `HEAD`, then the mode's own: `ACQUIRE` (and its `BAN` under a ban
 * policy), `RELEASE`, or `RENEW` and each request's `HELD`.
 */
export const LEASE_LAYOUT = Object.freeze({
  KEY: fields(1, 'leases', 'banned'),
  BAN_KEY: fields(3, 'strikes', 'offences', 'index'),
  HEAD: fields(1, 'mode'),
  ACQUIRE: fields(2, 'id', 'units', 'max', 'lease'),
  BAN: fields(6, 'threshold', 'ladder', 'forget', 'window'),
  RELEASE: fields(2, 'id', 'units'),
  RENEW: fields(2, 'lease', 'requests'),
  HELD: fields(0, 'id', 'units')
}) satisfies Layout

/** `values` in the order of `fields`: what a call sends of one record. */
export function ordered<N extends string> ({ names }: Fields<N>, values: Readonly<Record<N, string | number>>): Array<string | number> {
  return names.map(name => values[name])
}

/**
 * The Lua that declares `layout`'s offsets, on one line: a local per field, `<RECORD>_<FIELD>`, and each record's
 * `SIZE` (how many it sends): `local KEY_STATE, ..., KEY_SIZE, HEAD_BASE, ... = 1, ..., 3, 1, ...`. Locals, not a
 * table per record: a table costs a script call more than the upvalues its functions take (about 0.2 µs a table
 * against 0.07 a function made, Redis 7.0).
 */
export function luaLayout (layout: Layout): string {
  const all = Object.entries(layout).flatMap(([record, { names, from }]) =>
    [...names.map((name, i) => [name.toUpperCase(), from + i] as const), ['SIZE', names.length] as const]
      .map(([name, offset]) => [`${record}_${name}`, offset] as const))
  return `local ${all.map(([name]) => name).join(', ')} = ${all.map(([, offset]) => offset).join(', ')}`
}

/** The layouts a lua/ file may declare, by the name its layout line gives. */
const LAYOUTS: Readonly<Record<string, Layout>> = Object.freeze({ DECIDE: DECIDE_LAYOUT, LEAN: LEAN_LAYOUT, LEASE: LEASE_LAYOUT })
/** The one line of a file that says which layout it reads: `-- layout: DECIDE ...`. */
const LAYOUT_LINE = /^-- layout: (\w+)\b[^\n]*$/gm

/**
 * `lua` with its line `-- layout: <NAME>` made the Lua that declares that layout's offsets (`luaLayout`), on the
 * same line, so errors still name their file's lines. Throws for a layout it does not know, or more than one line.
 */
export function withLayout (lua: string): string {
  const found = [...lua.matchAll(LAYOUT_LINE)]
  if (found.length > 1) throw new Error(`withLayout: more than one layout line (${found.length})`)
  return lua.replace(LAYOUT_LINE, (line, name: string) => {
    const layout = LAYOUTS[name]
    if (layout === undefined) throw new Error(`withLayout: no layout named ${name}: ${line}`)
    return luaLayout(layout)
  })
}

/** What a request over the limit does, as a policy sends it (`'none'`: the algorithm alone decides). */
type OverLimit = NonNullable<DecideInput['overLimit']> | 'none'

/**
 * The arguments of one script call deciding (or undoing) `requests`: the number of keys, the keys each
 * request can touch (three; three more when a denial counts a strike and may start a ban: the strikes, the
 * offences and the ban index `index` names for its banned key; one more, its over-limit key, when it is
 * decided or peeked under an `overLimit`), then the mode, the members' `base` (request i's member is
 * `base` + i, from 1), each distinct policy (ban, overLimit and limits) once, and each request's policy (with
 * its member, time and final cost, to settle). See the header of `lua/decide.lua`.
 */
export function scriptArgs (requests: ReadonlyArray<DecideInput | SettleInput>, mode: 'decide' | 'peek' | 'settle', base: string,
  index = (banned: string) => indexOf(banned, false)): Array<string | number> {
  const keys: Array<string | number> = []
  const policies: Array<string | number> = []
  const seen: Array<readonly [readonly Limit[], BanPolicy | null, OverLimit, WaitPolicy | undefined]> = []
  const each: Array<string | number> = []
  for (const input of requests) {
    const { keys: k, limits } = input
    const ban = 'ban' in input ? input.ban : null
    const over: OverLimit = 'ban' in input ? input.overLimit ?? 'none' : 'none'
    const wait = 'ban' in input ? input.wait : undefined
    keys.push(...keysOf(k, mode === 'decide' && ban !== null, index))
    if (mode !== 'settle' && over !== 'none') keys.push(k.backoff)
    // Calendar quotas come last (lib/request/limits.ts puts them there): their key, the request's last.
    if (limits.at(-1)?.period !== undefined) keys.push(k.quota)
    let policy = seen.findIndex(([l, b, o, w]) => l === limits && b === ban && o === over && w === wait)
    if (policy === -1) {
      policy = seen.push([limits, ban, over, wait]) - 1
      const { maxMs = 0, maxQueue = 0 } = wait ?? {}
      policies.push(...ordered(DECIDE_LAYOUT.POLICY, { ...banFields(ban), over, wait: maxMs, queue: maxQueue, limits: limits.length }))
      for (const { max, windowMs, burst, period } of limits) {
        policies.push(...ordered(DECIDE_LAYOUT.LIMIT, { max, window: period === undefined ? windowMs : quotaWindow(period), burst }))
      }
    }
    const cost = input.cost ?? 1
    const named = cost === 1 ? policy + 1 : `${policy + 1}*${cost}`
    each.push(...('at' in input
      ? ordered(DECIDE_LAYOUT.SETTLE, { policy: named, member: input.member, at: input.at, final: input.final })
      : ordered(DECIDE_LAYOUT.REQUEST, { policy: named })))
  }
  const head = ordered(DECIDE_LAYOUT.HEAD, { mode, base, requests: requests.length, policies: seen.length })
  return [keys.length, ...keys, ...head, ...policies, ...each]
}

/** A request's keys in the order of the layouts' `KEY` and, when a denial strikes, `BAN_KEY` (the same in both). */
function keysOf (k: IdentityKeys, strikes: boolean, index: (banned: string) => string): Array<string | number> {
  const own = ordered(DECIDE_LAYOUT.KEY, { state: k.log, banned: k.banned, override: k.override })
  return strikes ? [...own, ...ordered(DECIDE_LAYOUT.BAN_KEY, { strikes: k.strikes, offences: k.offences, index: index(k.banned) })] : own
}

/** A policy's ban, as both layouts' `POLICY` sends it (threshold 0: bans off). */
const banFields = (ban: BanPolicy | null): Record<'threshold' | 'ladder' | 'forget', string | number> =>
  ({ threshold: ban?.threshold ?? 0, ladder: ban?.ladder.join(' ') ?? '0', forget: ban?.forgetMs ?? 0 })

/** A calendar quota's window as lua/quota.lua reads it: its periods, `'c<previous>:<start>:<end>:<next>'`. */
export function quotaWindow ({ previous, start, end, next }: CalendarPeriods): string {
  return `c${previous}:${start}:${end}:${next}`
}

/**
 * The arguments of one call of the lean script deciding `requests` (each `isLean`): the number of keys, each
 * request's three (six under a ban policy), the members' `base`, each distinct policy once (limit and ban), and,
 * when there are several, each request's. See the header of `lua/lean.lua`.
 */
export function leanArgs (requests: readonly DecideInput[], base: string,
  index = (banned: string) => indexOf(banned, false)): Array<string | number> {
  const keys: Array<string | number> = []
  const policies: Array<string | number> = []
  const seen: Array<readonly [Limit, BanPolicy | null]> = []
  const each: number[] = []
  for (const { keys: k, limits: [limit], ban } of requests) {
    keys.push(...keysOf(k, ban !== null, index))
    let policy = seen.findIndex(([l, b]) => l === limit && b === ban)
    if (policy === -1) {
      policy = seen.push([limit!, ban]) - 1
      policies.push(...ordered(LEAN_LAYOUT.POLICY, { max: limit!.max, window: limit!.windowMs, burst: limit!.burst, ...banFields(ban) }))
    }
    each.push(policy + 1)
  }
  const head = ordered(LEAN_LAYOUT.HEAD, { base, requests: requests.length, policies: seen.length })
  return [keys.length, ...keys, ...head, ...policies, ...(seen.length > 1 ? each : [])]
}
