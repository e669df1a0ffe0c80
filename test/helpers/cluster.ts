// A real Redis Cluster for tests: 3 masters + 3 replicas, each a `redis-server` process on loopback.
// Readiness is polled from the nodes' own state (CLUSTER INFO, CLUSTER NODES, INFO replication), never
// waited for with a fixed sleep, and `redis-cli --cluster check` gives its verdict before any test runs.
//
//   const cluster = await startCluster(t)      // every process, client and temp dir gone at t's teardown
//   const redis = cluster.client()              // an ioredis Cluster with the recommended options
//   await clusterReady(redis)
//   const owner = await cluster.ownerOf(slot)   // the master serving a slot now
//   await owner.kill()                          // SIGKILL: its replica takes over after ~4 s
//
// Start-up takes about 2.1 s, and cannot take much less: a master that starts without slots only declares
// the cluster ok 2 s after its start (CLUSTER_WRITABLE_DELAY in Redis's cluster.c).
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, Redis } from 'ioredis'
import type { ClusterOptions } from 'ioredis'
import { CLUSTER_OPTIONS } from '../../lib/stores/client.js'
import { freePort, HOST, startRedisServer } from './redis-server.js'
import type { RedisProcess, Teardownable } from './redis-server.js'

export type Role = 'master' | 'replica'

export interface ClusterNode {
  readonly host: string
  readonly port: number
  readonly url: string
  /** pid of the current process; changes after `restart()`. */
  readonly pid: number
  /** The node's cluster id (CLUSTER MYID); `restart()` keeps it (nodes.conf is kept). */
  readonly id: string
  /** The role the helper saw last: at start, then at every `masters()`, `replicas()` or `roleNow()`. */
  readonly role: Role
  /** A connection to this node alone; it never retries, and a new one is made once the node has restarted. */
  readonly redis: Redis
  /** SIGKILL; resolves once the process has exited. */
  kill (): Promise<void>
  /** SIGSTOP: the port accepts connections, nothing is answered. */
  freeze (): void
  /** SIGCONT. */
  thaw (): void
  /** Starts the node again on the same ports with the same nodes.conf, so it rejoins the cluster. */
  restart (): Promise<void>
  /** The role the node answers to ROLE now; rejects while it is down. */
  roleNow (): Promise<Role>
}

export interface StartClusterOptions {
  /** `cluster-node-timeout` in ms: how long a silent master has before its replica may take over. */
  nodeTimeout?: number
  /** More `redis-server` arguments for every node. */
  extraArgs?: readonly string[]
  /** The path of the redis-server executable every node runs (Valkey's, another Redis's); PATH's without it. */
  bin?: string
}

export interface TestCluster {
  /** Masters first, as created: node 3 + i started as the replica of node i. */
  readonly nodes: readonly ClusterNode[]
  /** `redis://127.0.0.1:<port>` of every node, in the order of `nodes`. */
  readonly urls: readonly string[]
  /** The running nodes that answer ROLE as master now. */
  masters (): Promise<ClusterNode[]>
  /** The running nodes that answer ROLE as replica now. */
  replicas (): Promise<ClusterNode[]>
  /** The master that serves `slot` now, as the first running node that answers sees it. */
  ownerOf (slot: number): Promise<ClusterNode>
  /** The node that replicates `master` now, as the first running node that answers sees it. */
  replicaOf (master: ClusterNode): Promise<ClusterNode>
  /** The slot of `key`, as the cluster computes it (CLUSTER KEYSLOT). */
  keySlot (key: string): Promise<number>
  /** Resolves once every running node says cluster_state:ok, all agree on who is who, and every replica is in sync. */
  waitHealthy (ms?: number): Promise<void>
  /** An ioredis Cluster over every node: `RECOMMENDED_CLUSTER_OPTIONS` under `opts`; disconnected at teardown. */
  client (opts?: ClusterOptions): Cluster
  /** SIGKILLs every node (teardown does too). */
  stop (): Promise<void>
}

/**
 * What the README recommends for a Cluster you lend to the plugin: the cluster options a client made from
 * URLs uses (`CLUSTER_OPTIONS` in lib/stores/redis.ts, imported so the two cannot drift), and the node
 * options that go with them. The cluster tests hold every decision to the deadline with exactly these:
 * - `enableOfflineQueue: false` at the cluster level: with every node down, a command fails at once instead
 *   of waiting 20 s or more (the node connections always queue, whatever `redisOptions` says).
 * - `redisOptions.maxRetriesPerRequest: 0` and `autoResendUnfulfilledCommands: false`: a command whose
 *   connection dropped is not sent again after a reconnect, when its request has long been answered.
 * - `redisOptions.connectTimeout` and `socketTimeout`: an unreachable node, or a connection that stalls and
 *   stays open, is cut and made again; the plugin's own deadline is shorter and decides every request first.
 *   (No `commandTimeout`: a plain timer that, under a busy event loop, throws away replies that came in time.)
 * - `clusterRetryStrategy`: keep reconnecting, with a capped backoff, after every node was down.
 */
export const RECOMMENDED_CLUSTER_OPTIONS: Readonly<ClusterOptions> = Object.freeze({
  ...CLUSTER_OPTIONS,
  clusterRetryStrategy: (times: number) => Math.min(times * 100, 2000),
  redisOptions: {
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: 2000,
    socketTimeout: 5000
  }
})

/** Resolves once `cluster` is ready (it fails commands before that: no offline queue). */
export async function clusterReady (cluster: Cluster, ms = 10_000): Promise<void> {
  if (cluster.status === 'ready') return
  await once(cluster, 'ready', { signal: AbortSignal.timeout(ms) })
}

const STARTUP_DEADLINE_MS = 20_000
const POLL_MS = 20
const SLOT_RANGES = [[0, 5460], [5461, 10922], [10923, 16383]] as const

/** Polls `check` every 20 ms until it returns true and resolves with the ms it took; rejects after `ms`. */
export async function pollUntil (what: string, ms: number, check: () => Promise<boolean>): Promise<number> {
  const started = performance.now()
  let last: unknown
  for (;;) {
    try {
      if (await check()) return performance.now() - started
    } catch (err) {
      last = err
    }
    if (performance.now() - started > ms) {
      throw new Error(`${what}: not true after ${ms} ms${last === undefined ? '' : ` (last error: ${(last as Error).message})`}`)
    }
    await sleep(POLL_MS)
  }
}

/** `INFO` / `CLUSTER INFO` text as a map of its `field:value` lines. */
function fields (text: unknown): Map<string, string> {
  const map = new Map<string, string>()
  for (const line of String(text).split(/\r?\n/)) {
    const colon = line.indexOf(':')
    if (colon > 0) map.set(line.slice(0, colon), line.slice(colon + 1).trim())
  }
  return map
}

interface NodeLine { id: string, port: number, flags: string[], master: string }

/** CLUSTER NODES, parsed: `<id> <ip:port@bus> <flags> <master|-> ...`. */
async function clusterNodes (redis: Redis): Promise<NodeLine[]> {
  const text = String(await redis.call('CLUSTER', 'NODES'))
  return text.trim().split('\n').map(line => {
    const [id, address, flags, master] = line.trim().split(' ') as [string, string, string, string]
    return { id, port: Number(address.split('@')[0]!.split(':').pop()), flags: flags.split(','), master }
  })
}

async function redisCli (args: readonly string[]): Promise<string> {
  return await new Promise((resolve, reject) => {
    execFile('redis-cli', args, { timeout: STARTUP_DEADLINE_MS }, (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`redis-cli ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`))
      else resolve(stdout)
    })
  })
}

interface Started { proc: RedisProcess, busPort: number }

/** One cluster-enabled redis-server, with a bus port of its own: data port + 10000 may be above 65535. */
async function startNode (t: Teardownable, nodeTimeout: number, extraArgs: readonly string[], bin?: string): Promise<Started> {
  for (let attempt = 1; ; attempt++) {
    const busPort = await freePort()
    try {
      const proc = await startRedisServer(t, [
        '--cluster-enabled', 'yes',
        // Relative to the node's own temporary --dir, which restart() keeps.
        '--cluster-config-file', 'nodes.conf',
        '--cluster-port', String(busPort),
        '--cluster-node-timeout', String(nodeTimeout),
        // A replica may take over however long its link was down: tests kill masters on purpose.
        '--cluster-replica-validity-factor', '0',
        // The first full sync goes straight over the socket, at once: replicas are in sync within milliseconds.
        '--repl-diskless-sync', 'yes',
        '--repl-diskless-sync-delay', '0',
        ...extraArgs
      ], { bin })
      return { proc, busPort }
    } catch (err) {
      // The bus port was taken between the probe and the bind: another one.
      if (attempt >= 3 || !/address already in use/i.test((err as Error).message)) throw err
    }
  }
}

/**
 * What `redis-cli --cluster create --cluster-replicas 1 --cluster-yes` does, without its one-second sleeps
 * (1–2 s of the start-up): a config epoch per node, a third of the slots per master, a MEET between every
 * pair, and once every node knows every other, REPLICATE. Nodes 0–2 become masters, node 3 + i the
 * replica of node i.
 */
async function join (admins: readonly Redis[], started: readonly Started[]): Promise<void> {
  await Promise.all(admins.map(async (admin, i) => await admin.call('CLUSTER', 'SET-CONFIG-EPOCH', i + 1)))
  await Promise.all(SLOT_RANGES.map(async ([from, to], i) => await admins[i]!.call('CLUSTER', 'ADDSLOTSRANGE', from, to)))
  const meetings: Array<Promise<unknown>> = []
  for (let i = 0; i < admins.length; i++) {
    for (let j = i + 1; j < admins.length; j++) {
      meetings.push(admins[i]!.call('CLUSTER', 'MEET', HOST, started[j]!.proc.port, started[j]!.busPort))
    }
  }
  await Promise.all(meetings)
  const ids = await Promise.all(admins.map(async admin => String(await admin.call('CLUSTER', 'MYID'))))
  await pollUntil('every node knows every other', STARTUP_DEADLINE_MS, async () => {
    const views = await Promise.all(admins.map(async admin => await clusterNodes(admin)))
    return views.every(view => view.length === admins.length && view.every(line => !line.flags.includes('handshake')))
  })
  await Promise.all([0, 1, 2].map(async i => await admins[i + 3]!.call('CLUSTER', 'REPLICATE', ids[i]!)))
}

/**
 * A connection to one node that never reconnects by itself: once it has ended (the node was killed), the
 * next use makes a new one. Commands wait for the connection to open, at most connectTimeout.
 */
function adminClient (port: number): Redis {
  const redis = new Redis({
    host: HOST,
    port,
    maxRetriesPerRequest: 0,
    commandTimeout: 1000,
    connectTimeout: 1000,
    retryStrategy: () => null,
    lazyConnect: true
  })
  redis.on('error', () => {})
  return redis
}

/**
 * Starts 3 masters and 3 replicas, makes them one cluster, and resolves once every node agrees on it and the
 * replicas are in sync. Every process, client and temporary directory is gone after `t`'s teardown.
 */
export async function startCluster (t: Teardownable, opts: StartClusterOptions = {}): Promise<TestCluster> {
  const nodeTimeout = opts.nodeTimeout ?? 2000
  const extraArgs = opts.extraArgs ?? []
  const clients: Array<{ status: string, disconnect: () => void }> = []
  const started: Started[] = []
  for (let i = 0; i < 6; i++) started.push(await startNode(t, nodeTimeout, extraArgs, opts.bin))
  // Teardowns run last-registered first, so this one runs before the processes' own: clients are dropped
  // while their servers still answer (an ioredis disconnect from a server already gone holds the event loop
  // for its 2 s disconnectTimeout), then every node is SIGKILLed (instant; SIGTERM would save nodes.conf).
  t.teardown(async () => {
    // An ended client has nothing to close (and disconnecting one would arm that 2 s timer).
    for (const c of clients) if (c.status !== 'end') c.disconnect()
    await Promise.all(started.map(async ({ proc }) => await proc.kill()))
  })

  const admins = started.map(({ proc }) => adminClient(proc.port))
  clients.push(...admins)
  await Promise.all(admins.map(async admin => await admin.connect()))
  await join(admins, started)

  const nodes: ClusterNode[] = []
  const down = new Set<ClusterNode>()
  for (const [i, { proc }] of started.entries()) {
    let admin = admins[i]!
    const redis = (): Redis => {
      if (admin.status === 'end') clients.push(admin = adminClient(proc.port))
      return admin
    }
    const id = String(await admin.call('CLUSTER', 'MYID'))
    let role: Role = i < 3 ? 'master' : 'replica'
    const node: ClusterNode = {
      host: HOST,
      port: proc.port,
      url: proc.url,
      get pid () { return proc.pid },
      id,
      get role () { return role },
      get redis () { return redis() },
      async kill () {
        down.add(node)
        await proc.kill()
      },
      freeze () { proc.freeze() },
      thaw () { proc.thaw() },
      async restart () {
        await proc.restart()
        down.delete(node)
      },
      async roleNow () {
        const reply = await redis().call('ROLE') as unknown[]
        role = reply[0] === 'master' ? 'master' : 'replica'
        return role
      }
    }
    nodes.push(node)
  }

  const running = (): ClusterNode[] => nodes.filter(n => !down.has(n))
  const withRole = async (wanted: Role): Promise<ClusterNode[]> => {
    const live = running()
    const roles = await Promise.all(live.map(async n => await n.roleNow().catch(() => undefined)))
    return live.filter((_, i) => roles[i] === wanted)
  }
  /** The first answer of `ask` from a running node. */
  const fromAnyNode = async <T>(what: string, ask: (node: ClusterNode) => Promise<T | undefined>): Promise<T> => {
    for (const node of running()) {
      const answer = await ask(node).catch(() => undefined)
      if (answer !== undefined) return answer
    }
    throw new Error(`no running node could say ${what}`)
  }

  const waitHealthy = async (ms = STARTUP_DEADLINE_MS): Promise<void> => {
    await pollUntil('cluster healthy', ms, async () => {
      const live = running()
      const isLive = (line: NodeLine): boolean => live.some(n => n.id === line.id)
      const infos = await Promise.all(live.map(async n => fields(await n.redis.call('CLUSTER', 'INFO'))))
      if (!infos.every(info => info.get('cluster_state') === 'ok')) return false
      // Every running node sees every running node, with the same master for each, none failing or handshaking.
      const views = await Promise.all(live.map(async n => (await clusterNodes(n.redis)).filter(isLive)))
      const shape = (view: NodeLine[]): string => view
        .map(line => `${line.id}>${line.flags.includes('master') ? '-' : line.master}${line.flags.some(f => /fail|handshake|noaddr/.test(f)) ? '!' : ''}`)
        .sort().join(',')
      const shapes = new Set(views.map(shape))
      if (shapes.size !== 1 || [...shapes][0]!.includes('!') || views[0]!.length !== live.length) return false
      // Replicas: the link to their master is up and the first sync is over.
      const replicas = await withRole('replica')
      const replication = await Promise.all(replicas.map(async n => fields(await n.redis.info('replication'))))
      return replication.every(info => info.get('master_link_status') === 'up' && info.get('master_sync_in_progress') === '0')
    })
    await withRole('master') // refreshes `role` of every running node
  }

  await waitHealthy()
  // A second opinion from the reference tool: slots covered, every node agrees, no slot open.
  const check = await redisCli(['--cluster', 'check', `${HOST}:${nodes[0]!.port}`])
  if (!check.includes('All 16384 slots covered') || !check.includes('All nodes agree about slots configuration')) {
    throw new Error(`redis-cli --cluster check does not agree that the cluster is whole:\n${check}`)
  }

  return {
    nodes,
    urls: nodes.map(n => n.url),
    masters: async () => await withRole('master'),
    replicas: async () => await withRole('replica'),
    async ownerOf (slot) {
      return await fromAnyNode(`who serves slot ${slot}`, async node => {
        const ranges = await node.redis.call('CLUSTER', 'SLOTS') as Array<[number, number, [string, number, ...unknown[]]]>
        const range = ranges.find(([from, to]) => slot >= from && slot <= to)
        return nodes.find(n => n.port === Number(range?.[2][1]))
      })
    },
    async replicaOf (master) {
      return await fromAnyNode(`who replicates ${master.port}`, async node => {
        const line = (await clusterNodes(node.redis)).find(l => l.master === master.id)
        return nodes.find(n => n.id === line?.id)
      })
    },
    async keySlot (key) {
      return await fromAnyNode('CLUSTER KEYSLOT', async node => Number(await node.redis.call('CLUSTER', 'KEYSLOT', key)))
    },
    waitHealthy,
    client (options = {}) {
      const { redisOptions, ...rest } = options
      const cluster = new Cluster(nodes.map(n => ({ host: n.host, port: n.port })), {
        ...RECOMMENDED_CLUSTER_OPTIONS,
        ...rest,
        redisOptions: { ...RECOMMENDED_CLUSTER_OPTIONS.redisOptions, ...redisOptions }
      })
      // The owner of a client listens to its errors; tests that care add their own listener.
      cluster.on('error', () => {})
      clients.push(cluster)
      return cluster
    },
    async stop () {
      for (const n of nodes) down.add(n)
      await Promise.all(started.map(async ({ proc }) => await proc.kill()))
    }
  }
}
