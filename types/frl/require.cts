// A CommonJS TypeScript app (`.cts`, compiled to require()) written for @fastify/rate-limit, with only the
// package changed: `import x = require(...)` gives the plugin itself, as `export =` does in theirs.
import Fastify = require('fastify')
import rateLimit = require('fastify-rate-guard')
import { fastifyRateLimit, normalizeIP } from 'fastify-rate-guard'
import type { RateLimitPluginOptions } from 'fastify-rate-guard'

const app = Fastify()
const options: RateLimitPluginOptions = { max: 100, timeWindow: '1 minute', skipOnError: true }
app.register(rateLimit, options)
app.register(fastifyRateLimit, { global: false })
app.get('/', { config: { rateLimit: { max: 3, timeWindow: '1 minute' } } }, async () => 'ok')
app.get('/open', { config: { rateLimit: false } }, async () => 'ok')
app.setNotFoundHandler({ preHandler: app.rateLimit() }, async () => 'gone')
const subnet: string = normalizeIP('2001:db8::1', 64)
export = subnet
