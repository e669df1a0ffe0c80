// The Redis-compatible servers the suite runs besides the redis-server on PATH (test/servers/): where their
// binaries are, and what each must say it is. Read by scripts/preflight.js, which says in the run's first
// seconds when they are missing, and by test/helpers/servers.ts, whose tests then fail with the same words.
//
// Looked for, in this order: the folder RATE_GUARD_SERVERS names; shared/servers beside the clone (as the
// project's machines and CI lay it); /work/shared/servers. Each folder holds `<folder>/redis-server`.
import { spawnSync } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** What each server is: its folder, and the first words of its `redis-server --version`. */
export const SERVERS = Object.freeze([
  Object.freeze({ name: 'Valkey 8.0.1', folder: 'valkey-8.0.1', version: 'Valkey server v=8.0.1 ', tag: 'valkey-io/valkey 8.0.1' }),
  Object.freeze({ name: 'Redis 7.4.1', folder: 'redis-7.4.1', version: 'Redis server v=7.4.1 ', tag: 'redis/redis 7.4.1' })
])

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..')
/** Where to look when RATE_GUARD_SERVERS names no folder (one it names is the only place looked). */
const PLACES = [join(REPO, '..', 'shared', 'servers'), '/work/shared/servers']

/** How to get them, in the words the preflight and the failing tests say. */
export const HOW_TO_GET_SERVERS =
  'test/servers/ runs Valkey 8.0.1 and Redis 7.4.1 besides redis-server on PATH. Name the folder that holds ' +
  'valkey-8.0.1/redis-server and redis-7.4.1/redis-server: `RATE_GUARD_SERVERS=/path/to/servers npm test` ' +
  '(the project\'s shared/servers/ is one, found by itself beside the clone or at /work/shared/servers). ' +
  'No Debian 12 package has them; each is built from its upstream tag (' +
  SERVERS.map(s => s.tag).join(', ') + ') with `make BUILD_TLS=no`, and its src/*-server copied to ' +
  '<folder>/redis-server.'

function executable (path) {
  try {
    accessSync(path, constants.X_OK)
    return true
  } catch {
    return false
  }
}

/**
 * The servers and their binaries, checked with `--version`: `{ dir, servers: [{ ...server, bin }] }`, or
 * `{ missing }`, a message naming where it looked, what was wrong and how to get them.
 */
export function findServers () {
  const named = process.env.RATE_GUARD_SERVERS
  const places = named !== undefined && named !== '' ? [resolve(named)] : PLACES
  const notes = []
  for (const dir of places) {
    const servers = SERVERS.map(server => ({ ...server, bin: join(dir, server.folder, 'redis-server') }))
    const absent = servers.filter(server => !executable(server.bin))
    if (absent.length > 0) {
      notes.push(`${dir}: no ${absent.map(server => server.bin).join(', ')}`)
      continue
    }
    const wrong = servers.map(server => ({ server, said: versionOf(server.bin) })).filter(({ server, said }) => !said.startsWith(server.version))
    if (wrong.length > 0) {
      notes.push(...wrong.map(({ server, said }) => `${server.bin} is not ${server.name}: --version says ${JSON.stringify(said)}`))
      continue
    }
    return { dir, servers }
  }
  return { missing: `Valkey 8.0.1 and Redis 7.4.1 were not found (${notes.join('; ')}). ${HOW_TO_GET_SERVERS}` }
}

function versionOf (bin) {
  const run = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 10_000 })
  return (run.stdout ?? '').trim() || String(run.error?.message ?? run.stderr ?? '').trim()
}
