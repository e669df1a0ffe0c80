// Spawns real `redis-server` processes on loopback for tests.
// Readiness and exit are awaited through events (the "Ready to accept
// connections" log line, the child's 'exit' event), never through sleeps.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** Anything with tap's `teardown`: the root `t` or any subtest. */
export interface Teardownable {
  teardown (fn: () => unknown): void
}

export interface RedisProcess {
  readonly url: string
  readonly host: string
  readonly port: number
  /** pid of the current process; changes after `restart()`. */
  readonly pid: number
  /** SIGTERM, then SIGKILL if it has not exited after 5s; resolves on 'exit'. */
  stop (): Promise<void>
  /** SIGKILL (a crash); resolves on 'exit'. */
  kill (): Promise<void>
  /** SIGSTOP: the port still accepts connections but nothing is answered. */
  freeze (): void
  /** SIGCONT: answers everything that queued up while frozen. */
  thaw (): void
  /** Start again on the same port (stops the running one first). */
  restart (): Promise<void>
}

export const HOST = '127.0.0.1'
const READY_LINE = 'Ready to accept connections'
const READY_DEADLINE_MS = 10_000
const STOP_GRACE_MS = 5_000
const PORT_ATTEMPTS = 5
const REDIS_SERVER = 'redis-server'

export const HOW_TO_GET_REDIS =
  'Tests need a real Redis. Install redis-server (Debian/Ubuntu: `apt-get install -y redis-server`, ' +
  'macOS: `brew install redis`) so it is on PATH, or set REDIS_URL=redis://host:port to use a running one.'

// Every child still alive, so a crashing test file does not leave servers behind.
const live = new Set<ChildProcess>()
const dirs = new Set<string>()
let exitHookInstalled = false

function installExitHook (): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const child of live) child.kill('SIGKILL')
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  })
}

/** A port that was free on loopback a moment ago (the OS picked it). */
export async function freePort (): Promise<number> {
  const server = createServer()
  server.listen(0, HOST)
  await once(server, 'listening')
  const address = server.address()
  server.close()
  await once(server, 'close')
  if (address === null || typeof address === 'string') throw new Error('could not read the port of a loopback listener')
  return address.port
}

function exited (child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null
}

async function waitExit (child: ChildProcess): Promise<void> {
  if (exited(child)) return
  await once(child, 'exit')
}

class StartError extends Error {
  constructor (message: string, readonly portTaken: boolean) {
    super(message)
  }
}

/**
 * Spawn one redis-server and resolve once it logs that it accepts
 * connections. Rejects (and kills it) if it exits first, fails to spawn,
 * or stays silent past the deadline.
 */
async function spawnReady (bin: string, port: number, dir: string, extraArgs: readonly string[]): Promise<ChildProcess> {
  const args = [
    '--port', String(port),
    '--bind', HOST,
    '--save', '',
    '--appendonly', 'no',
    '--dir', dir,
    '--daemonize', 'no',
    '--logfile', '',
    ...extraArgs
  ]
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  // Keep the last lines for error messages, and keep draining the pipes for
  // the whole life of the process so a chatty server never blocks on a full pipe.
  const tail: string[] = []
  const remember = (chunk: Buffer): void => {
    tail.push(...chunk.toString('utf8').split('\n').filter(Boolean))
    tail.splice(0, Math.max(0, tail.length - 20))
  }
  child.stderr?.on('data', remember)
  // After start-up, errors (e.g. a signal to a process already gone) are
  // only worth a line in the diagnostics, never an unhandled 'error' crash.
  child.on('error', (err) => { tail.push(String(err)) })

  return await new Promise<ChildProcess>((resolve, reject) => {
    let seen = ''
    const fail = (err: Error): void => {
      cleanup()
      child.kill('SIGKILL')
      reject(err)
    }
    const onData = (chunk: Buffer): void => {
      remember(chunk)
      // Only the unfinished last line needs to survive between chunks.
      seen = (seen + chunk.toString('utf8')).slice(-4096)
      if (seen.includes(READY_LINE)) {
        cleanup()
        resolve(child)
      }
    }
    const onError = (err: NodeJS.ErrnoException): void => {
      fail(err.code === 'ENOENT'
        ? new Error(bin === REDIS_SERVER ? `redis-server was not found on PATH. ${HOW_TO_GET_REDIS}` : `${bin} was not found`)
        : new Error(`could not spawn ${bin}: ${err.message}`))
    }
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
      const log = tail.join('\n')
      cleanup()
      reject(new StartError(
        `redis-server on ${HOST}:${port} exited before it was ready (code ${code}, signal ${signal}):\n${log}`,
        /address already in use/i.test(log)
      ))
    }
    const timer = setTimeout(() => {
      fail(new Error(`redis-server on ${HOST}:${port} did not log "${READY_LINE}" within ${READY_DEADLINE_MS}ms:\n${tail.join('\n')}`))
    }, READY_DEADLINE_MS)
    const cleanup = (): void => {
      clearTimeout(timer)
      child.stdout?.off('data', onData)
      child.stdout?.on('data', remember)
      child.off('error', onError)
      child.off('exit', onExit)
    }
    child.stdout?.on('data', onData)
    child.once('error', onError)
    child.once('exit', onExit)
  })
}

export interface ServerBinary {
  /** The path of a redis-server executable (Valkey's, another Redis's); `redis-server` from PATH without it. */
  bin?: string
}

/**
 * Always start a dedicated redis-server (for tests that kill, freeze,
 * restart or configure it). `extraArgs` are appended to the command line,
 * e.g. `['--maxmemory', '1mb']`. Stopped by `t.teardown`.
 */
export async function startRedisServer (t: Teardownable, extraArgs: readonly string[] = [], { bin = REDIS_SERVER }: ServerBinary = {}): Promise<RedisProcess> {
  installExitHook()
  const dir = mkdtempSync(join(tmpdir(), 'rate-guard-redis-'))
  dirs.add(dir)

  let port = 0
  let child: ChildProcess | undefined
  // The free port can be taken by someone else between our probe and
  // redis-server's bind (parallel test files): pick another one then.
  for (let attempt = 1; child === undefined; attempt++) {
    port = await freePort()
    try {
      child = await spawnReady(bin, port, dir, extraArgs)
    } catch (err) {
      if (!(err instanceof StartError && err.portTaken && attempt < PORT_ATTEMPTS)) {
        dirs.delete(dir)
        rmSync(dir, { recursive: true, force: true })
        throw err
      }
    }
  }

  let current: ChildProcess = child
  live.add(current)
  current.once('exit', () => live.delete(current))

  const signalAndWait = async (signal: NodeJS.Signals): Promise<void> => {
    const proc = current
    if (exited(proc)) return
    proc.kill(signal)
    // A stopped process only acts on SIGTERM once it runs again.
    if (signal !== 'SIGKILL') proc.kill('SIGCONT')
    await waitExit(proc)
  }

  const redis: RedisProcess = {
    url: `redis://${HOST}:${port}`,
    host: HOST,
    port,
    get pid () {
      if (current.pid === undefined) throw new Error('redis-server has no pid')
      return current.pid
    },
    async stop () {
      const proc = current
      if (exited(proc)) return
      const escalate = setTimeout(() => proc.kill('SIGKILL'), STOP_GRACE_MS)
      try {
        await signalAndWait('SIGTERM')
      } finally {
        clearTimeout(escalate)
      }
    },
    async kill () {
      await signalAndWait('SIGKILL')
    },
    freeze () {
      current.kill('SIGSTOP')
    },
    thaw () {
      current.kill('SIGCONT')
    },
    async restart () {
      await redis.stop()
      const next = await spawnReady(bin, port, dir, extraArgs)
      current = next
      live.add(next)
      next.once('exit', () => live.delete(next))
    }
  }

  t.teardown(async () => {
    await redis.stop()
    dirs.delete(dir)
    rmSync(dir, { recursive: true, force: true })
  })
  return redis
}
