// Redis in a container through testcontainers, tried only when a container
// engine answers a ping. `testcontainers` is not a dependency (with it, `npm
// ci` put 155 more packages, two with install scripts, on every machine,
// though most have no engine): Docker or Podman users add it with TESTCONTAINERS_INSTALL below. It
// is imported lazily, and when it is not installed the container path is
// simply not taken.
import { existsSync } from 'node:fs'
import { request, type RequestOptions } from 'node:http'
import { homedir } from 'node:os'
import { join } from 'node:path'

const PING_TIMEOUT_MS = 1_000

export interface ContainerRedis {
  host: string
  port: number
  stop (): Promise<void>
}

/** Where an engine might listen: DOCKER_HOST first, then the usual sockets. */
function candidates (): RequestOptions[] {
  const out: RequestOptions[] = []
  const dockerHost = process.env.DOCKER_HOST
  if (dockerHost !== undefined && dockerHost !== '') {
    if (dockerHost.startsWith('unix://')) {
      out.push({ socketPath: dockerHost.slice('unix://'.length) })
    } else if (dockerHost.startsWith('tcp://') && process.env.DOCKER_TLS_VERIFY === undefined) {
      const url = new URL(dockerHost.replace(/^tcp:/, 'http:'))
      out.push({ host: url.hostname, port: Number(url.port || 2375) })
    }
  }
  const sockets = ['/var/run/docker.sock', join(homedir(), '.docker', 'run', 'docker.sock')]
  const runtimeDir = process.env.XDG_RUNTIME_DIR
  if (runtimeDir !== undefined) sockets.push(join(runtimeDir, 'docker.sock'), join(runtimeDir, 'podman', 'podman.sock'))
  for (const socketPath of sockets) {
    if (existsSync(socketPath)) out.push({ socketPath })
  }
  return out
}

async function ping (target: RequestOptions): Promise<boolean> {
  return await new Promise<boolean>((resolve) => {
    const req = request({ ...target, method: 'GET', path: '/_ping', timeout: PING_TIMEOUT_MS }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
    req.end()
  })
}

/** True when some container engine answers `GET /_ping`. */
export async function containerEngineAnswers (): Promise<boolean> {
  for (const target of candidates()) {
    if (await ping(target)) return true
  }
  return false
}

/** The package the container path needs, named in one place for the messages. */
export const TESTCONTAINERS = 'testcontainers'
/**
 * How to add it. The major is pinned: testcontainers 12 brings undici 8, which
 * does not load on Node 20 (12.0.4 fails at import on 20.20).
 */
export const TESTCONTAINERS_INSTALL = 'npm install --no-save testcontainers@^11.14.0'

// The few parts of testcontainers used here, typed locally: the package is not
// installed by `npm ci`, so its own types cannot be imported.
interface StartedContainer {
  getHost (): string
  getMappedPort (port: number): number
  stop (): Promise<unknown>
}
interface ContainerBuilder {
  withCommand (command: string[]): ContainerBuilder
  withExposedPorts (...ports: number[]): ContainerBuilder
  withWaitStrategy (strategy: unknown): ContainerBuilder
  start (): Promise<StartedContainer>
}
interface Testcontainers {
  GenericContainer: new (image: string) => ContainerBuilder
  Wait: { forLogMessage (message: string): unknown }
}

/**
 * The testcontainers module, or undefined when the package is not installed.
 * A package that is installed but fails to load (a missing dependency of its
 * own, a Node it does not support) throws: that is not "not installed".
 * `specifier` is for the harness's own tests.
 */
export async function loadTestcontainers (specifier = TESTCONTAINERS): Promise<Testcontainers | undefined> {
  try {
    import.meta.resolve(specifier)
  } catch (err) {
    // Told by the message: the error's code (ERR_MODULE_NOT_FOUND) is lost when
    // it crosses tap's TypeScript loader, which runs on a thread of its own.
    if ((err as Error).message.startsWith(`Cannot find package '${specifier}' `)) return undefined
    throw err
  }
  let loaded: Partial<Testcontainers>
  try {
    loaded = await import(specifier)
  } catch (err) {
    throw new Error(`${specifier} does not load on Node ${process.version}: ${(err as Error).message}`)
  }
  if (typeof loaded.GenericContainer !== 'function' || typeof loaded.Wait?.forLogMessage !== 'function') {
    throw new Error(`${specifier} has no GenericContainer and Wait.forLogMessage: not the testcontainers API`)
  }
  return loaded as Testcontainers
}

/**
 * Start `redis:7-alpine` (or REDIS_IMAGE) and wait for its ready log line;
 * undefined when testcontainers is not installed.
 */
export async function startContainerRedis (specifier = TESTCONTAINERS): Promise<ContainerRedis | undefined> {
  const testcontainers = await loadTestcontainers(specifier)
  if (testcontainers === undefined) return undefined
  const { GenericContainer, Wait } = testcontainers
  const container = await new GenericContainer(process.env.REDIS_IMAGE ?? 'redis:7-alpine')
    .withCommand(['redis-server', '--save', '', '--appendonly', 'no'])
    .withExposedPorts(6379)
    .withWaitStrategy(Wait.forLogMessage('Ready to accept connections'))
    .start()
  return {
    host: container.getHost(),
    port: container.getMappedPort(6379),
    async stop () {
      await container.stop()
    }
  }
}
