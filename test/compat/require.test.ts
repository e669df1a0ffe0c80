// @fastify/rate-limit compatibility: most Fastify apps are CommonJS, and `require('@fastify/rate-limit')`
// gives something `fastify.register` accepts. `require('fastify-rate-guard')` must too (Node >= 20.19 loads
// an ES module for require()), with the named exports on it. Run from a real .cjs file against dist/.
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'
import rateGuard, { fastifyRateLimit, normalizeIP } from '../../lib/index.js'

t.test('require() from a .cjs file gives the plugin itself, with every named export on it', async t => {
  const file = fileURLToPath(new URL('./fixtures/require.cjs', import.meta.url))
  const { stdout } = await promisify(execFile)(process.execPath, [file], { timeout: 30_000 })
  t.strictSame(JSON.parse(stdout), {
    type: 'function',
    same: true,
    normalizeIP: '2001:db8::',
    errors: 'function',
    statuses: [200, 200, 429],
    // Fastify's default error handler writes the body as theirs; the error thrown keeps its code.
    body: { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 minute' },
    codes: ['FST_RATE_GUARD_TOO_MANY_REQUESTS']
  })
})

t.test('ESM: default, rateGuard, fastifyRateLimit are one plugin; normalizeIP is exported', async t => {
  t.equal(fastifyRateLimit, rateGuard)
  t.equal(normalizeIP('::ffff:127.0.0.1'), '127.0.0.1')
})

t.test('every named export of the ES module is on what require() gives, the same value', async t => {
  const esm = await import(new URL('../../dist/index.js', import.meta.url).href) as Record<string, unknown>
  const file = fileURLToPath(new URL('./fixtures/exports.cjs', import.meta.url))
  const { stdout } = await promisify(execFile)(process.execPath, [file], { timeout: 30_000 })
  const cjs = new Set(JSON.parse(stdout) as string[])
  const named = Object.keys(esm).filter(name => name !== 'module.exports')
  t.same(named.filter(name => !cjs.has(name)), [], `all of ${named.join(', ')} are on require()'s`)
  const required = esm['module.exports'] as Record<string, unknown>
  t.ok(named.every(name => required[name] === esm[name]), 'each the same value as the named export')
})
