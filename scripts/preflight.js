// Before `npm test` (and first in `.ci/run`): what the suite needs beyond Node and npm.
//   - redis-server on PATH. REDIS_URL can name the Redis most tests share, but the tests that stop, freeze or
//     configure Redis (the Cluster, the faults, the app clock) start servers of their own, so the suite needs
//     redis-server whatever REDIS_URL says.
//   - Debian's chromium for the operator page's browser test (CHROMIUM_PATH, else /usr/bin/chromium).
//   - luac5.4 for the scripts' Lua 5.4 check (that check is skipped without it, and said so).
// What is missing is installed with apt-get when this machine can (apt-get on PATH, and root or sudo without a
// password), as on a fresh Debian machine; otherwise the run stops in its first second naming the one command
// that installs it. RATE_GUARD_TEST_INSTALL=no refuses the install. (The harness can also start the shared
// Redis in a container when testcontainers is installed and an engine answers: docs/testing.md.)
//   - Valkey 8.0.1 and Redis 7.4.1 for test/servers/ (scripts/servers.js finds them): no Debian package has
//     them, so nothing installs them; when they are missing the run says so here, in its first seconds, with
//     how to get them, and test/servers/ fails with the same words.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'
import { findServers } from './servers.js'

const onPath = (name) => (process.env.PATH ?? '').split(delimiter).some(dir => dir !== '' && existsSync(join(dir, name)))
const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

/** What the suite needs; `required: false` is a check the suite skips (and says so) without it. */
const NEEDS = [
  { what: 'redis-server', debian: 'redis-server', why: 'the suite starts real Redis processes', else: '', required: true, present: () => onPath('redis-server') },
  { what: `chromium at ${chromium}`, debian: 'chromium', why: "the operator page's browser test", else: ', or set CHROMIUM_PATH', required: true, present: () => existsSync(chromium) },
  { what: 'luac5.4', debian: 'lua5.4', why: "the scripts' Lua 5.4 check, skipped without it", else: '', required: false, present: () => onPath('luac5.4') }
]

const lacking = () => NEEDS.filter(need => !need.present())

/** How this process can run apt-get: as root, through sudo without a password, or not at all. */
function installer () {
  if (process.env.RATE_GUARD_TEST_INSTALL === 'no' || !onPath('apt-get')) return null
  if (process.getuid?.() === 0) return []
  if (onPath('sudo') && spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0) return ['sudo', '-n']
  return null
}

/** Runs apt-get with its output shown; false (and why, said) when it fails. */
function aptGet (prefix, args) {
  const [command, ...rest] = [...prefix, 'apt-get', ...args]
  const run = spawnSync(command, rest, { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } })
  if (run.status === 0) return true
  console.error(`npm test: ${[command, ...rest].join(' ')} failed (${run.error?.message ?? `exit ${run.status ?? run.signal}`})`)
  return false
}

let missing = lacking()
const prefix = missing.length > 0 ? installer() : null
if (prefix !== null) {
  const packages = missing.map(need => need.debian)
  console.error(`npm test: installing what this machine lacks with apt-get: ${packages.join(' ')} (RATE_GUARD_TEST_INSTALL=no refuses)`)
  if (aptGet(prefix, ['update', '-qq'])) aptGet(prefix, ['install', '-y', '-qq', '--no-install-recommends', ...packages])
  missing = lacking()
}
for (const need of missing.filter(need => !need.required)) console.error(`npm test: no ${need.what} (${need.why}): sudo apt-get install -y ${need.debian}`)
const servers = findServers()
if ('missing' in servers) console.error(`npm test: test/servers/ will fail: ${servers.missing}`)
else console.error(`npm test: test/servers/ runs ${servers.servers.map(server => server.name).join(' and ')} from ${servers.dir}`)
const blocking = missing.filter(need => need.required)
if (blocking.length > 0) {
  const lines = blocking.map(need => `  - ${need.what} (${need.why}): sudo apt-get install -y ${need.debian}${need.else}`)
  console.error(`npm test needs:\n${lines.join('\n')}\nOne command installs everything the suite uses, then run npm test again: sudo apt-get install -y ${NEEDS.map(need => need.debian).join(' ')}`)
  process.exit(1)
}
