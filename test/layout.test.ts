// One argument layout for TypeScript and Lua (lib/stores/layout.ts): the calls scriptArgs and leanArgs build put
// each key and argument where the layout names it, and the scripts read them through the offsets the layout's
// `-- layout:` line declares, each name they use one the layout has. No Redis: what is sent, and the Lua's text.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { DECIDE_LAYOUT, LEAN_LAYOUT, LEASE_LAYOUT, luaLayout, ordered, withLayout } from '../lib/stores/layout.js'
import type { Fields, Layout } from '../lib/stores/layout.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { LEAN_SCRIPTS, LEASE_SCRIPT, SCRIPTS, leanArgs, scriptArgs } from '../lib/stores/scripts.js'
import { acquireArgs, releaseArgs, renewArgs } from '../lib/stores/redis-leases.js'
import type { DecideInput, Held, SettleInput } from '../lib/stores/store.js'

const lua = (name: string): string => readFileSync(new URL(`../lua/${name}.lua`, import.meta.url), 'utf8')

/** Where `name` of `fields` is in a call's list that holds the record at `start`: its offset from `start`'s base. */
const at = <N extends string>(fields: Fields<N>, start: number, name: N): number => start + fields.names.indexOf(name) + fields.from

t.test('ordered sends a record\'s values in the layout\'s order', async t => {
  t.strictSame(ordered(DECIDE_LAYOUT.LIMIT, { burst: 3, max: 1, window: 2 }), [1, 2, 3])
  t.strictSame(ordered(LEAN_LAYOUT.HEAD, { policies: 'p', requests: 'r', base: 'b' }), ['b', 'r', 'p'])
})

t.test('luaLayout declares each record\'s offsets and size as locals', async t => {
  const layout: Layout = { KEY: { names: ['state', 'banned'], from: 1 }, POLICY: { names: ['max'], from: 0 } }
  t.equal(luaLayout(layout), 'local KEY_STATE, KEY_BANNED, KEY_SIZE, POLICY_MAX, POLICY_SIZE = 1, 2, 2, 0, 1')
})

t.test('withLayout fills the one layout line a file has, on its line, and refuses what it cannot fill', async t => {
  t.equal(withLayout('-- a\n-- layout: LEAN (note)\nlocal x'), `-- a\n${luaLayout(LEAN_LAYOUT)}\nlocal x`)
  t.equal(withLayout('-- no layout here\n'), '-- no layout here\n', 'a file without one is left as it is')
  t.throws(() => withLayout('-- layout: ELSEWHERE\n'), /no layout named ELSEWHERE/)
  t.throws(() => withLayout('-- layout: LEAN\n-- layout: DECIDE\n'), /more than one layout line \(2\)/)
  for (const [name, layout] of [['decide', DECIDE_LAYOUT], ['lean', LEAN_LAYOUT], ['lease', LEASE_LAYOUT]] as const) {
    const file = lua(name)
    t.equal(file.match(/^-- layout: /gm)?.length, 1, `lua/${name}.lua has one layout line`)
    t.equal(withLayout(file).split('\n').length, file.split('\n').length, `lua/${name}.lua keeps its line count`)
    t.ok(Object.keys(layout).length > 0)
  }
  t.ok(SCRIPTS['sliding-log'].lua.includes(luaLayout(DECIDE_LAYOUT)), 'the general script declares decide\'s layout')
  t.ok(LEAN_SCRIPTS['sliding-log']!.lua.includes(luaLayout(LEAN_LAYOUT)), 'the lean script declares its own')
  t.ok(LEASE_SCRIPT.lua.includes(luaLayout(LEASE_LAYOUT)), 'so does the lease script')
})

t.test('every offset the scripts read is one the layout declares', async t => {
  const names = (layout: Layout, join: string): Set<string> => new Set(Object.entries(layout).flatMap(([record, { names }]) =>
    [...names, 'size'].map(name => `${record}${join}${name.toUpperCase()}`)))
  const code = (name: string): string => lua(name).replace(/--[^\n]*/g, '')
  const decide = names(DECIDE_LAYOUT, '_')
  const used = [...code('decide').matchAll(/\b(KEY|BAN_KEY|HEAD|POLICY|LIMIT|REQUEST|SETTLE)_[A-Z]+\b/g)].map(([name]) => name)
  t.ok(used.length > 20, `decide.lua reads ${used.length} offsets by name`)
  t.strictSame(used.filter(name => !decide.has(name)), [], 'each of decide.lua\'s is DECIDE_LAYOUT\'s')
  const lean = names(LEAN_LAYOUT, '_')
  const leanUsed = [...code('lean').matchAll(/\b(KEY|BAN_KEY|HEAD|POLICY)_[A-Z]+\b/g)].map(([name]) => name)
  t.ok(leanUsed.length > 15, `lean.lua reads ${leanUsed.length} offsets by name`)
  t.strictSame(leanUsed.filter(name => !lean.has(name)), [], 'each of lean.lua\'s is LEAN_LAYOUT\'s')
  const lease = names(LEASE_LAYOUT, '_')
  const leaseUsed = [...code('lease').matchAll(/\b(KEY|BAN_KEY|HEAD|ACQUIRE|BAN|RELEASE|RENEW|HELD)_[A-Z]+\b/g)].map(([name]) => name)
  t.ok(leaseUsed.length > 15, `lease.lua reads ${leaseUsed.length} offsets by name`)
  t.strictSame(leaseUsed.filter(name => !lease.has(name)), [], 'each of lease.lua\'s is LEASE_LAYOUT\'s')
  for (const name of ['decide', 'lean', 'lease']) {
    t.notMatch(code(name), /(KEYS|ARGV)\[(\w+ \+ )?\d/, `lua/${name}.lua's body names each key's and argument's place: no bare offsets`)
  }
})

const keys = identityKeys('layout:', 'all', 'ip:192.0.2.1')
const ban = { threshold: 3, ladder: [1000, 2000], forgetMs: 500 }
const limits = [{ max: 5, windowMs: 60_000, burst: 5 }]

t.test('scriptArgs puts each key and argument where DECIDE_LAYOUT names it', async t => {
  const input: DecideInput = { keys, limits, ban, peek: false, overLimit: 'backoff', wait: { maxMs: 700, maxQueue: 4 }, cost: 2 }
  const args = scriptArgs([input], 'decide', 'b.', () => 'the index')
  const n = Number(args[0])
  const key = (fields: Fields, name: string): unknown => args[at(fields, 0, name)]
  t.equal(n, DECIDE_LAYOUT.KEY.names.length + DECIDE_LAYOUT.BAN_KEY.names.length + 1, 'its keys, its ban\'s, its over-limit key')
  t.equal(key(DECIDE_LAYOUT.KEY, 'state'), keys.log)
  t.equal(key(DECIDE_LAYOUT.KEY, 'override'), keys.override)
  t.equal(key(DECIDE_LAYOUT.BAN_KEY, 'index'), 'the index')
  t.equal(args[n], keys.backoff, 'the over-limit key after them')
  const argv = args.slice(n + 1)
  const arg = (fields: Fields, start: number, name: string): unknown => argv[at(fields, start, name) - 1]
  t.equal(arg(DECIDE_LAYOUT.HEAD, 0, 'mode'), 'decide')
  t.equal(arg(DECIDE_LAYOUT.HEAD, 0, 'policies'), 1)
  const s = DECIDE_LAYOUT.HEAD.names.length + 1
  t.equal(arg(DECIDE_LAYOUT.POLICY, s, 'ladder'), '1000 2000')
  t.equal(arg(DECIDE_LAYOUT.POLICY, s, 'over'), 'backoff')
  t.equal(arg(DECIDE_LAYOUT.POLICY, s, 'queue'), 4)
  const l = s + DECIDE_LAYOUT.POLICY.names.length
  t.equal(arg(DECIDE_LAYOUT.LIMIT, l, 'window'), 60_000)
  t.equal(arg(DECIDE_LAYOUT.REQUEST, l + DECIDE_LAYOUT.LIMIT.names.length, 'policy'), '1*2', 'its policy and cost')

  const settle: SettleInput = { keys, limits, algorithm: 'sliding-log', member: 'm7', at: 1234, final: 0 }
  const undo = scriptArgs([settle], 'settle', '')
  const m = Number(undo[0])
  t.equal(m, DECIDE_LAYOUT.KEY.names.length, 'a settlement sends its keys alone')
  const r = DECIDE_LAYOUT.HEAD.names.length + 1 + DECIDE_LAYOUT.POLICY.names.length + DECIDE_LAYOUT.LIMIT.names.length
  t.equal(undo[m + at(DECIDE_LAYOUT.SETTLE, r, 'member')], 'm7')
  t.equal(undo[m + at(DECIDE_LAYOUT.SETTLE, r, 'at')], 1234)
})

t.test('leanArgs puts each key and argument where LEAN_LAYOUT names it', async t => {
  const other = identityKeys('layout:', 'all', 'ip:192.0.2.2')
  const args = leanArgs([{ keys, limits, ban, peek: false }, { keys: other, limits, ban: null, peek: false }], 'b.', () => 'the index')
  const n = Number(args[0])
  const banning = LEAN_LAYOUT.KEY.names.length + LEAN_LAYOUT.BAN_KEY.names.length
  t.equal(n, banning + LEAN_LAYOUT.KEY.names.length)
  t.equal(args[at(LEAN_LAYOUT.BAN_KEY, 0, 'strikes')], keys.strikes)
  t.equal(args[at(LEAN_LAYOUT.KEY, banning, 'banned')], other.banned, 'the next request\'s keys after them')
  const argv = args.slice(n + 1)
  t.equal(argv[at(LEAN_LAYOUT.HEAD, 0, 'requests') - 1], 2)
  const s = LEAN_LAYOUT.HEAD.names.length + 1
  t.equal(argv[at(LEAN_LAYOUT.POLICY, s, 'threshold') - 1], 3)
  t.equal(argv[at(LEAN_LAYOUT.POLICY, s + LEAN_LAYOUT.POLICY.names.length, 'threshold') - 1], 0, 'the second policy bans nothing')
  t.strictSame(argv.slice(-2), [1, 2], 'then each request\'s policy')
})

t.test('the lease calls (lib/stores/redis-leases.ts) put each key and argument where LEASE_LAYOUT names it', async t => {
  const { KEY, BAN_KEY, HEAD, ACQUIRE, BAN, RELEASE, RENEW, HELD } = LEASE_LAYOUT
  const input = { keys, algorithm: 'sliding-log' as const, id: 'r1', units: 2, max: 5, leaseMs: 30_000, ban, strikeWindowMs: 9000 }
  const args = acquireArgs(input, () => 'the index')
  const n = Number(args[0])
  t.equal(n, KEY.names.length + BAN_KEY.names.length)
  t.equal(args[at(KEY, 0, 'leases')], keys.leases)
  t.equal(args[at(KEY, 0, 'banned')], keys.banned)
  t.equal(args[at(BAN_KEY, 0, 'offences')], keys.offences)
  t.equal(args[at(BAN_KEY, 0, 'index')], 'the index')
  const arg = (fields: Fields, name: string, list = args, start = 0): unknown => list[Number(list[0]) + at(fields, start, name)]
  t.equal(arg(HEAD, 'mode'), 'acquire')
  t.equal(arg(ACQUIRE, 'id'), 'r1')
  t.equal(arg(ACQUIRE, 'units'), 2)
  t.equal(arg(ACQUIRE, 'max'), 5)
  t.equal(arg(ACQUIRE, 'lease'), 30_000)
  t.equal(arg(BAN, 'threshold'), 3)
  t.equal(arg(BAN, 'ladder'), '1000 2000')
  t.equal(arg(BAN, 'forget'), 500)
  t.equal(arg(BAN, 'window'), 9000)
  t.equal(BAN.from, ACQUIRE.from + ACQUIRE.names.length, 'a ban\'s arguments follow the acquire\'s')
  t.equal(Number(acquireArgs({ ...input, ban: null }, () => '')[0]), KEY.names.length, 'without a ban policy, its keys alone')

  const release = releaseArgs({ key: keys.leases, algorithm: 'sliding-log', id: 'r1', units: 2 })
  t.equal(arg(RELEASE, 'id', release), 'r1')
  t.equal(arg(RELEASE, 'units', release), 2)
  const held = (id: string, units: number): Held => ({ key: keys.leases, algorithm: 'sliding-log', id, units })
  const renew = renewArgs(keys.leases, [held('a', 1), held('b', 3)], 4000)
  t.equal(arg(RENEW, 'lease', renew), 4000)
  t.equal(arg(RENEW, 'requests', renew), 2)
  const first = HEAD.names.length + RENEW.names.length + 1
  t.equal(arg(HELD, 'id', renew, first + HELD.names.length), 'b', 'the second request\'s id')
  t.equal(arg(HELD, 'units', renew, first + HELD.names.length), 3)
})
