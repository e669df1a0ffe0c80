// The Redis-compatible servers test/servers/ runs its Redis-facing checks against, each test body once per
// server, on processes started from that server's own binary (scripts/servers.js finds them):
//
//   eachServer(t, 'what it proves', async (t, server) => {
//     const redis = await startServer(t, server)            // a redis-server of that binary, checked to be it
//     const cluster = await startCluster(t, { bin: server.bin }); await isServer(t, node.redis, server)
//   })
//
// Missing binaries fail each test with how to get them (never a skip). SERVERS_UNDER_TEST picks some by
// folder (`valkey-8.0.1,redis-7.4.1`, the default), and `path` is the redis-server on PATH (Debian's 7.0),
// so the same bodies can be run there too.
import { spawnSync } from 'node:child_process'
import type { Redis } from 'ioredis'
import type { Test } from 'tap'
import { findServers } from '../../scripts/servers.js'
import { client } from './redis.js'
import { startRedisServer } from './redis-server.js'
import type { RedisProcess } from './redis-server.js'

export interface ServerUnderTest {
  /** As the server names itself: `Valkey 8.0.1`, `Redis 7.4.1`. */
  readonly name: string
  /** The path of its redis-server executable. */
  readonly bin: string
}

const PATH_SERVER = 'path'

/** The servers picked (SERVERS_UNDER_TEST), or why they cannot be had. */
export function serversUnderTest (): ServerUnderTest[] | string {
  const wanted = (process.env.SERVERS_UNDER_TEST ?? '').split(',').map(name => name.trim()).filter(Boolean)
  const picked: ServerUnderTest[] = []
  if (wanted.includes(PATH_SERVER)) picked.push({ name: nameOf(spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout ?? ''), bin: 'redis-server' })
  const shared = wanted.filter(name => name !== PATH_SERVER)
  if (wanted.length > 0 && shared.length === 0) return picked
  const found = findServers()
  if ('missing' in found) return found.missing
  const unknown = shared.filter(folder => !found.servers.some(server => server.folder === folder))
  if (unknown.length > 0) return `SERVERS_UNDER_TEST names ${unknown.join(', ')}: not one of ${found.servers.map(s => s.folder).join(', ')} or ${PATH_SERVER}`
  return [...picked, ...found.servers.filter(server => shared.length === 0 || shared.includes(server.folder))]
}

/** `Valkey 8.0.1` from `Valkey server v=8.0.1 sha=…`. */
function nameOf (version: string): string {
  const match = /^(\S+) server v=(\S+)/.exec(version)
  return match === null ? `unknown (${version.trim()})` : `${match[1]} ${match[2]}`
}

/** The name a running server gives itself in INFO server: Valkey by `valkey_version`, Redis by `redis_version`. */
export async function nameInInfo (redis: Redis): Promise<string> {
  const info = String(await redis.info('server'))
  const field = (name: string): string | undefined => new RegExp(`^${name}:(\\S+)`, 'm').exec(info)?.[1]
  const valkey = field('valkey_version')
  return valkey !== undefined ? `Valkey ${valkey}` : `Redis ${field('redis_version') ?? '(no version)'}`
}

/** Fails `t` unless the server behind `redis` is `server` (so a wrong binary cannot pass as another). */
export async function isServer (t: Test, redis: Redis, server: ServerUnderTest): Promise<void> {
  t.equal(await nameInInfo(redis), server.name, `INFO server: this is ${server.name}`)
}

/** Runs `body` once per server under test, each as a subtest named after it; fails at once without them. */
export function eachServer (t: Test, what: string, body: (t: Test, server: ServerUnderTest) => Promise<void>): void {
  const servers = serversUnderTest()
  if (typeof servers === 'string') {
    t.test(what, async t => { t.fail(servers) })
    return
  }
  for (const server of servers) t.test(`${server.name}: ${what}`, async t => { await body(t, server) })
}

/** A redis-server of `server`'s binary, stopped at `t`'s teardown, checked to be that server. */
export async function startServer (t: Test, server: ServerUnderTest, extraArgs: readonly string[] = []): Promise<RedisProcess> {
  const proc = await startRedisServer(t, extraArgs, { bin: server.bin })
  const redis = client(t, proc.url, { maxRetriesPerRequest: 0 })
  await isServer(t, redis, server)
  redis.disconnect()
  return proc
}
