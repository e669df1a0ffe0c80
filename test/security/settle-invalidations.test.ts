// Attack: a handler that settles a request below its cost gives units back on a budget whose denials every
// instance may hold (banCache), so every instance must forget them. Were each settlement published on its own,
// 1,000 requests would be 1,000 PUBLISHes, each making every instance drop its held answers (and ask Redis
// again for the answers in flight): clients steer how often. Defence: the settlements begun in one turn of the
// event loop are published in one message, once all of them have landed in Redis; an instance holding a
// denial for a key whose count was lowered still learns it. Two instances, a real Redis.
import Fastify from 'fastify'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import { GivenBack, changesChannel } from '../../lib/changes.js'
import rateGuard from '../../lib/index.js'
import { client, getRedis, ready, scriptCalls, subscribed, uniquePrefix, until } from '../helpers/redis.js'

interface Gated { app: FastifyInstance, waiting: () => number, release: () => void }

/** An instance whose handler waits, when asked (`x-wait`), until `release()`, then gives the request back. */
async function instance (t: Test, url: string, nameSpace: string, max: number): Promise<Gated> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, max, timeWindow: '1 minute', timeout: 3000 })
  let waiting = 0
  let release = (): void => {}
  let gate = new Promise<void>(resolve => { release = resolve })
  app.get('/', async (request) => {
    if (request.headers['x-wait'] === '1') {
      waiting++
      await gate
    }
    await request.rateGuard.settle(0)
    return 'ok'
  })
  await app.ready()
  return {
    app,
    waiting: () => waiting,
    release: () => {
      release()
      gate = new Promise<void>(resolve => { release = resolve })
    }
  }
}

/** Counts the messages on the changes channel of `nameSpace`, with the keys each names. */
async function listen (t: Test, url: string, nameSpace: string): Promise<string[][]> {
  const messages: string[][] = []
  const subscriber = client(t, url)
  subscriber.on('message', (_channel: string, message: string) => messages.push(message.split(' ').slice(1)))
  await subscriber.subscribe(changesChannel(nameSpace))
  return messages
}

t.test('20 settlements below the cost begun in one turn: one PUBLISH naming their 20 keys', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const a = await instance(t, url, nameSpace, 5)
  await instance(t, url, nameSpace, 5)
  const messages = await listen(t, url, nameSpace)
  await subscribed(observer, nameSpace, 3)
  const requests = Array.from({ length: 20 }, async (_, i) => await a.app.inject({ url: '/', remoteAddress: `10.0.0.${i + 1}`, headers: { 'x-wait': '1' } }))
  await until(async () => a.waiting() === 20, '20 handlers waiting')
  a.release()
  t.ok((await Promise.all(requests)).every(res => res.statusCode === 200))
  await until(async () => messages.length > 0, 'the message')
  await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(messages.length, 1, 'one message, not 20')
  t.equal(new Set(messages[0]).size, 20, 'naming every key given back')
})

t.test('a denial held on another instance is still dropped when the count is lowered', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const [a, b] = [await instance(t, url, nameSpace, 1), await instance(t, url, nameSpace, 1)]
  await subscribed(observer, nameSpace, 2)
  const first = a.app.inject({ url: '/', headers: { 'x-wait': '1' } })
  await until(async () => a.waiting() === 1, 'the first request in its handler')
  t.equal((await b.app.inject('/')).statusCode, 429, 'b: denied by Redis while the first holds the budget of 1')
  const before = await scriptCalls(observer)
  t.strictSame([(await b.app.inject('/')).statusCode, (await b.app.inject('/')).statusCode], [429, 429])
  t.equal(await scriptCalls(observer) - before, 0, 'and the denial held on b')
  a.release()
  t.equal((await first).statusCode, 200)
  let status = 0
  const end = Date.now() + 3000
  while (status !== 200 && Date.now() < end) {
    status = (await b.app.inject('/')).statusCode
    await new Promise(resolve => setImmediate(resolve))
  }
  t.equal(status, 200, 'given back on a: b forgets its denial and Redis allows')
})

t.test('GivenBack: one announcement a turn, after every settlement of the turn landed; a failure reported once, with the turn\'s first log', async t => {
  const announced: string[][] = []
  const reported: Array<[string, unknown]> = []
  let fail = false
  const given = new GivenBack(async keys => {
    if (fail) throw new Error('publish failed')
    announced.push([...keys])
  }, (err, log) => reported.push([err.message, log]))
  const log = (name: string): FastifyBaseLogger => ({ name }) as unknown as FastifyBaseLogger
  let land = (): void => {}
  const slow = new Promise<void>(resolve => { land = resolve })
  given.add('k1', Promise.resolve(), log('first'))
  given.add('k2', slow, log('second'))
  given.add('k1', Promise.resolve(), log('third'))
  await new Promise(resolve => setTimeout(resolve, 20))
  t.strictSame(announced, [], 'nothing announced while a settlement of the turn has not landed')
  land()
  await until(async () => announced.length === 1, 'the announcement')
  t.strictSame(announced, [['k1', 'k2']], 'each key once')

  given.add('k3', Promise.resolve(), log('next turn'))
  await until(async () => announced.length === 2, 'the next turn\'s')
  t.strictSame(announced[1], ['k3'])

  fail = true
  given.add('k4', Promise.resolve(), log('failing'))
  given.add('k5', Promise.resolve(), log('same turn'))
  await until(async () => reported.length === 1, 'the report')
  t.strictSame(reported, [['publish failed', { name: 'failing' }]], 'reported once, never thrown at a request')
})
