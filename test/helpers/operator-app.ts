// The app of examples/app.js (the same tiers, stand-in login, trusted loopback proxy and operator page), built
// on lib/ so the operator page's tests count towards lib/operator/'s coverage. The example itself, from the
// package, runs in test/operator-page.test.ts (in a browser) and test/tarball.test.ts.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import rateGuard from '../../lib/index.js'
import { operatorPage } from '../../lib/operator/page.js'

const API_KEYS = new Map([['key-acme-0001', 'acme'], ['key-globex-0002', 'globex']])
const TIERS = { apikey: 40, user: 20, ip: 10 }

export interface OperatorAppOptions {
  redis?: string | undefined
  nameSpace: string
  operatorPassword: string
  operatorClientNames?: boolean | 'masked' | 'full'
}

/** examples/app.js's buildApp, on lib/. */
export async function buildOperatorApp (options: OperatorAppOptions): Promise<FastifyInstance> {
  const { redis, nameSpace, operatorPassword, operatorClientNames } = options
  const app = Fastify({ trustProxy: ['127.0.0.1', '::1'] })
  app.decorateRequest('user', null)
  app.addHook('onRequest', async (request) => {
    const token = /^Bearer user-([\w-]{1,64})$/.exec(request.headers.authorization ?? '')
    if (token !== null) Object.assign(request, { user: { id: token[1] } })
  })
  await app.register(rateGuard, {
    ...(redis === undefined ? {} : { redis }),
    nameSpace,
    max: (_request, key) => key.startsWith('apikey:') ? TIERS.apikey : key.startsWith('user:') ? TIERS.user : TIERS.ip,
    timeWindow: '5s',
    ban: { threshold: 3, duration: '10s' },
    standardHeaders: 'draft-10',
    verifyApiKey: async (apiKey) => API_KEYS.has(apiKey)
  })
  app.get('/items', async () => ({ items: [] }))
  app.get('/search', { config: { rateLimit: { max: 5, timeWindow: '5s', ban: false } } }, async () => ({ results: [] }))
  app.get('/health', { config: { rateLimit: false } }, async () => ({ ok: true }))
  await app.register(operatorPage, {
    credentials: { user: 'operator', password: operatorPassword },
    ...(operatorClientNames === undefined ? {} : { clientNames: operatorClientNames }),
    apiKeyOwner: (apiKey) => API_KEYS.get(apiKey)
  })
  return app
}
