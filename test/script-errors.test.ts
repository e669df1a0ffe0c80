// An error raised inside a script names the line of its lua/ file. Redis numbers the lines of the joined
// script (lib/stores/scripts.ts joins lua/prelude.lua, the algorithm's file, lua/ban-index.lua and
// lua/decide.lua), in a whole call's error ('... on @user_script:302.') and, through decide.lua's xpcall, in
// the error text of one request of a batch; the store names each as `lua/<file>.lua:<line> (user_script:302)`.
// Over a real redis-server: a key of the wrong type, written with a plain command, raises WRONGTYPE inside
// the script, and the line named must hold the redis.call that raised it.
import { readFileSync } from 'node:fs'
import t from 'tap'
import type { Test } from 'tap'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import type { Algorithm } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { indexOf } from '../lib/stores/ban-index.js'
import { RedisStore } from '../lib/stores/redis.js'
import { BAN_SCRIPT, CROSS_SLOT_LEAN_SCRIPTS, CROSS_SLOT_SCRIPTS, LEAN_ALGORITHMS, LEAN_SCRIPTS, SCRIPTS, crossSlotArgs, defineScript, leanArgs, located, scriptArgs, sourceLines } from '../lib/stores/scripts.js'
import { withLayout } from '../lib/stores/layout.js'
import type { Script } from '../lib/stores/scripts.js'
import type { DecideInput } from '../lib/stores/store.js'
import { isPermanent } from '../lib/trouble.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

const LIMITS = [{ max: 5, windowMs: 60_000, burst: 5 }]
/** A line named as the store names it: the file, its line, and the joined script's line beside them. */
const NAMED = /(lua\/[\w-]+\.lua):(\d+) \(@?user_script:(\d+)\)/

/** A file's lines as a script joins them: its layout line (`-- layout: DECIDE`) made the Lua declaring its offsets. */
const lines = (file: string): string[] => withLayout(readFileSync(new URL(`../${file}`, import.meta.url), 'utf8')).split('\n')

/** The file and line `message` names (checked against the joined script's line beside it), and that line's text. */
function named (t: Test, script: Script, message: string): { file: string, line: number, text: string } {
  const found = NAMED.exec(message)
  if (found === null) {
    t.fail(`no lua file's line in ${JSON.stringify(message)}`)
    return { file: '', line: 0, text: '' }
  }
  const [, file, line, joined] = found
  const text = lines(file!)[Number(line) - 1]!
  t.equal(script.lua.split('\n')[Number(joined) - 1], text, `${file}:${line} is the joined script's line ${joined}`)
  return { file: file!, line: Number(line), text }
}

function decideInput (keys: DecideInput['keys'], algorithm: Algorithm): DecideInput {
  return { keys, limits: LIMITS, ban: null, peek: false, algorithm }
}

t.test('each script keeps where each of its files starts: every line of the joined text is its file\'s', async t => {
  for (const script of [...Object.values(SCRIPTS), ...Object.values(LEAN_SCRIPTS), BAN_SCRIPT]) {
    const joined = script.lua.split('\n')
    t.equal(script.parts[0]!.first, 1, `${script.command}: the first file starts at line 1`)
    for (const { file, first } of script.parts) {
      const own = lines(file)
      t.same(joined.slice(first - 1, first - 1 + own.length), own, `${script.command}: ${file} from line ${first}`)
    }
    t.same(script.parts.map(part => part.file).slice(0, 1), ['lua/prelude.lua'], `${script.command}: the prelude first`)
  }
  t.same(SCRIPTS['token-bucket'].parts.map(part => part.file), ['lua/prelude.lua', 'lua/token-bucket.lua', 'lua/quota.lua', 'lua/ban-index.lua', 'lua/strikes.lua', 'lua/decide.lua'])
  for (const algorithm of LEAN_ALGORITHMS) t.same(LEAN_SCRIPTS[algorithm]!.parts.map(part => part.file), ['lua/prelude.lua', `lua/lean-${algorithm}.lua`, 'lua/ban-index.lua', 'lua/strikes.lua', 'lua/lean.lua'])
  t.same(BAN_SCRIPT.parts.map(part => part.file), ['lua/prelude.lua', 'lua/ban-index.lua', 'lua/ban.lua'])
})

t.test('the cross-slot variants: the shebang their first line, then the script they wrap, every line its file\'s', async t => {
  const pairs: Array<[Script, Script]> = [...ALGORITHMS.map(algorithm => [CROSS_SLOT_SCRIPTS[algorithm], SCRIPTS[algorithm]] as [Script, Script]), ...LEAN_ALGORITHMS.map(algorithm => [CROSS_SLOT_LEAN_SCRIPTS[algorithm]!, LEAN_SCRIPTS[algorithm]!] as [Script, Script])]
  for (const [across, inner] of pairs) {
    const joined = across.lua.split('\n')
    t.equal(joined[0], '#!lua flags=allow-cross-slot-keys', `${across.command}: the shebang is line 1`)
    t.same(across.parts.map(part => part.file), ['lua/cross-slot.lua', ...inner.parts.map(part => part.file)], `${across.command}: lua/cross-slot.lua, then ${inner.command}'s files`)
    t.equal(across.parts[0]!.first, 1)
    for (const { file, first } of across.parts) {
      const own = lines(file)
      t.same(joined.slice(first - 1, first - 1 + own.length), own, `${across.command}: ${file} from line ${first}`)
    }
    t.not(across.command, inner.command)
  }
  // Redis names a line of a shebang script counting the shebang's (it keeps its line break).
  const script = CROSS_SLOT_SCRIPTS['sliding-log']
  const decide = script.parts.find(part => part.file === 'lua/decide.lua')!.first
  t.equal(sourceLines(script, `WRONGTYPE x, on @user_script:${decide + 9}.`), `WRONGTYPE x, on lua/decide.lua:10 (@user_script:${decide + 9}).`)
  t.equal(sourceLines(script, 'ERR x @user_script:1: y'), 'ERR x lua/cross-slot.lua:1 (@user_script:1): y')
  t.same(crossSlotArgs([4, 'a{x}:1', 'a{x}:2', 'a{y}:1', 'a{x}:3', 'mode', 7]), [1, 'a{x}:1', 4, 'a{x}:1', 'a{x}:2', 'a{y}:1', 'a{x}:3', 3, 2, 1, 1, 'mode', 7],
    'the first key routes; the keys in runs of one slot; then the call\'s own arguments')
})

t.test('on Redis: a cross-slot variant\'s errors name the lines of the files it wraps', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  for (const algorithm of ALGORITHMS) {
    const keys = identityKeys(uniquePrefix(), 'all', 'ip:cross', algorithm)
    await redis.set(keys.log, 'a plain string')
    const script = CROSS_SLOT_SCRIPTS[algorithm]
    const call = defineScript(redis, script)
    // Settled: the whole call fails, where the algorithm's settle reads the state.
    const err = located(script, await call(...crossSlotArgs(scriptArgs([{ keys, limits: LIMITS, algorithm, member: 'm1', at: Date.now(), final: 0 }], 'settle', ''))).then(() => null, (err: unknown) => err as Error))
    t.match(err?.message, /^WRONGTYPE .* on lua\/[\w-]+\.lua:\d+ \(@user_script:\d+\)\.$/, `${algorithm}: ${err?.message}`)
    const where = named(t, script, err!.message)
    t.equal(where.file, `lua/${algorithm}.lua`, `${algorithm}: raised in the algorithm's file`)
    t.match(where.text, /redis\.call\('(ZREM|HMGET)'/, `${algorithm}: line ${where.line} holds the redis.call: ${where.text.trim()}`)
  }
  // The lean variant, whose override of the wrong type is the request's own: handed back ({ 4 }), nothing raised;
  // a Lua error of the script itself (arguments it cannot read) is the call's.
  for (const algorithm of LEAN_ALGORITHMS) {
    const script = CROSS_SLOT_LEAN_SCRIPTS[algorithm]!
    const call = defineScript(redis, script)
    const broken = located(script, await call(1, 'k', 1, 'k', 1, 1, 'b.', '1').then(() => null, (err: unknown) => err as Error))
    const where = named(t, script, broken!.message)
    t.match(where.file, /^lua\/lean(-[\w-]+)?\.lua$/, `${algorithm}: raised in the lean script: ${broken!.message}`)
  }
})

t.test('a line as Redis 7 and Redis 6 name it, in a whole call\'s error', async t => {
  const script = SCRIPTS['sliding-log']
  const decide = script.parts.find(part => part.file === 'lua/decide.lua')!.first
  t.equal(sourceLines(script, `WRONGTYPE Operation script: 1a2b, on @user_script:${decide + 9}.`), `WRONGTYPE Operation script: 1a2b, on lua/decide.lua:10 (@user_script:${decide + 9}).`)
  t.equal(sourceLines(script, 'ERR Error running script (call to f_1a2b): @user_script: 1: x'), 'ERR Error running script (call to f_1a2b): lua/prelude.lua:1 (@user_script: 1): x')
  t.equal(sourceLines(script, 'ECONNRESET'), 'ECONNRESET', 'a text naming no line is left as it is')
})

t.test('on Redis: a state key of the wrong type', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const store = new RedisStore(redis, false)
  // The command each algorithm's count and settle read the state with first.
  const reads: Record<Algorithm, [string, string]> = {
    'sliding-log': ['ZRANGE', 'ZREM'],
    'fixed-window': ['HGETALL', 'HMGET'],
    'sliding-window': ['HGETALL', 'HMGET'],
    'token-bucket': ['HGETALL', 'HMGET']
  }

  for (const algorithm of ALGORITHMS) {
    const [countRead, settleRead] = reads[algorithm]
    const prefix = uniquePrefix()
    const [good, bad] = ['good', 'bad'].map(id => identityKeys(prefix, 'all', `ip:${id}`, algorithm))
    await redis.set(bad!.log, 'a plain string')

    // The lean script, where the algorithm has one, hands the foreign value back ({ 4 }) and raises nothing...
    if (LEAN_ALGORITHMS.includes(algorithm)) {
      t.strictSame((await defineScript(redis, LEAN_SCRIPTS[algorithm]!)(...leanArgs([decideInput(bad!, algorithm)], 'b.')) as unknown[]).slice(1), [4], `${algorithm}: the lean script hands it back (after the call's time)`)
    }
    // ...and decided alone, the request gets its own error, raised by count() in the algorithm's file.
    const err = await store.decide(decideInput(bad!, algorithm)).then(() => null, (err: unknown) => err as Error)
    t.ok(err instanceof Error, `${algorithm}: the decision fails`)
    t.match(err!.message, /^WRONGTYPE Operation against a key holding the wrong kind of value at lua\/[\w-]+\.lua:\d+ \(user_script:\d+\)$/, `${algorithm}: ${err!.message}`)
    t.ok(isPermanent(err!), `${algorithm}: still WRONGTYPE to the breaker`)
    const where = named(t, SCRIPTS[algorithm], err!.message)
    t.equal(where.file, `lua/${algorithm}.lua`, `${algorithm}: raised in the algorithm's file`)
    t.match(where.text, new RegExp(`redis\\.call\\('${countRead}'`), `${algorithm}: line ${where.line} holds the redis.call: ${where.text.trim()}`)

    // In a batch: the others are decided, and the bad one's error names the same line.
    const [before, failed, after] = await store.decideMany([good!, bad!, good!].map(keys => decideInput(keys, algorithm)), algorithm)
    t.match(before, { status: 'allowed', count: 1 }, `${algorithm}: the request before it is decided`)
    t.equal((failed as Error).message, err!.message, `${algorithm}: the failed one names the same line`)
    t.match(after, { status: 'allowed', count: 2 }, `${algorithm}: the one after it too`)

    // Settled: the whole call fails, and Redis's own '@user_script:<line>' is named.
    const settled = await store.settle({ keys: bad!, limits: LIMITS, algorithm, member: 'm1', at: Date.now(), final: 0 }).then(() => null, (err: unknown) => err as Error)
    t.match(settled?.message, /^WRONGTYPE .* on lua\/[\w-]+\.lua:\d+ \(@user_script:\d+\)\.$/, `${algorithm}: ${settled?.message}`)
    t.match(settled?.stack, NAMED, `${algorithm}: its stack too`)
    const settling = named(t, SCRIPTS[algorithm], settled!.message)
    t.equal(settling.file, `lua/${algorithm}.lua`, `${algorithm}: raised in settle`)
    t.match(settling.text, new RegExp(`redis\\.call\\('${settleRead}'`), `${algorithm}: line ${settling.line} holds the redis.call: ${settling.text.trim()}`)
  }
})

t.test('on Redis: a token bucket whose fields are not ours is read as lua/token-bucket.lua reads it, or handed back to it', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const lean = new RedisStore(redis, false)
  const general = new RedisStore(redis, false, '', { lean: false })
  const script = defineScript(redis, LEAN_SCRIPTS['token-bucket']!)
  const FUTURE = String(Date.now() + 3_600_000)
  // Each bucket's fields, and whether the lean script decides it (a t1 that is no number is a full bucket, and
  // another limit's fields are not limit 1's) or hands it back (a t1 that is a number, an f1 that is not).
  const buckets: Array<[string, Record<string, string>, boolean]> = [
    ['a t1 that is no number', { t1: 'soon', f1: '7' }, true],
    ['only limit 2\'s fields', { t2: FUTURE, f2: '0' }, true],
    ['no f1', { t1: FUTURE }, false],
    ['an f1 that is no number', { t1: FUTURE, f1: 'some' }, false]
  ]
  for (const [name, fields, decided] of buckets) {
    const prefix = uniquePrefix()
    const [mine, theirs, raw] = ['lean', 'general', 'raw'].map(id => identityKeys(prefix, 'all', `ip:${id}`, 'token-bucket'))
    for (const keys of [mine!, theirs!, raw!]) await redis.hset(keys.log, fields)
    const reply = await script(...leanArgs([decideInput(raw!, 'token-bucket')], 'b.')) as unknown[]
    t.equal(reply[1] !== 4, decided, `${name}: ${decided ? 'decided' : 'handed back'} by the lean script (its answer after the call's time)`)
    const answer = async (store: RedisStore, keys: DecideInput['keys']): Promise<unknown> => await store.decide(decideInput(keys, 'token-bucket')).then(({ status, count, resetMs, retryMs }) => ({ status, count, resetMs, retryMs }), (err: Error) => err.message)
    const [viaLean, viaGeneral] = [await answer(lean, mine!), await answer(general, theirs!)]
    t.strictSame(viaLean, viaGeneral, `${name}: the same answer on both paths: ${JSON.stringify(viaLean)}`)
    if (!decided) t.match(viaLean, /^lua\/token-bucket\.lua:\d+ .*: attempt to perform arithmetic on .*a nil value/, `${name}: lua/token-bucket.lua's error for the request`)
    // The same fields, t1 (Redis's time of each decision, plus the TAT) within the second between the two.
    const [left, right] = [await redis.hgetall(mine!.log), await redis.hgetall(theirs!.log)]
    t.strictSame({ ...left, t1: '' }, { ...right, t1: '' }, `${name}: the same fields written`)
    t.ok(Math.abs(Number(left.t1) - Number(right.t1)) < 1000, `${name}: the same TAT: ${left.t1}, ${right.t1}`)
  }
})

t.test('on Redis: raised in lua/decide.lua, in lua/ban-index.lua, and a Lua error of the script itself', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const store = new RedisStore(redis, false)
  const keys = identityKeys(uniquePrefix(), 'all', 'ip:x', 'fixed-window')

  // An override of the wrong type: decide.lua's GET.
  await redis.hset(keys.override, 'not', 'a string')
  const override = await store.decide(decideInput(keys, 'fixed-window')).then(() => null, (err: unknown) => err as Error)
  const where = named(t, SCRIPTS['fixed-window'], override!.message)
  t.equal(where.file, 'lua/decide.lua', `raised in decide.lua: ${override!.message}`)
  t.match(where.text, /redis\.call\('GET', req\.override\)/, `line ${where.line} holds its GET`)
  // An override that names no limit is decide.lua's own error: its words, as the in-process store gives them.
  await redis.set(keys.override, 'no limits here')
  await t.rejects(store.decide(decideInput(keys, 'fixed-window')), { message: `ERR rate-guard: the override at ${keys.override} names no limit` })

  // The operator's ban, on a ban index of the wrong type: the index's first command.
  const banned = identityKeys(uniquePrefix(), 'all', 'ip:y').banned
  await redis.set(indexOf(banned, false), 'a plain string')
  const ban = await store.setBan(banned, 60_000).then(() => null, (err: unknown) => err as Error)
  const indexed = named(t, BAN_SCRIPT, ban!.message)
  t.equal(indexed.file, 'lua/ban-index.lua', `raised in ban-index.lua: ${ban!.message}`)
  t.match(indexed.text, /redis\.call\('ZREMRANGEBYSCORE', index/, `line ${indexed.line} holds its ZREMRANGEBYSCORE`)

  // A Lua error (no redis.call): arguments the script cannot read, where decide.lua reads the policies.
  const call = defineScript(redis, 'sliding-window')
  const broken = located(SCRIPTS['sliding-window'], await call(0, 'decide', 'b.', '1').then(() => null, (err: unknown) => err as Error))
  t.match(broken!.message, /^ERR lua\/decide\.lua:\d+ \(user_script:\d+\): .* on lua\/decide\.lua:\d+ \(@user_script:\d+\)\.$/, broken!.message)
  t.match(named(t, SCRIPTS['sliding-window'], broken!.message).text, /^for p = 1, tonumber\(ARGV\[HEAD_POLICIES\]\) do$/, 'the line that reads how many policies follow')
  t.equal(located(BAN_SCRIPT, 'not an error'), 'not an error', 'what is no error is handed back as it is')
})

t.test('an error that is not the script\'s is left as it is', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  await redis.ping()
  redis.disconnect()
  const store = new RedisStore(redis, false)
  await t.rejects(store.decide(decideInput(identityKeys(uniquePrefix(), 'all', 'ip:z'), 'sliding-log')), { message: 'Connection is closed.' })
})
