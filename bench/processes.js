// Child processes of the bench: each server variant and the load generator, pinned with `taskset` when the
// machine allows, and a small request/reply over their IPC channel.
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { availableParallelism } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { fileURLToPath } from 'node:url'

/**
 * Where each process runs: on 2 cores or more with `taskset`, the server on CPU 0 and the load generator on
 * CPU 1 (Redis and the runner are not pinned); otherwise nothing is pinned.
 */
export function pinning () {
  const cores = availableParallelism()
  const taskset = cores >= 2 && spawnSync('taskset', ['-c', '0', 'true']).status === 0
  return taskset
    ? { taskset: true, server: '0', load: '1', note: 'server pinned to CPU 0, load generator to CPU 1 (taskset -c); the runner not pinned' }
    : { taskset: false, note: cores < 2 ? 'one CPU: nothing pinned' : 'taskset not available: nothing pinned' }
}

function start (script, args, cpu, nodeArgs = []) {
  const path = fileURLToPath(new URL(script, import.meta.url))
  const node = [process.execPath, ...nodeArgs, path, ...args]
  const command = cpu === undefined ? node : ['taskset', '-c', cpu, ...node]
  const child = spawn(command[0], command.slice(1), { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const waiting = []
  const early = []
  child.on('message', (msg) => {
    const i = waiting.findIndex(w => w.type === msg.type)
    if (i === -1) early.push(msg)
    else waiting.splice(i, 1)[0].resolve(msg)
  })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  exited.then(({ code, signal }) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`${script} exited (${code ?? signal}) while waiting for ${w.type}`))
  })
  /** The next message of `type` (or one already received). */
  const next = (type) => {
    const i = early.findIndex(msg => msg.type === type)
    if (i !== -1) return Promise.resolve(early.splice(i, 1)[0])
    return new Promise((resolve, reject) => {
      if (child.exitCode !== null || child.signalCode !== null) reject(new Error(`${script} is not running`))
      else waiting.push({ type, resolve, reject })
    })
  }
  return {
    child,
    exited,
    next,
    /** Sends `msg` and waits for the reply of type `type`. */
    ask (msg, type) {
      const reply = next(type)
      child.send(msg)
      return reply
    }
  }
}

/** `nodeArgs`: options for node itself, such as `--cpu-prof`. */
export async function startServer (config, pin, nodeArgs = []) {
  const server = start('./server.js', [JSON.stringify(config)], pin.taskset ? pin.server : undefined, nodeArgs)
  const ready = await Promise.race([server.next('ready'), server.exited.then(({ code }) => { throw new Error(`the ${config.variant.id} server exited (${code}) before it was ready`) })])
  return { ...server, port: ready.port }
}

export async function stopServer (server) {
  await server.ask({ type: 'close' }, 'closed')
  await server.exited
}

export function startLoad (pin) {
  return start('./load.js', [], pin.taskset ? pin.load : undefined)
}

/** Whether nothing listens on `port` of the loopback now. */
export async function portIsFree (port) {
  const server = createServer()
  const free = await new Promise(resolve => {
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => resolve(true))
  })
  if (free) await new Promise(resolve => server.close(resolve))
  return free
}

async function freePort () {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address()
  server.close()
  return port
}

/**
 * A client of the redis-server just started on `port`, once it takes a connection: up to `tries` more attempts
 * `waitMs` apart (fewer once `gaveUp()` says the server is gone), or the last attempt's error.
 */
export async function connectWhenUp (port, { tries = 100, waitMs = 100, gaveUp = () => false } = {}) {
  const client = new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  // Refused while the server starts: each attempt's error is connect()'s.
  client.on('error', () => {})
  for (let i = 0; ; i++) {
    try {
      await client.connect()
      return client
    } catch (err) {
      if (i === tries || gaveUp()) throw err
      await sleep(waitMs)
    }
  }
}

/**
 * A redis-server of the bench's own (`BENCH_REDIS=start`), without persistence, pinned with the load generator
 * (so it never takes the server's core). Resolves { url, stop }.
 */
export async function startRedis (pin) {
  const port = await freePort()
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']
  const command = pin.taskset ? ['taskset', '-c', pin.load, 'redis-server', ...args] : ['redis-server', ...args]
  const child = spawn(command[0], command.slice(1), { stdio: 'ignore' })
  const url = `redis://127.0.0.1:${port}`
  try {
    const probe = await connectWhenUp(port, { tries: 50, waitMs: 100, gaveUp: () => child.exitCode !== null })
    await probe.ping()
    probe.disconnect()
  } catch (err) {
    child.kill()
    throw new Error(`redis-server did not start on port ${port}: ${err.message}`)
  }
  return {
    url,
    note: `its own redis-server on port ${port}${pin.taskset ? `, pinned to CPU ${pin.load} with the load generator` : ''}`,
    async stop () {
      child.kill()
      await once(child, 'exit')
    }
  }
}
