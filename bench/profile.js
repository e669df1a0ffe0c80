// Where one server variant spends its CPU under one scenario: the server runs with `--cpu-prof`, the load
// generator drives it, and the profile is summed up by package and by function.
//
//   node bench/profile.js [variant id substring] [scenario] [seconds]
//   node bench/profile.js 'rate-guard sliding-log' allowed 5          (the default)
//   BENCH_REDIS=start node bench/profile.js …                          (a redis-server of its own, pinned away)
//
// A sampled profile is wall-clock: time the server's thread was preempted inside a call (by a Redis woken on
// the same core, say) is charged to that call. Pin Redis away (BENCH_REDIS=start) before reading much into
// the time in `writeUtf8String` (ioredis's socket write).
//
// Prints the summary; the .cpuprofile stays in bench/results/ (open it in Chrome DevTools for the flame chart).
import { mkdirSync, readdirSync, readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { MAX, SCENARIOS, bannedKeys, key } from './plan.js'
import { pinning, startLoad, startRedis, startServer, stopServer } from './processes.js'
import { deleteKeys } from './redis-info.js'
import { allVariants } from './variants.js'

/** Where a profile node's code lives: a package, this plugin (dist/), Node's own, or V8's pseudo-nodes. */
function owner (url, functionName) {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)'
  const modules = url.lastIndexOf('node_modules/')
  if (modules !== -1) {
    const rest = url.slice(modules + 'node_modules/'.length).split('/')
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]
  }
  if (url.includes('/dist/')) return 'rate-guard (dist/)'
  if (url.startsWith('node:')) return 'node internals'
  if (url.includes('/bench/')) return 'bench server'
  return url
}

/** Self and total time by owner and by function, in shares of the sampled time. */
export function summarize (profile) {
  const byId = new Map(profile.nodes.map(node => [node.id, node]))
  const self = new Map()
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0)
  const owners = new Map()
  const functions = new Map()
  const inclusive = new Map()
  const walk = (node, stack) => {
    const { functionName, url, lineNumber } = node.callFrame
    const name = `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/(dist|bench)\//, '$1/')}:${lineNumber + 1}`
    const mine = self.get(node.id) ?? 0
    const who = owner(url, functionName)
    owners.set(who, (owners.get(who) ?? 0) + mine)
    functions.set(name, (functions.get(name) ?? 0) + mine)
    // Inclusive: a function counted once per sample however deep it recurses.
    const fresh = !stack.has(name)
    if (fresh) stack.add(name)
    let sub = mine
    for (const child of node.children ?? []) sub += walk(byId.get(child), stack)
    if (fresh) {
      inclusive.set(name, (inclusive.get(name) ?? 0) + sub)
      stack.delete(name)
    }
    return sub
  }
  walk(profile.nodes[0], new Set())
  const top = (map, n) => [...map].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, us]) => ({ name, share: us / total }))
  return { sampledMs: total / 1000, owners: top(owners, 20), self: top(functions, 30), inclusive: top(inclusive, 30) }
}

async function main () {
  const [only = 'rate-guard sliding-log', scenario = 'allowed', seconds = '5'] = process.argv.slice(2)
  const dist = new URL('../dist/algorithms/index.js', import.meta.url)
  const algorithms = await import(dist).then(m => m.ALGORITHMS, () => null)
  const variant = allVariants(algorithms).find(v => v.id === only) ?? allVariants(algorithms).find(v => v.id.includes(only))
  if (variant === undefined) throw new Error(`no variant matches ${only}`)
  if (!(scenario in SCENARIOS)) throw new Error(`unknown scenario ${scenario}`)
  const dir = fileURLToPath(new URL('./results/', import.meta.url))
  mkdirSync(dir, { recursive: true })
  const before = new Set(readdirSync(dir))
  const pin = pinning()
  const ownRedis = process.env.BENCH_REDIS === 'start' ? await startRedis(pin) : null
  const redisUrl = ownRedis?.url ?? (process.env.REDIS_URL || 'redis://127.0.0.1:6379')
  const redis = new Redis(redisUrl)
  const nameSpace = `bench:profile:${process.pid}:`
  const server = await startServer({ variant, redisUrl, nameSpace }, pin, ['--cpu-prof', '--cpu-prof-dir', dir])
  const load = startLoad(pin)
  try {
    const prefix = `p-${scenario}-`
    const { kind } = SCENARIOS[scenario]
    if (kind === 'banned') await server.ask({ type: 'ban', keys: bannedKeys(prefix) }, 'banned')
    if (kind === 'hot' || kind === 'mixed') await server.ask({ type: 'inject', url: '/', key: key.hot(prefix), count: MAX + 1 }, 'injected')
    await load.ask({ type: 'start', port: server.port, plan: { scenario, prefix }, connections: 100 }, 'started')
    await sleep(Number(seconds) * 1000)
    const result = await load.ask({ type: 'stop' }, 'result')
    console.error(`${variant.id}, ${scenario}: ${Math.round(result.rps)} req/s over ${seconds} s (${pin.note})`)
  } finally {
    load.child.send({ type: 'exit' })
    await stopServer(server)
    await deleteKeys(redis, nameSpace)
    await redis.quit()
    await ownRedis?.stop()
  }
  const file = readdirSync(dir).find(name => name.endsWith('.cpuprofile') && !before.has(name))
  if (file === undefined) throw new Error('the server wrote no profile')
  const summary = summarize(JSON.parse(readFileSync(new URL(file, `file://${dir}`), 'utf8')))
  const pct = (share) => `${(share * 100).toFixed(1).padStart(5)}%`
  console.log(`Profile: ${dir}${file} (${summary.sampledMs.toFixed(0)} ms sampled, warm-up included)\n\nSelf time by owner:`)
  for (const { name, share } of summary.owners) console.log(`  ${pct(share)}  ${name}`)
  console.log('\nSelf time by function:')
  for (const { name, share } of summary.self) console.log(`  ${pct(share)}  ${name}`)
  console.log('\nTotal (inclusive) time by function:')
  for (const { name, share } of summary.inclusive) console.log(`  ${pct(share)}  ${name}`)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
