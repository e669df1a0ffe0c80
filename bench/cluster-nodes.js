// A local Redis Cluster for the Cluster benchmarks (bench/cluster.js, bench/cluster-plugin.js): three masters
// and (REPLICAS, 3 or 0) a replica of each, redis-server processes of its own without persistence, and the
// Redis CPU and script time they spent.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { connectWhenUp, portIsFree } from './processes.js'

export const MASTERS = 3
export const REPLICAS = Number(process.env.REPLICAS ?? MASTERS)
if (REPLICAS !== 0 && REPLICAS !== MASTERS) throw new Error(`REPLICAS is ${MASTERS} (one per master) or 0, got ${process.env.REPLICAS}`)
const SLOTS = 16_384

/**
 * Ports for the cluster's nodes from a random base, each free on the loopback with its cluster bus port (the
 * port + 10000): ports from the process id collided with the Clusters of test files running beside (with four
 * at a time), and a node that could not bind left the harness talking to another process's server.
 */
async function freeBase () {
  for (;;) {
    const base = 20_000 + Math.floor(Math.random() * 25_000)
    const ports = Array.from({ length: MASTERS + REPLICAS }, (_, i) => base + i)
    const free = await Promise.all(ports.flatMap(port => [portIsFree(port), portIsFree(port + 10_000)]))
    if (free.every(Boolean)) return base
  }
}

/**
 * Three masters on ports from `base` (free ones when not given), each with a third of the slots, and (REPLICAS)
 * a replica of each on the ports after them; resolves once the cluster is ok and every replica is in sync.
 * `nodes`: the masters first. A node that exits before it takes a connection (its port taken between the check
 * and its start) makes the start try again on other ports, up to three times.
 */
export async function startCluster (base, attempt = 1) {
  base ??= await freeBase()
  const dir = mkdtempSync(join(tmpdir(), 'rate-guard-cluster-'))
  const ports = Array.from({ length: MASTERS + REPLICAS }, (_, i) => base + i)
  const servers = ports.map(port => spawn('redis-server', ['--port', String(port), '--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' }))
  // A start that fails (a port taken) leaves no redis-server behind.
  const killAll = () => { for (const server of servers) server.kill() }
  process.once('exit', killAll)
  const nodes = []
  const exited = () => servers.some(server => server.exitCode !== null)
  try {
    for (const port of ports) nodes.push(await connectWhenUp(port, { waitMs: 50, gaveUp: exited }))
    // A node that could not bind may have left its connection to another process's server on that port.
    if (exited()) throw new Error('a redis-server of the cluster exited as it started (its port taken)')
  } catch (err) {
    const lost = exited()
    for (const node of nodes) node.disconnect()
    killAll()
    process.removeListener('exit', killAll)
    rmSync(dir, { recursive: true, force: true })
    if (!lost || attempt === 3) throw err
    return await startCluster(undefined, attempt + 1)
  }
  for (const [i, node] of nodes.slice(0, MASTERS).entries()) {
    const from = Math.floor(i * SLOTS / MASTERS)
    const to = Math.floor((i + 1) * SLOTS / MASTERS)
    await node.call('CLUSTER', 'ADDSLOTSRANGE', String(from), String(to - 1))
    await node.call('CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1))
  }
  for (const node of nodes.slice(1)) await node.call('CLUSTER', 'MEET', '127.0.0.1', String(ports[0]))
  for (let i = 0; ; i++) {
    const infos = await Promise.all(nodes.map(async node => await node.call('CLUSTER', 'INFO')))
    if (infos.every(info => /cluster_state:ok/.test(info) && info.includes(`cluster_known_nodes:${ports.length}`))) break
    if (i === 200) throw new Error('the cluster did not come up')
    await sleep(50)
  }
  for (const [i, replica] of nodes.slice(MASTERS).entries()) await replica.call('CLUSTER', 'REPLICATE', await nodes[i].call('CLUSTER', 'MYID'))
  for (let i = 0; ; i++) {
    const synced = await Promise.all(nodes.slice(MASTERS).map(async node => /master_link_status:up/.test(await node.info('replication'))))
    if (synced.every(Boolean)) break
    if (i === 400) throw new Error('the replicas did not come in sync')
    await sleep(50)
  }
  const stop = async () => {
    for (const node of nodes) await node.shutdown('NOSAVE').catch(() => {})
    for (const node of nodes) node.disconnect()
    for (const server of servers) if (server.exitCode === null) await new Promise(resolve => server.once('exit', resolve))
    rmSync(dir, { recursive: true, force: true })
  }
  return { ports, nodes, stop }
}

/** Redis CPU (s), script time (µs) and script calls so far, summed over `nodes`. */
export async function spent (nodes) {
  let cpu = 0
  let script = 0
  let calls = 0
  for (const node of nodes) {
    const info = `${await node.info('cpu')}${await node.info('commandstats')}`
    cpu += Number(/^used_cpu_user:([\d.]+)/m.exec(info)[1]) + Number(/^used_cpu_sys:([\d.]+)/m.exec(info)[1])
    for (const command of ['evalsha', 'eval', 'fcall']) {
      const stat = new RegExp(`^cmdstat_${command}:calls=(\\d+),usec=(\\d+)`, 'm').exec(info)
      calls += Number(stat?.[1] ?? 0)
      script += Number(stat?.[2] ?? 0)
    }
  }
  return { cpu, script, calls }
}
