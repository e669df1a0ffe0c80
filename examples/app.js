// A small API behind fastify-rate-guard, used by `npm start` (examples/server.js) and `npm run demo`.
//
// Who a request is, in the plugin's default order: a valid API key (`x-api-key`), else the logged-in user
// (`request.user.id`), else the client IP. Each kind of client gets its own budget per 5 s sliding window:
//
//   API key  40      user  20      IP  10
//
// Three refusals within one window ban that client for 10 s, on every route. GET /search has a budget of
// its own (5 per 5 s, refusals there never lead to a ban); GET /health is never limited.

import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'
import { operatorPage } from 'fastify-rate-guard/operator-page'

/** The API keys this toy service has issued, and to whom; a real one would look them up (and cache the answer). */
export const API_KEYS = new Map([['key-acme-0001', 'acme'], ['key-globex-0002', 'globex']])

/** Requests per window, by the kind of key the plugin made: `apikey:…`, `user:…`, or an address. */
export const TIERS = Object.freeze({ apikey: 40, user: 20, ip: 10 })
export const WINDOW = '5s'
export const BAN = Object.freeze({ threshold: 3, duration: '10s' })
export const SEARCH_LIMIT = Object.freeze({ max: 5, timeWindow: '5s', ban: false })

/**
 * `operatorPassword` (or OPERATOR_PASSWORD in the environment) turns on the operator's page, GET /rate-guard,
 * for the user `operator` (HTTP Basic): without one there is no page. `operatorClientNames` (or
 * OPERATOR_CLIENT_NAMES: `masked` or `full`) shows there the clients refused as the operator knows them,
 * an API key as its owner (see examples/operator-page.js); by default, by hash alone.
 * @param {{ redis?: string | import('ioredis').Redis, logger?: boolean | object, nameSpace?: string, operatorPassword?: string, operatorClientNames?: boolean | 'masked' | 'full' }} options
 */
export async function buildApp ({
  redis, logger = false, nameSpace, operatorPassword = process.env.OPERATOR_PASSWORD,
  operatorClientNames = /** @type {'masked' | 'full' | undefined} */ (process.env.OPERATOR_CLIENT_NAMES || undefined)
} = {}) {
  // The demo's clients connect from loopback; X-Forwarded-For is believed only from there.
  const app = Fastify({ logger, trustProxy: ['127.0.0.1', '::1'] })

  // Stand-in authentication: `Authorization: Bearer user-<id>` logs in as user <id>. Not a real scheme!
  // It runs as an app-wide onRequest hook, so it comes before the rate guard, which is a route-level hook.
  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request) => {
    const token = /^Bearer user-([\w-]{1,64})$/.exec(request.headers.authorization ?? '')
    // What an auth plugin (@fastify/jwt, @fastify/passport) would set: the key hierarchy's user tier reads it.
    if (token !== null) Object.assign(request, { user: { id: token[1] } })
  })

  // Registered (and awaited) before the routes, so its onRoute hook sees every one of them.
  await app.register(rateGuard, {
    redis,
    nameSpace,
    max: (request, key) => key.startsWith('apikey:') ? TIERS.apikey : key.startsWith('user:') ? TIERS.user : TIERS.ip,
    timeWindow: WINDOW,
    ban: BAN,
    standardHeaders: 'draft-10',
    verifyApiKey: async (apiKey) => API_KEYS.has(apiKey)
  })

  app.get('/items', async () => ({ items: [{ id: 1, name: 'teapot' }, { id: 2, name: 'kettle' }] }))

  app.get('/search', { config: { rateLimit: SEARCH_LIMIT } }, async (request) => {
    const q = String(/** @type {{ q?: string }} */ (request.query).q ?? '')
    return { q, results: q === '' ? [] : [{ id: 1, name: `${q} teapot` }] }
  })

  app.get('/health', { config: { rateLimit: false } }, async () => ({ ok: true }))

  if (operatorPassword) {
    await app.register(operatorPage, {
      credentials: { user: 'operator', password: operatorPassword },
      clientNames: operatorClientNames,
      apiKeyOwner: (apiKey) => API_KEYS.get(apiKey)
    })
  }

  return app
}
