// The batch's states (open → sent → settled) and its deadline, which measures Redis, not the app's own event
// loop: requests of one turn go together; a request never joins a batch already sent; every request of every
// batch is answered exactly once, whatever comes first (reply, error, deadline) and whatever comes later; and
// a reply that reached the process while the loop was busy is used, however late the loop gets to it. The
// stand-in `send` functions here are the batch's counterpart, not a Redis: where a reply must really sit in
// a socket, a real redis-server answers it.
import { setImmediate as turn } from 'node:timers/promises'
import type { FastifyBaseLogger } from 'fastify'
import t from 'tap'
import { BATCH_MAX, Batcher } from '../lib/batcher.js'
import type { Send } from '../lib/batcher.js'
import { deadline, onDeadline } from '../lib/deadline.js'
import { DeadlineError } from '../lib/errors.js'
import { GLOBAL_SCOPE, identityKeys } from '../lib/stores/key-names.js'
import type { Algorithm } from '../lib/algorithms/index.js'
import { Decider } from '../lib/decider.js'
import type { Decidable } from '../lib/stores/store.js'
import { MemoryStore } from '../lib/stores/memory.js'
import { RedisStore } from '../lib/stores/redis.js'
import type { DecideInput, Decision } from '../lib/stores/store.js'
import { client, getRedis, ready, uniquePrefix } from './helpers/redis.js'
import { decideInput } from './helpers/stores.js'
import { prng } from './helpers/random.js'

const TIMEOUT = 50

/** Keeps the event loop busy for `ms`, as a CPU-bound handler does. */
function busy (ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until);
}

function input (key: string, algorithm: Algorithm = 'sliding-log', max = 5): DecideInput & { algorithm: Algorithm } {
  return { ...decideInput({ keys: identityKeys('batcher:', GLOBAL_SCOPE, key, algorithm), max, windowMs: 60_000, algorithm }), algorithm }
}

/** A decision standing for Redis's answer to request `i`. */
function decision (i: number): Decision {
  return { status: 'allowed', limit: 5, windowMs: 1000, count: i, resetMs: 1000, retryMs: 0, banStarted: false, offence: 0, limits: [], at: 1, member: `m${i}` }
}

/** Records every answer (per request: how many times, and with what) and every settlement. */
function recorder () {
  const answers = new Map<string, Array<Decision | Error>>()
  const settled: Array<Error | undefined> = []
  return {
    answers,
    settled,
    answer: (key: string) => (result: Decision | Error) => { answers.set(key, [...answers.get(key) ?? [], result]) },
    onSettled: (err: Error | undefined) => { settled.push(err) }
  }
}

t.test('requests of one turn go in one batch per algorithm, at most BATCH_MAX each: sent when full, the rest in the check phase', async t => {
  const calls: Array<{ algorithm: Algorithm, keys: string[] }> = []
  const send: Send = async (inputs, algorithm) => {
    calls.push({ algorithm, keys: inputs.map(i => i.keys.log) })
    return inputs.map((_, i) => decision(i))
  }
  const r = recorder()
  const batcher = new Batcher(send, TIMEOUT, r.onSettled)
  for (let i = 0; i < BATCH_MAX - 1; i++) batcher.add(input(`a${i}`), r.answer(`a${i}`))
  batcher.add(input('b', 'fixed-window'), r.answer('b'))
  t.equal(calls.length, 0, 'nothing is sent while the turn is still running and no batch is full')
  batcher.add(input(`a${BATCH_MAX - 1}`), r.answer(`a${BATCH_MAX - 1}`))
  t.same(calls.map(c => [c.algorithm, c.keys.length]), [['sliding-log', BATCH_MAX]], 'a full batch is sent at once, in the same turn')
  for (let i = BATCH_MAX; i < BATCH_MAX + 2; i++) batcher.add(input(`a${i}`), r.answer(`a${i}`))
  t.equal(calls.length, 1, 'the next requests open a new batch')
  await turn()
  t.same(calls.map(c => [c.algorithm, c.keys.length]), [['sliding-log', BATCH_MAX], ['fixed-window', 1], ['sliding-log', 2]], 'one call per algorithm and per BATCH_MAX requests')
  await turn()
  t.equal(r.answers.size, BATCH_MAX + 3, 'every request answered')
  t.ok([...r.answers.values()].every(a => a.length === 1), 'each once')
  t.same((r.answers.get(`a${BATCH_MAX + 1}`)![0] as Decision).count, 1, 'in order: the second call\'s second request gets its second answer')
  t.same(r.settled, [undefined, undefined, undefined], 'each batch settled once, by Redis\'s reply')
})

t.test('a request added once its batch was sent goes in a batch of its own: it never joins a sent or settled one', async t => {
  const pending: Array<(results: Decision[]) => void> = []
  const sizes: number[] = []
  const send: Send = async inputs => {
    sizes.push(inputs.length)
    return await new Promise(resolve => pending.push(resolve))
  }
  const r = recorder()
  const batcher = new Batcher(send, 10_000, r.onSettled)
  batcher.add(input('first'), r.answer('first'))
  await turn()
  t.same(sizes, [1], 'sent')
  batcher.add(input('second'), r.answer('second'))
  await turn()
  t.same(sizes, [1, 1], 'the second request went in a new batch, not the sent one')
  pending[0]!([decision(0)])
  await turn()
  batcher.add(input('third'), r.answer('third'))
  await turn()
  t.same(sizes, [1, 1, 1], 'nor in a settled one')
  pending[1]!([decision(1)])
  pending[2]!([decision(2)])
  await turn()
  t.same([...r.answers.keys()].sort(), ['first', 'second', 'third'])
  t.ok([...r.answers.values()].every(a => a.length === 1), 'each answered once')
})

t.test('the deadline runs from when the batch is sent: a loop busy past it before the check phase costs no deadline', async t => {
  const r = recorder()
  const batcher = new Batcher(async inputs => inputs.map((_, i) => decision(i)), TIMEOUT, r.onSettled)
  batcher.add(input('late'), r.answer('late'))
  busy(TIMEOUT * 3)
  await turn()
  await turn()
  t.same(r.settled, [undefined], 'settled by the reply')
  t.equal((r.answers.get('late')![0] as Decision).status, 'allowed', 'the request has Redis\'s decision, not failMode\'s')
})

t.test('a deadline that passes answers every request with a DeadlineError, once; the reply that comes later changes nothing', async t => {
  let reply: ((results: Decision[]) => void) | undefined
  const r = recorder()
  const batcher = new Batcher(async () => await new Promise(resolve => { reply = resolve }), TIMEOUT, r.onSettled)
  const started = performance.now()
  const answered = new Promise<number>(resolve => batcher.add(input('x'), (result) => { r.answer('x')(result); resolve(performance.now()) }))
  batcher.add(input('y'), r.answer('y'))
  const at = await answered - started
  t.ok(at >= TIMEOUT - 2, `not before the deadline (${at.toFixed(1)} ms)`)
  t.ok(r.answers.get('x')![0] instanceof DeadlineError && r.answers.get('y')![0] instanceof DeadlineError, 'both requests get the deadline')
  t.equal(r.settled.length, 1, 'settled once')
  t.ok(r.settled[0] instanceof DeadlineError, 'by the deadline')
  reply!([decision(0), decision(1)])
  await turn()
  t.equal(r.answers.get('x')!.length + r.answers.get('y')!.length, 2, 'the late reply answers nobody again')
  t.equal(r.settled.length, 1, 'nor settles the batch again')
})

t.test('an error settles the batch: each request gets it, once, even when send throws at once', async t => {
  const boom = new Error('ECONNRESET')
  for (const [name, send] of [
    ['rejects', async () => { throw boom }],
    ['throws', () => { throw boom }]
  ] as Array<[string, Send]>) {
    const r = recorder()
    const batcher = new Batcher(send, TIMEOUT, r.onSettled)
    batcher.add(input('a'), r.answer('a'))
    batcher.add(input('b'), r.answer('b'))
    await turn()
    await turn()
    t.same(r.settled, [boom], `${name}: settled once, with the error`)
    t.same([...r.answers.values()], [[boom], [boom]], `${name}: each request answered once with it`)
  }
})

t.test('one request\'s own error is its alone: the batch settles as answered and the others get their decisions', async t => {
  const wrongType = new Error('WRONGTYPE Operation against a key holding the wrong kind of value')
  const r = recorder()
  const batcher = new Batcher(async () => [decision(0), wrongType, decision(2)], TIMEOUT, r.onSettled)
  for (const key of ['a', 'b', 'c']) batcher.add(input(key), r.answer(key))
  await turn()
  await turn()
  t.same(r.settled, [undefined], 'Redis answered')
  t.equal((r.answers.get('a')![0] as Decision).count, 0)
  t.equal(r.answers.get('b')![0], wrongType, 'the request whose key held a foreign value gets its error')
  t.equal((r.answers.get('c')![0] as Decision).count, 2)
})

t.test('exactly once under random interleavings of adds, replies, errors and deadlines', async t => {
  const random = prng(12)
  const r = recorder()
  let sent = 0
  // Each batch's fate, in turn: an error at once, a reply well within the deadline, the same with one
  // request's own error, a reply long after the deadline.
  let batches = 0
  const send: Send = async inputs => {
    sent += inputs.length
    const fate = batches++ % 4
    if (fate === 0) throw new Error('ECONNRESET')
    await new Promise(resolve => setTimeout(resolve, fate === 3 ? TIMEOUT * 2 : Math.floor(random() * TIMEOUT / 2)))
    return inputs.map((_, i) => fate === 2 && i === 0 ? new Error('WRONGTYPE') : decision(i))
  }
  const batcher = new Batcher(send, TIMEOUT, r.onSettled)
  const all: Array<Promise<void>> = []
  for (let i = 0; i < 600; i++) {
    const key = `k${i}`
    all.push(new Promise(resolve => setTimeout(() => {
      batcher.add(input(key), (result) => { r.answer(key)(result); resolve() })
    }, Math.floor(random() * 1500))))
  }
  // The loop now and then busy past a deadline, as under a CPU-bound handler.
  for (let i = 0; i < 8; i++) setTimeout(() => busy(TIMEOUT * 1.5), Math.floor(random() * 1500))
  await Promise.all(all)
  // Let every late reply come in: none may answer anybody again.
  await new Promise(resolve => setTimeout(resolve, TIMEOUT * 3))
  t.equal(r.answers.size, 600, 'every request answered')
  t.ok([...r.answers.values()].every(a => a.length === 1), 'each exactly once')
  t.equal(sent, 600, 'each sent once')
  t.ok(batches >= 40, `in ${batches} batches`)
  const outcomes = new Set([...r.answers.values()].map(([a]) => a instanceof DeadlineError ? 'deadline' : a instanceof Error ? a.message : 'decided'))
  t.same([...outcomes].sort(), ['ECONNRESET', 'WRONGTYPE', 'deadline', 'decided'], 'every way a batch settles happened')
})

t.test('a reply that reached the process while the loop was busy past the deadline is used (a real Redis answers)', async t => {
  const redis = await ready(client(t, (await getRedis(t)).url, { enableOfflineQueue: false }))
  const store = new RedisStore(redis, false)
  const r = recorder()
  const batcher = new Batcher(async (inputs, algorithm) => await store.decideMany(inputs, algorithm), TIMEOUT, r.onSettled)
  const nameSpace = uniquePrefix()
  for (let round = 0; round < 5; round++) {
    const key = `busy${round}`
    const answered = new Promise<void>(resolve => batcher.add(
      { ...input(key), keys: identityKeys(nameSpace, GLOBAL_SCOPE, key) },
      (result) => { r.answer(key)(result); resolve() }))
    // Queued after the batcher's own check-phase callback: the batch is sent, then the loop is busy for three
    // deadlines while Redis's reply waits in the socket, and the deadline timer is long overdue.
    setImmediate(() => busy(TIMEOUT * 3))
    await answered
    t.equal((r.answers.get(key)![0] as Decision).status, 'allowed', `round ${round}: Redis's decision, not a deadline`)
  }
  t.same(r.settled, [undefined, undefined, undefined, undefined, undefined], 'no batch counted as a Redis failure')
})

t.test('deadline(): the same rule for a single call, and its timer never outlives the answer', async t => {
  const late = deadline(new Promise(() => {}), TIMEOUT)
  await t.rejects(late, DeadlineError, 'a promise that never settles misses the deadline')
  t.equal(await deadline(Promise.resolve(7), TIMEOUT), 7)
  await t.rejects(deadline(Promise.reject(new Error('no')), TIMEOUT), { message: 'no' })
  t.equal(await deadline(8, TIMEOUT), 8, 'a value at hand')

  // The answer arrives while the loop is busy past the deadline: used.
  const slow = deadline(new Promise(resolve => setImmediate(() => resolve('here'))), TIMEOUT)
  busy(TIMEOUT * 2)
  t.equal(await slow, 'here')

  let missed = 0
  const cancel = onDeadline(1, () => { missed++ })
  const fired = new Promise(resolve => setTimeout(resolve, 1))
  // Both timers are due by the next timers phase, the deadline's first.
  busy(5)
  await fired
  // The deadline's timer has fired: its turn for the poll phase is still to run, and cancel stops it too.
  cancel()
  await turn()
  await new Promise(resolve => setTimeout(resolve, 10))
  t.equal(missed, 0, 'cancelled between the timer and its turn: never called')
})

t.test('the limiter answers a request even when what it does with the answer throws (a logger that throws)', async t => {
  const redis = await ready(client(t, (await getRedis(t)).url, { enableOfflineQueue: false }))
  const limiter = new Decider({ store: new RedisStore(redis, false), remote: true, timeout: 1000, local: () => new MemoryStore({ cache: 10 }), breaker: undefined })
  const keys = identityKeys(uniquePrefix(), GLOBAL_SCOPE, 'ip:10.0.0.1')
  await redis.set(keys.log, 'a foreign value')
  const log = { error () { throw new Error('the logger broke') } } as unknown as FastifyBaseLogger
  const input: Decidable = { ...decideInput({ keys, max: 5 }), algorithm: 'sliding-log', holdDenials: false, failMode: 'open' }
  await t.rejects(Promise.resolve(limiter.decide(input, log)), { message: 'the logger broke' }, 'rejected with what was thrown: not left waiting')
})
