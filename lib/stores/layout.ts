// The keys and arguments of the scripts' calls, named once, in the order they are sent: lib/stores/scripts.ts
// builds each call from these lists (`ordered`), and fills in the line of lua/decide.lua and lua/lean.lua that
// declares where each one sits (`luaLayout`), so a script and its caller cannot drift.

/**
 * Fields sent one after another, by name in their order. A field's offset is its place counted from `from`: a
 * request's keys from KEYS[k + 1] (k: the last key of the requests before it), a policy's arguments from ARGV[s].
 */
export interface Fields<N extends string = string> {
  readonly names: readonly N[]
  readonly from: number
}

const fields = <const N extends string>(from: number, ...names: N[]): Fields<N> => Object.freeze({ names: Object.freeze(names), from })

/** A script's records by the name its Lua gives their offsets (`KEY`: `KEYS[k + KEY.STATE]`). */
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

/** `values` in the order of `fields`: what a call sends of one record. */
export function ordered<N extends string, V> ({ names }: Fields<N>, values: Readonly<Record<N, V>>): V[] {
  return names.map(name => values[name])
}

/** How the Lua declares a layout: a table per record (`KEY.STATE`), or a local per field (`KEY_STATE`: no table made). */
export type LuaForm = 'tables' | 'locals'

/**
 * The Lua that declares `layout`'s offsets, on one line: each record a table of its fields' offsets and its
 * `SIZE` (how many it sends), `local KEY, HEAD = { STATE = 1, ..., SIZE = 3 }, { ... }`; or, as `locals`, each
 * one a local of its own, `local KEY_STATE, ..., KEY_SIZE, HEAD_BASE, ... = 1, ..., 3, 1, ...`.
 */
export function luaLayout (layout: Layout, form: LuaForm): string {
  const records = Object.entries(layout).map(([record, { names, from }]) =>
    [record, [...names.map((name, i) => [name.toUpperCase(), from + i] as const), ['SIZE', names.length] as const]] as const)
  if (form === 'locals') {
    const all = records.flatMap(([record, offsets]) => offsets.map(([name, offset]) => [`${record}_${name}`, offset] as const))
    return `local ${all.map(([name]) => name).join(', ')} = ${all.map(([, offset]) => offset).join(', ')}`
  }
  const tables = records.map(([, offsets]) => `{ ${offsets.map(([name, offset]) => `${name} = ${offset}`).join(', ')} }`)
  return `local ${records.map(([record]) => record).join(', ')} = ${tables.join(', ')}`
}
