// A server that locks per key (Upstash) runs a script under its global lock, no other command meanwhile, unless
// the script's shebang asks for `allow-key-locking` (issue 32). The plugin asks only a server found at start to
// take the flag: Redis refuses it, and keeps its scripts as they are; a proxy that takes the flag on Redis's
// behalf (test/helpers/flag-proxy.ts) stands for a server that has it, Redis running what it is sent. Each
// script's variant keeps every line's number, so an error still names its file's line.
import t from 'tap'
import type { Redis } from 'ioredis'
import { BAN_SCRIPT, CROSS_SLOT_SCRIPTS, KEY_LOCKING, LEAN_SCRIPTS, LEASE_SCRIPT, SCRIPTS, keyLocked } from '../lib/stores/scripts.js'
import type { Script } from '../lib/stores/scripts.js'
import { startFlagProxy } from './helpers/flag-proxy.js'
import { client, ready, startRedisServer } from './helpers/redis.js'
import { everyPathApp, exactEverywhere } from './helpers/every-path.js'

/** The commands of ours defined on `redis` (ioredis puts each on the client, and a Buffer twin beside it). */
const ours = (redis: Redis): string[] => Object.keys(redis).filter(name => name.startsWith('rateGuard') && !name.endsWith('Buffer'))

t.test('a key-locking variant: the shebang for its first line (a comment), every other line as it was', async t => {
  const scripts: Script[] = [...Object.values(SCRIPTS), ...Object.values(LEAN_SCRIPTS).map(script => script!), BAN_SCRIPT, LEASE_SCRIPT]
  for (const script of scripts) {
    const variant = keyLocked(script)
    const [first, ...rest] = variant.lua.split('\n')
    t.equal(first, KEY_LOCKING, `${script.command}: the shebang is line 1`)
    t.strictSame(rest, script.lua.split('\n').slice(1), `${script.command}: every other line where it was`)
    t.equal(variant.parts, script.parts, `${script.command}: so its files start where they did`)
    t.match(variant.command, /^rateGuard[\w]+KeyLocking_[0-9a-f]{8}$/)
    t.not(variant.command.replace(/KeyLocking_\w+$/, ''), script.command, 'a command of its own name')
    t.equal(keyLocked(script), variant, 'made once')
  }
  t.throws(() => keyLocked(CROSS_SLOT_SCRIPTS['sliding-log']), /does not open with a comment line/, 'a Cluster\'s cross-slot variant has a shebang of its own')
})

t.test('Redis refuses the flag: found at start, the scripts as they are, nothing said', async t => {
  const server = await startRedisServer(t)
  const redis = await ready(client(t, server.url))
  await t.rejects(redis.eval(`${KEY_LOCKING}\nreturn 1`, 0), /flag/i, 'this Redis refuses allow-key-locking')
  const { app, logs } = await everyPathApp(t, { redis }, 'info')
  t.strictSame(logs.filter(line => line.msg.includes('allow-key-locking')), [])
  await exactEverywhere(t, app)
  t.ok(ours(redis).length >= 10 && ours(redis).every(name => !name.includes('KeyLocking')), `no variant defined: ${ours(redis).join(', ')}`)
})

t.test('a server that takes the flag: said once, every script asks for it, every path limits exactly, on either clock', async t => {
  const server = await startRedisServer(t)
  const proxy = await startFlagProxy(t, server.port, 'allow-key-locking')
  for (const clock of ['redis', 'app'] as const) {
    const redis = await ready(client(t, proxy.url))
    t.equal(await redis.eval(`${KEY_LOCKING}\nreturn 1`, 0), 1, 'the flag taken (by the proxy)')
    const before = proxy.taken
    const { app, logs } = await everyPathApp(t, { redis, clock }, 'info')
    t.match(logs.filter(line => line.msg.includes('allow-key-locking')), [{ level: 30, msg: /locks per key \(as Upstash does\)/ }], `${clock}: said once`)
    await exactEverywhere(t, app)
    const defined = ours(redis)
    t.ok(defined.length >= 10 && defined.every(name => name.includes('KeyLocking')), `${clock}: only variants defined: ${defined.join(', ')}`)
    // Every call of a script goes as EVAL through this proxy (its helper says why), each asking: at least the 4
    // lean scripts, the 4 general ones, the lease and the ban scripts, and the probe.
    t.ok(proxy.taken - before >= 11, `${clock}: the flag asked ${proxy.taken - before} times`)
  }
})
