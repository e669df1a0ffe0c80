// Attack: under a trustProxy that trusts every address, request.ip is the left-most X-Forwarded-For entry,
// which the client writes: a fresh address per request is a fresh budget. Defence (the app's to make): a
// warning at register whenever trustProxy trusts every address at every hop, whatever its spelling: true, a
// function, a list or a comma-separated string; none for the sound ones.
import Fastify from 'fastify'
import type { FastifyServerOptions } from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'
import { trustsEveryAddress } from '../../lib/ip.js'

const EVERYONE: Array<[string, unknown]> = [
  ['true', true],
  ['() => true', () => true],
  ['the two halves of IPv4', ['0.0.0.0/1', '128.0.0.0/1']],
  ['the two halves of IPv6, in one string', '::/1, 8000::/1']
]
const SOUND: Array<[string, unknown]> = [
  ['false', false],
  ['the proxy on the socket alone', (_address: string, hop: number) => hop === 0],
  ['a CIDR', '10.0.0.0/8'],
  ['loopback', 'loopback'],
  ['half of IPv4', ['0.0.0.0/1']],
  ['a hop count', 2],
  ['a function that throws', () => { throw new Error('no') }]
]

t.test('trustsEveryAddress', async t => {
  for (const [name, trustProxy] of EVERYONE) t.ok(trustsEveryAddress(trustProxy), `${name}: trusts everyone`)
  for (const [name, trustProxy] of SOUND) t.notOk(trustsEveryAddress(trustProxy), `${name}: does not`)
  t.notOk(trustsEveryAddress(['0.0.0.0/0']), 'a list Fastify cannot read (it refuses to start): no answer from it')
})

t.test('a warning at register for every spelling that trusts everyone, none for the others', async t => {
  for (const [name, trustProxy] of [...EVERYONE, ...SOUND]) {
    const warnings: string[] = []
    const app = Fastify({ trustProxy: trustProxy as FastifyServerOptions['trustProxy'], logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
    await app.register(rateGuard, {})
    await app.close()
    const warned = warnings.filter(w => /trustProxy trusts every address/.test(w)).length
    t.equal(warned, EVERYONE.some(([n]) => n === name) ? 1 : 0, `${name}: ${warned} warning`)
  }
})
