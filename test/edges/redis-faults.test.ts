// The edge matrix (test/helpers/edge-harness.ts): every kind of limit, two instances on one Redis under
// traffic while Redis restarts with its data lost, pauses its writes (`CLIENT PAUSE WRITE`, what FAILOVER
// does), runs out of memory under noeviction, or while the instances' connections stall behind a proxy (a hung
// load balancer). The handlers' records are held to each limit, with what the docs allow during the fault: a
// restart that lost the data starts the window again (one budget more across it, a period's max more for a
// quota, `max` more running at once until the leases are re-created, within a lease); a pause, out of memory
// and a stall lose no count, so the limits hold exactly (a pause or out of memory longer than a lease keeps
// renewals from writing: the leases may lapse, and are held as a restart's). failMode is the default,
// 'closed'. (Redis's edges: the in-process store has none.)
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import { Observer } from '../helpers/edge-check.js'
import type { Fault } from '../helpers/edge-check.js'
import { KINDS, drive, judge, nearestMidnight, pair, seeds, selected } from '../helpers/edge-harness.js'
import { startFaultProxy } from '../helpers/fault-proxy.js'
import { client, startRedisServer } from '../helpers/redis.js'
import type { RedisProcess } from '../helpers/redis.js'

t.setTimeout(150_000)

/** When, into the run's traffic, the fault begins. */
const FAULT_AT_MS = 1000
// Long enough that the slots held from the start outlive a lease past Redis's slow return after a restart.
const TRAFFIC_MS = 7000

interface Edge {
  name: string
  /** Makes the fault happen and ends it; says what it lost. */
  run: (server: RedisProcess, admin: Redis, stall: () => void) => Promise<Omit<Fault, 'from' | 'to'>>
  /** Through a proxy that can stall the instances' connections. */
  proxied?: boolean
}

const EDGES: readonly Edge[] = [
  {
    name: 'Redis restarted, data lost',
    run: async server => { await server.restart(); return { lost: 'data' } }
  },
  {
    name: 'CLIENT PAUSE WRITE',
    run: async (_server, admin) => {
      await admin.call('CLIENT', 'PAUSE', '2500', 'WRITE')
      await sleep(2500)
      // Longer than a lease: the renewals wait, and the leases lapse meanwhile (as out of memory).
      return { lost: 'leases' }
    }
  },
  {
    name: 'out of memory',
    run: async (_server, admin) => {
      await admin.config('SET', 'maxmemory', '1')
      await sleep(1500)
      await admin.config('SET', 'maxmemory', '0')
      return { lost: 'leases' }
    }
  },
  {
    name: 'a stalled connection',
    proxied: true,
    run: async (_server, _admin, stall) => { stall(); return { lost: false } }
  }
]

/** The connections other than `admin`'s own (the instances', and any probe of theirs), as `id name`. */
async function connections (admin: Redis): Promise<Set<string>> {
  const mine = String(await admin.call('CLIENT', 'ID'))
  const list = String(await admin.call('CLIENT', 'LIST'))
  return new Set(list.split('\n').map(line => /^id=(\d+) .*\bname=(\S*)/.exec(line)).filter(m => m !== null && m[1] !== mine)
    .map(m => `${m![1]!} ${m![2]!}`))
}

async function cell (t: Test, edge: Edge, seed: number): Promise<void> {
  const cells = KINDS.map(kind => ({ name: `${kind.name}/${edge.name}/redis`, kind, client: `${kind.name}#${seed}` }))
    .filter(c => selected(c.name))
  if (cells.length === 0) return
  const server = await startRedisServer(t, ['--maxmemory-policy', 'noeviction'])
  const admin = client(t, server.url)
  const proxy = edge.proxied === true ? await startFaultProxy(t, server.port) : undefined
  const redis = proxy?.url ?? server.url
  const { zone } = nearestMidnight()
  const observer = new Observer()
  const bases = await pair(t, { redis, zone, observer })
  const traffic = Promise.all(cells.map(async c => { await drive(c, seed, { ms: TRAFFIC_MS, bases, opening: true }, observer) }))
  await sleep(FAULT_AT_MS)
  const before = await connections(admin)
  const from = performance.now()
  const lost = await edge.run(server, admin, () => { proxy?.stall() })
  const fault: Fault = { from, to: performance.now(), ...lost }
  if (edge.name === 'CLIENT PAUSE WRITE') {
    const after = await connections(admin)
    t.strictSame([...before].filter(id => !after.has(id)), [], `CLIENT PAUSE WRITE: no connection of the instances was cut (id and name of those that were), seed ${seed}`)
  }
  await traffic
  t.comment(`${edge.name}, seed ${seed}: the fault lasted ${Math.round(fault.to - fault.from)} ms, every instance answered by Redis ` +
    `again ${Math.round(observer.answeredAgain(fault.to) - fault.from)} ms after it began`)
  judge(t, observer, cells, seed, [fault])
}

// A seed's edges run side by side, each on a redis-server of its own: the file's time is two runs, not eight.
for (const seed of seeds(t, 4242)) {
  t.test(`every fault, seed ${seed}`, async t => { await Promise.all(EDGES.map(async edge => { await cell(t, edge, seed) })) })
}
