// The rule that takes a connection for dead (lib/silence.ts), alone: silence is measured from the first
// command sent since Redis was last heard from, and judged only when a deadline is missed; what is done then
// (lib/stores/stalled.ts), against a real Redis; and the reasons the trouble channel gives.
import t from 'tap'
import { Silence, silenceAfter } from '../lib/silence.js'
import { DeadlineError, InvalidReplyError, LateRedisError, SilentConnectionError } from '../lib/errors.js'
import { troubleReason } from '../lib/trouble.js'
import { onSilence } from '../lib/stores/stalled.js'
import type { RedisLike } from '../lib/types.js'
import { client, ready, startRedisServer, until } from './helpers/redis.js'
import { matchList } from './helpers/match-list.js'

t.test('silent once commands waited afterMs with nothing heard; then the watch starts over', async t => {
  let silent = 0
  let quiet = (): boolean => true
  const silence = new Silence(1000, isQuiet => { silent++; quiet = isQuiet })
  silence.missed(5000)
  t.equal(silent, 0, 'nothing sent: no silence')
  silence.sent(0)
  silence.sent(400)
  silence.missed(999)
  t.equal(silent, 0, 'not yet afterMs since the first unanswered command')
  silence.missed(1000)
  t.equal(silent, 1, 'afterMs since the first unanswered command: silent')
  t.ok(quiet(), 'and still quiet: nothing heard since')
  silence.missed(3000)
  t.equal(silent, 1, 'said once; the watch starts over with the next command')
  silence.sent(3000)
  silence.heard()
  t.notOk(quiet(), 'heard from after it was said: no longer quiet (what the fresh-connection check looks at)')
  silence.missed(9000)
  t.equal(silent, 1, 'Redis heard from (a late reply counts): no silence')
  silence.sent(9000)
  silence.missed(10_000)
  t.equal(silent, 2, 'silent again, measured from the first command after the last reply')
})

t.test('the wait is well past any deadline', async t => {
  t.equal(silenceAfter(100), 1000)
  t.equal(silenceAfter(2000), 10_000)
})

t.test('a lent client is never cut, and the advice is given once per interval', async t => {
  const said: string[] = []
  const log = { warn: (_obj: unknown, msg: string) => { said.push(msg) } } as unknown as Parameters<typeof onSilence>[2]
  let cut = 0
  const client = { status: 'ready', disconnect: () => { cut++ } } as unknown as RedisLike
  const lent = onSilence(client, false, log, 60_000)
  lent(new Error('silent'), () => true)
  lent(new Error('silent'), () => true)
  t.equal(cut, 0, 'the app\'s client is left as it is')
  t.equal(said.length, 1, 'one line per interval')
  t.match(said[0], /socketTimeout/, 'it names what to set')
  // A Cluster the plugin made is cut without asking a fresh connection first (lib/stores/stalled.ts).
  ;(client as { isCluster?: boolean }).isCluster = true
  const owned = onSilence(client, true, log, 60_000)
  owned(new Error('silent'), () => true)
  t.equal(cut, 1, 'a Cluster the plugin made is cut (and reconnects)')
  ;(client as { status: string }).status = 'connect'
  owned(new Error('silent'), () => true)
  t.equal(cut, 1, 'a connection still being made is the client\'s to finish: not cut')
})

t.test('a client the plugin made: cut only when a fresh connection answers and nothing was heard meanwhile', async t => {
  const server = await startRedisServer(t)
  const said: string[] = []
  const log = { warn: (_obj: unknown, msg: string) => { said.push(msg) } } as unknown as Parameters<typeof onSilence>[2]
  const redis = await ready(client(t, server.url))
  let reconnects = 0
  redis.on('close', () => { reconnects++ })
  const silent = onSilence(redis, true, log, 60_000)
  const asked = async (): Promise<void> => { await until(async () => said.length > 0 || reconnects > 0 || redis.status !== 'ready', 'the fresh connection\'s verdict') }

  let heard = false
  silent(new Error('silent'), () => !heard)
  heard = true
  // Asked again while the first check runs: one check at a time.
  silent(new Error('silent'), () => true)
  await new Promise(resolve => setTimeout(resolve, 300))
  t.equal(reconnects, 0, 'heard from while the fresh connection was asked: kept')
  t.equal(redis.status, 'ready', 'and still up')

  silent(new Error('silent'), () => true)
  await asked()
  matchList(t, said, [/stopped answering; reconnecting/], 'a fresh connection answers and the old one stayed silent: cut')
  await until(async () => reconnects > 0, 'the connection closed')
  t.equal(reconnects, 1, 'the connection was cut once')
})

t.test('a write pause that ends while the fresh connection waits: its script comes well after its PING, so the connection is kept', async t => {
  const server = await startRedisServer(t)
  const said: string[] = []
  const log = { warn: (_obj: unknown, msg: string) => { said.push(msg) } } as unknown as Parameters<typeof onSilence>[2]
  const redis = await ready(client(t, server.url))
  let reconnects = 0
  redis.on('close', () => { reconnects++ })
  const pauser = await ready(client(t, server.url))
  // Shorter than the fresh connection's second: its script is answered, when the pause ends, as the old
  // connection's held commands are (which this test never sends: the connection stays quiet).
  await pauser.client('PAUSE', 600, 'WRITE')
  onSilence(redis, true, log, 60_000)(new Error('silent'), () => true)
  await until(async () => said.length > 0 || reconnects > 0, 'the fresh connection\'s verdict', 5000)
  matchList(t, said, [/writes are paused \(CLIENT PAUSE WRITE, or a FAILOVER under way\); the connection is kept/], 'the script was held: writes were paused, not the socket dead')
  t.equal(reconnects, 0, 'not cut')
})

t.test('the trouble channel names each kind of trouble', async t => {
  const reply = (message: string): Error => Object.assign(new Error(message), { name: 'ReplyError' })
  const cases: Array<[Error, string]> = [
    [new DeadlineError(100), 'deadline'],
    [new SilentConnectionError(1000), 'silent'],
    [new LateRedisError(3, 160, 100, 200), 'late'],
    [reply("OOM command not allowed when used memory > 'maxmemory'."), 'oom'],
    [reply('ERR Error running script: @user_script:1: -OOM command not allowed'), 'oom'],
    [reply('BUSY Redis is busy running a script'), 'redis'],
    [new InvalidReplyError('a foreign value'), 'redis'],
    [new Error('Connection is closed.'), 'connection']
  ]
  for (const [err, reason] of cases) t.equal(troubleReason(err), reason, `${err.message.slice(0, 40)}: ${reason}`)
})
