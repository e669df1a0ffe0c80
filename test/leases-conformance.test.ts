// `concurrency`'s leases: one hand-worked table run against both stores, lua/lease.lua on a real Redis (its one
// clock read swapped for a time the test passes, as helpers/lua.ts does for every script) and its in-process
// twin, lib/stores/memory-leases.ts, on a movable clock. Both must give exactly the table's answers: slots
// taken up to max, units, refusals, leases that end unless renewed, renewals that write back leases found gone,
// releases given back once, bans.
import t from 'tap'
import type { Redis } from 'ioredis'
import { identityKeys } from '../lib/stores/key-names.js'
import { indexOf } from '../lib/stores/ban-index.js'
import { MemoryStore } from '../lib/stores/memory.js'
import { toLeaseDecision } from '../lib/stores/leases.js'
import { InvalidReplyError } from '../lib/errors.js'
import { acquireArgs, releaseArgs, renewArgs } from '../lib/stores/redis-leases.js'
import { LEASE_SCRIPT } from '../lib/stores/scripts.js'
import type { Decision, Held, LeaseInput } from '../lib/stores/store.js'
import type { IdentityKeys } from '../lib/stores/key-names.js'
import { client, getRedis, timeVariant, uniquePrefix } from './helpers/redis.js'
import type { Teardownable } from './helpers/redis.js'

const T0 = 1_700_000_000_000
const LEASE = 1000

/** A store's leases at a time the test says. */
interface Leasing {
  readonly kind: string
  acquire: (input: LeaseInput, at: number) => Promise<Decision>
  release: (held: Held, at: number) => Promise<number>
  renew: (key: string, held: readonly Held[], leaseMs: number, at: number) => Promise<number>
  ban: (keys: IdentityKeys, ms: number, at: number) => Promise<void>
}

function memory (t: Teardownable): Leasing {
  let clock = 0
  const store = new MemoryStore({ cache: 1000, now: () => clock })
  t.teardown(() => store.close())
  const at = (ms: number): void => { clock = T0 + ms }
  return {
    kind: 'in process',
    acquire: async (input, ms) => { at(ms); return store.leases.acquire(input) },
    release: async (held, ms) => { at(ms); return store.leases.release(held) },
    renew: async (key, held, leaseMs, ms) => { at(ms); return store.leases.renew(key, held, leaseMs) },
    ban: async (keys, banMs, ms) => { at(ms); await store.setBan(keys.banned, banMs) }
  }
}

async function redis (t: Teardownable): Promise<Leasing> {
  const r: Redis = client(t, (await getRedis(t)).url)
  const lua = timeVariant(LEASE_SCRIPT.lua)
  const call = async (args: Array<string | number>, ms: number): Promise<unknown> => await r.eval(lua, ...(args as [number, ...Array<string | number>]), T0 + ms)
  return {
    kind: 'lua/lease.lua',
    acquire: async (input, ms) => toLeaseDecision(await call(acquireArgs(input, banned => indexOf(banned, false)), ms), input),
    release: async (held, ms) => Number(await call(releaseArgs(held), ms)),
    renew: async (key, held, leaseMs, ms) => Number(await call(renewArgs(key, held, leaseMs), ms)),
    // The ban as an operator sets it (a key with a TTL), counted from the test's clock by Redis's own.
    ban: async (keys, banMs) => { await r.set(keys.banned, '1', 'PX', banMs) }
  }
}

type Step =
  | { at: number, acquire: string, units?: number, expect: Partial<Decision> }
  | { at: number, release: string, units?: number, expect: number }
  | { at: number, renew: string[], expect: number }
  | { at: number, ban: number }

interface Table {
  readonly name: string
  readonly max: number
  readonly ban?: { threshold: number, ladder: number[] }
  readonly steps: readonly Step[]
}

const taken = (count: number): Partial<Decision> => ({ status: 'allowed', count, retryMs: 0, banStarted: false })
const refused = (count: number): Partial<Decision> => ({ status: 'limited', count, retryMs: 1000, resetMs: 1000, banStarted: false })

const TABLES: Table[] = [
  {
    name: 'slots up to max; the next is refused (a second to wait); a release makes room, once',
    max: 2,
    steps: [
      { at: 0, acquire: 'a', expect: taken(1) },
      { at: 1, acquire: 'b', expect: taken(2) },
      { at: 2, acquire: 'c', expect: refused(2) },
      { at: 3, release: 'a', expect: 1 },
      { at: 4, release: 'a', expect: 0 },
      { at: 5, acquire: 'c', expect: taken(2) },
      { at: 6, acquire: 'd', expect: refused(2) }
    ]
  },
  {
    name: 'a request takes its units; one costing more than max never fits (no wait)',
    max: 3,
    steps: [
      { at: 0, acquire: 'a', units: 2, expect: taken(2) },
      { at: 0, acquire: 'b', units: 2, expect: refused(2) },
      { at: 0, acquire: 'c', expect: taken(3) },
      { at: 0, acquire: 'd', units: 4, expect: { status: 'limited', count: 3, retryMs: 0, banStarted: false } },
      { at: 1, release: 'a', units: 2, expect: 2 },
      { at: 1, acquire: 'b', units: 2, expect: taken(3) }
    ]
  },
  {
    name: 'a lease ends `lease` after it was taken or renewed; renewed, it holds on',
    max: 2,
    steps: [
      { at: 0, acquire: 'a', expect: taken(1) },
      { at: 0, acquire: 'b', expect: taken(2) },
      { at: 400, renew: ['a'], expect: 0 },
      { at: 999, acquire: 'c', expect: refused(2) },
      // b ended at 1000 (its last millisecond is its end: gone at it); a holds until 1400.
      { at: 1000, acquire: 'c', expect: taken(2) },
      { at: 1399, renew: ['a', 'c'], expect: 0 },
      { at: 1400, acquire: 'd', expect: refused(2) },
      { at: 2398, acquire: 'd', expect: refused(2) },
      { at: 2399, acquire: 'd', expect: taken(1) }
    ]
  },
  {
    name: 'a renewal writes back the leases it finds gone (as after a restart that lost them), past max: new ones wait',
    max: 2,
    steps: [
      { at: 0, acquire: 'a', expect: taken(1) },
      { at: 0, acquire: 'b', expect: taken(2) },
      // a and b are gone (they ended, as Redis losing them): two more are taken while they still run.
      { at: 1000, acquire: 'c', expect: taken(1) },
      { at: 1000, acquire: 'd', expect: taken(2) },
      { at: 1001, renew: ['a', 'b'], expect: 2 },
      { at: 1002, acquire: 'e', expect: refused(4) },
      { at: 1003, renew: ['a', 'c'], expect: 0 },
      { at: 1004, release: 'c', expect: 1 },
      { at: 1004, acquire: 'e', expect: refused(3) },
      { at: 1005, release: 'd', expect: 1 },
      { at: 1005, acquire: 'e', expect: refused(2) },
      { at: 1006, release: 'a', expect: 1 },
      { at: 1006, acquire: 'e', expect: taken(2) }
    ]
  },
  {
    name: 'a request of several units is written back whole',
    max: 3,
    steps: [
      { at: 0, acquire: 'a', units: 2, expect: taken(2) },
      { at: 1000, renew: ['a'], expect: 2 },
      { at: 1001, acquire: 'b', units: 2, expect: refused(2) },
      { at: 1001, acquire: 'c', expect: taken(3) }
    ]
  },
  {
    name: 'under a ban policy, refusals strike; the threshold\'s starts a ban; a banned client takes nothing',
    max: 1,
    ban: { threshold: 2, ladder: [60_000] },
    steps: [
      { at: 0, acquire: 'a', expect: taken(1) },
      { at: 1, acquire: 'b', expect: refused(1) },
      { at: 2, acquire: 'c', expect: { status: 'banned', count: 1, retryMs: 60_000, banStarted: true, offence: 1 } },
      { at: 3, release: 'a', expect: 1 },
      { at: 4, acquire: 'd', expect: { status: 'banned', count: 0, banStarted: false } }
    ]
  },
  {
    name: 'a ban set elsewhere (an operator, a rate limit) refuses before a slot is looked at',
    max: 5,
    steps: [
      { at: 0, ban: 5000 },
      { at: 0, acquire: 'a', expect: { status: 'banned', count: 0, banStarted: false } }
    ]
  }
]

for (const make of [memory, redis]) {
  for (const table of TABLES) {
    t.test(`${table.name}`, async t => {
      const leasing = await make(t)
      const keys = identityKeys(uniquePrefix(), 'all', '192.0.2.7')
      const units = new Map<string, number>()
      const held = (id: string, n = units.get(id) ?? 1): Held => ({ key: keys.leases, algorithm: 'sliding-log', id, units: n })
      for (const step of table.steps) {
        const label = `${leasing.kind}, at ${step.at}: ${JSON.stringify(step).slice(0, 60)}`
        if ('acquire' in step) {
          const input: LeaseInput = { keys, algorithm: 'sliding-log', id: step.acquire, units: step.units ?? 1, max: table.max, leaseMs: LEASE, ban: table.ban === undefined ? null : { ...table.ban, forgetMs: 0 }, strikeWindowMs: 60_000 }
          const decision = await leasing.acquire(input, step.at)
          if (decision.status === 'allowed') units.set(step.acquire, step.units ?? 1)
          t.match(decision, step.expect, label)
          // A ban's time left is Redis's own TTL, read on its clock: at most its length, and most of it.
          if (step.expect.status === 'banned' && !('retryMs' in step.expect)) t.ok(decision.retryMs > 1000 && decision.retryMs <= 60_000, `${label}: the ban's time left (${decision.retryMs} ms)`)
        } else if ('release' in step) {
          t.equal(await leasing.release(held(step.release, step.units), step.at), step.expect, label)
        } else if ('renew' in step) {
          t.equal(await leasing.renew(keys.leases, step.renew.map(id => held(id)), LEASE, step.at), step.expect, label)
        } else {
          await leasing.ban(keys, step.ban, step.at)
        }
      }
    })
  }
}

t.test('a reply to acquire that is not the script\'s is refused, not read', async t => {
  const input: LeaseInput = { keys: identityKeys(uniquePrefix(), 'all', '192.0.2.7'), algorithm: 'sliding-log', id: 'a', units: 1, max: 1, leaseMs: LEASE, ban: null, strikeWindowMs: 60_000 }
  t.match(toLeaseDecision([0, '1', 0, 0, '1700000000000'], input), taken(1), 'integers as RESP2 strings are read')
  for (const reply of [null, 'OK', [0, 1, 0, 0], [3, 1, 0, 0, T0], [0, -1, 0, 0, T0], [0, 1.5, 0, 0, T0], [0, '1x', 0, 0, T0]]) {
    t.throws(() => toLeaseDecision(reply, input), InvalidReplyError, JSON.stringify(reply))
  }
})

t.test('in process, a sweep drops the leases that ended and keeps those that have not', async t => {
  let clock = T0
  const store = new MemoryStore({ cache: 1000, now: () => clock })
  t.teardown(() => store.close())
  const keys = identityKeys(uniquePrefix(), 'all', '192.0.2.7')
  const input = (id: string): LeaseInput => ({ keys, algorithm: 'sliding-log', id, units: 1, max: 2, leaseMs: LEASE, ban: null, strikeWindowMs: 60_000 })
  t.match(store.leases.acquire(input('a')), taken(1))
  clock = T0 + 500
  t.match(store.leases.acquire(input('b')), taken(2))
  clock = T0 + LEASE
  store.sweep()
  t.equal(store.leases.release({ key: keys.leases, algorithm: 'sliding-log', id: 'a', units: 1 }), 0, 'a ended: swept')
  t.match(store.leases.acquire(input('c')), taken(2), 'b is held still')
})
