// One script dialect for the Redis-compatible servers people run (issue 32): Redis 6.2–8 and Valkey run Lua
// 5.1, Dragonfly Lua 5.4 and refuses a script touching a key it did not declare. So every script the plugin
// joins uses no global Lua 5.4 removed (`unpack`, `table.getn`, `setfenv`…), compiles as Lua 5.4 where
// `luac5.4` is on the machine (.ci/run installs it), and touches only the keys it was given in KEYS: every
// command the scripts run, watched with MONITOR while an app drives each path, asked of Redis itself
// (`COMMAND GETKEYS`). The Cluster's cross-slot variants are the exception, on purpose: on a Redis Cluster 7.0
// or later, under the `allow-cross-slot-keys` flag, they reach the keys of several slots their first key does
// not name (lua/cross-slot.lua); no other server is sent them.
import { spawnSync } from 'node:child_process'
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { BAN_SCRIPT, CROSS_SLOT_LEAN_SCRIPTS, CROSS_SLOT_SCRIPTS, LEAN_SCRIPTS, LEASE_SCRIPT, SCRIPTS, keyLocked } from '../lib/stores/scripts.js'
import type { Script } from '../lib/stores/scripts.js'
import { SCRIPT_COMMANDS, client, ready, startRedisServer, uniquePrefix } from './helpers/redis.js'

const ALL: Array<[string, Script]> = [
  ...Object.entries(SCRIPTS), ...Object.entries(LEAN_SCRIPTS), ...Object.entries(CROSS_SLOT_SCRIPTS).map(([a, s]) => [`cross-slot ${a}`, s] as [string, Script]),
  ...Object.entries(CROSS_SLOT_LEAN_SCRIPTS).map(([a, s]) => [`cross-slot lean ${a}`, s] as [string, Script]), ['ban', BAN_SCRIPT], ['lease', LEASE_SCRIPT],
  // Upstash's variants: every script with the shebang asking for per-key locking (lib/stores/scripts.ts keyLocked).
  ...[...Object.entries(SCRIPTS), ...Object.entries(LEAN_SCRIPTS), ['ban', BAN_SCRIPT], ['lease', LEASE_SCRIPT]].map(([a, s]) => [`key-locking ${String(a)}`, keyLocked(s as Script)] as [string, Script])
].map(([name, script]) => [name, script!] as [string, Script])

/** Globals Lua 5.4 removed (or never had in Redis's sandbox), each as it would be called. */
const REMOVED = [/\btable\.getn\b/, /\btable\.maxn\b/, /\bsetfenv\b/, /\bgetfenv\b/, /\bloadstring\b/, /\bmath\.mod\b/, /\bmath\.pow\b/, /\bstring\.gfind\b/, /(^|[^.\w])module\s*\(/]

/** The script without its comments (`--` to the end of a line), so prose naming a global is no use of it. */
const code = (lua: string): string => lua.replace(/--[^\n]*/g, '')

t.test('no global Lua 5.4 removed; unpack only as the prelude\'s local or table.unpack', async t => {
  for (const [name, { lua }] of ALL) {
    const body = code(lua)
    t.strictSame(REMOVED.filter(removed => removed.test(body)).map(String), [], `${name}: none of 5.1's removed globals`)
    const local = body.indexOf('local unpack = table.unpack or unpack')
    const bare = [...body.matchAll(/(^|[^.\w])unpack\s*\(/g)].map(match => match.index)
    t.ok(bare.every(at => local !== -1 && at > local), `${name}: unpack( only after the prelude's local unpack`)
  }
})

const luac = spawnSync('luac5.4', ['-v'], { encoding: 'utf8' })
t.test('every script compiles as Lua 5.4 (luac5.4 -p)', { skip: luac.error === undefined ? false : 'luac5.4 is not on this machine (.ci/run installs lua5.4)' }, async t => {
  for (const [name, { lua }] of ALL) {
    // A script's shebang (the cross-slot or key-locking flag) is the server's: Lua skips a first line starting with '#' too.
    const compiled = spawnSync('luac5.4', ['-p', '-'], { input: lua, encoding: 'utf8' })
    t.equal(compiled.status, 0, `${name}: ${compiled.stderr.trim() || 'compiles'}`)
  }
})

t.test('every command a script runs touches only the keys the call declared in KEYS', async t => {
  const server = await startRedisServer(t)
  const redis = await ready(client(t, server.url))
  const monitor = await redis.monitor()
  t.teardown(() => monitor.disconnect())
  // The commands of each script call: its declared keys (from the FCALL, EVALSHA or EVAL line), then what it ran.
  const calls: Array<{ keys: Set<string>, ran: string[][] }> = []
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    const command = args[0]!.toLowerCase()
    if (SCRIPT_COMMANDS.includes(command)) calls.push({ keys: new Set(args.slice(3, 3 + Number(args[2]))), ran: [] })
    else if (source === 'lua') calls.at(-1)?.ran.push(args)
  })

  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: server.url, nameSpace: uniquePrefix(), max: 2, timeWindow: '1 minute', ban: { threshold: 2, duration: '1 minute' }, standardHeaders: 'draft-10' })
  for (const algorithm of ALGORITHMS) {
    app.get(`/${algorithm}`, { config: { rateLimit: { algorithm } } }, async () => 'ok')
    app.get(`/${algorithm}/general`, { config: { rateLimit: { algorithm, cost: 2, max: 3, continueExceeding: true, ban: false, limits: undefined } } }, async () => 'ok')
    app.get(`/${algorithm}/two`, { config: { rateLimit: { algorithm, ban: false, limits: [{ max: 2, timeWindow: '1 minute' }, { max: 5, timeWindow: '1 hour' }], countWhen: () => false } } }, async () => 'ok')
  }
  app.get('/slots', { config: { rateLimit: { concurrency: { max: 1 }, ban: false } } }, async () => 'ok')
  await app.ready()
  for (const algorithm of ALGORITHMS) {
    for (const path of [`/${algorithm}`, `/${algorithm}/general`, `/${algorithm}/two`]) {
      for (let i = 0; i < 4; i++) await app.inject({ url: path, remoteAddress: `192.0.2.${i % 2}` })
    }
    await app.rateGuard.setOverride('198.51.100.1', { route: `GET /${algorithm}`, max: 1, timeWindow: '1 minute', ttl: 60_000 })
    await app.inject({ url: `/${algorithm}`, remoteAddress: '198.51.100.1' })
    await app.rateGuard.peek('198.51.100.1', { route: `GET /${algorithm}` })
  }
  await Promise.all([app.inject({ url: '/slots', remoteAddress: '203.0.113.5' }), app.inject({ url: '/slots', remoteAddress: '203.0.113.5' })])
  await app.rateGuard.peek('203.0.113.5', { route: 'GET /slots' })
  await app.rateGuard.ban('203.0.113.9', '1 minute')
  // The last call's commands reach MONITOR before its reply does: one more command, and all have arrived.
  await redis.ping()

  const undeclared: string[] = []
  let commands = 0
  for (const { keys, ran } of calls) {
    for (const args of ran) {
      commands++
      const touched = await redis.call('COMMAND', 'GETKEYS', ...args).catch(() => []) as string[]
      for (const key of touched) if (!keys.has(key)) undeclared.push(`${args.join(' ')}: ${key}`)
    }
  }
  t.ok(calls.length > 40 && commands > 200, `${calls.length} script calls, ${commands} commands watched`)
  t.strictSame(undeclared, [], 'no key a call did not declare')
})
