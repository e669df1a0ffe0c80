// Redis in a container through testcontainers, tried only when a container
// engine answers a ping: `testcontainers` is imported lazily so machines
// without Docker/Podman never load it.
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

/** Start `redis:7-alpine` (or REDIS_IMAGE) and wait for its ready log line. */
export async function startContainerRedis (): Promise<ContainerRedis> {
  let testcontainers: typeof import('testcontainers')
  try {
    testcontainers = await import('testcontainers')
  } catch (err) {
    throw new Error(`testcontainers does not load on Node ${process.version}: ${(err as Error).message}`)
  }
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
