// Failed logins: 5 per 15 minutes per user and address; a successful login costs nothing
// (`skipSuccessfulRequests`: a response below 400 is given back once it is sent).
//
//   node examples/failed-logins.js          (after npm run build; REDIS_URL to count in Redis)
//   curl -i -X POST localhost:3000/login -H 'content-type: application/json' -d '{"user":"ada","password":"nope"}'
//
// The key is the user named in the body and the client's address, so the hook is `preHandler` (the body is
// parsed by then). A client can still try 5 passwords per user name: pair this with a per-address limit.

import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'

/** A toy user table: a real one compares salted hashes. */
const PASSWORDS = new Map([['ada', 'correct horse battery staple']])

export const LOGIN_LIMIT = Object.freeze({ max: 5, timeWindow: '15 minutes' })

/** @typedef {{ user?: unknown, password?: unknown }} Login what a login request's body may hold */

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string }} options */
export async function buildApp ({ redis, nameSpace } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false })
  app.post('/login', {
    config: {
      rateLimit: {
        ...LOGIN_LIMIT,
        skipSuccessfulRequests: true,
        hook: 'preHandler',
        keyGenerator: (request) => `login:${String(/** @type {Login | undefined} */ (request.body)?.user ?? '')}@${request.ip}`
      }
    }
  }, async (request, reply) => {
    const { user, password } = /** @type {Login | undefined} */ (request.body) ?? {}
    if (typeof user === 'string' && PASSWORDS.get(user) === password) return { welcome: user }
    return reply.code(401).send({ error: 'wrong user name or password' })
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`failed-logins example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`)
}
