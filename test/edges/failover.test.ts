// The edge matrix (test/helpers/edge-harness.ts): a replica promoted under traffic. Standalone: the master is
// killed, its replica made master (REPLICAOF NO ONE) and the address the instances use moved to it (a proxy
// standing for a virtual IP); on the Cluster: every replica takes over its master at once (CLUSTER FAILOVER
// FORCE). Two instances, every kind of limit; the handlers' records are held to each limit, a promotion
// counted as a restart that lost data (replication is asynchronous: the last writes may be gone), so one
// budget more across it and `max` more running at once until the leases are re-created, within a lease.
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import { Observer } from '../helpers/edge-check.js'
import type { Fault } from '../helpers/edge-check.js'
import { KINDS, drive, judge, nearestMidnight, pair, seeds, selected } from '../helpers/edge-harness.js'
import { pollUntil, startCluster } from '../helpers/cluster.js'
import { client, startRedisServer } from '../helpers/redis.js'
import { startSwitchProxy } from '../helpers/switch-proxy.js'

// A Cluster of six redis-servers and a standalone pair, each run under traffic twice (two seeds).
t.setTimeout(150_000)

const FAULT_AT_MS = 1000
const TRAFFIC_MS = 5500

/** Runs every kind's traffic on `redis` under `edge`, `promote` called FAULT_AT_MS in; judges the records. */
async function underTraffic (t: Test, edge: string, seed: number, redis: string | string[], promote: () => Promise<void>): Promise<void> {
  const cells = KINDS.map(kind => ({ name: `${kind.name}/${edge}`, kind, client: `${kind.name}#${seed}` })).filter(c => selected(c.name))
  if (cells.length === 0) return
  const { zone } = nearestMidnight()
  const observer = new Observer()
  const bases = await pair(t, { redis, zone, observer })
  const traffic = Promise.all(cells.map(async c => { await drive(c, seed, { ms: TRAFFIC_MS, bases, opening: true }, observer) }))
  await sleep(FAULT_AT_MS)
  const from = performance.now()
  await promote()
  const fault: Fault = { from, to: performance.now(), lost: 'data' }
  await traffic
  t.comment(`${edge}, seed ${seed}: promoted ${Math.round(fault.to - fault.from)} ms after the fault began, every instance answered by ` +
    `Redis again after ${Math.round(observer.answeredAgain(fault.to) - fault.from)} ms`)
  judge(t, observer, cells, seed, [fault])
}

const replicating = async (info: () => Promise<string>): Promise<boolean> => /master_link_status:up/.test(await info())

// One Cluster for both seeds (six redis-servers take seconds to start); each seed's promotions take it over again.
const cluster = KINDS.some(kind => selected(`${kind.name}/a replica promoted/cluster`)) ? await startCluster(t) : undefined

for (const seed of seeds(t, 4343)) {
  t.test(`a replica promoted, standalone and on a Cluster, seed ${seed}`, async t => {
    await Promise.all([standalone(t, seed), clustered(t, seed)])
  })
}

async function standalone (t: Test, seed: number): Promise<void> {
  const master = await startRedisServer(t)
  const replica = await startRedisServer(t, ['--replicaof', master.host, String(master.port)])
  const admin = client(t, replica.url)
  await pollUntil('the replica in sync', 10_000, async () => await replicating(async () => await admin.info('replication')))
  const proxy = await startSwitchProxy(t, master.port)
  await underTraffic(t, 'a replica promoted/redis', seed, proxy.url, async () => {
    await master.kill()
    await admin.call('REPLICAOF', 'NO', 'ONE')
    proxy.switchTo(replica.port)
  })
}

async function clustered (t: Test, seed: number): Promise<void> {
  if (cluster === undefined) return
  await cluster.waitHealthy()
  const replicas = await cluster.replicas()
  await underTraffic(t, 'a replica promoted/cluster', seed, [...cluster.urls], async () => {
    // One at a time, without the masters' vote (TAKEOVER): three elections at once can stall each other.
    for (const node of replicas) {
      await node.redis.call('CLUSTER', 'FAILOVER', 'TAKEOVER')
      await pollUntil('a replica promoted', 15_000, async () => await node.roleNow() === 'master')
    }
  })
}
