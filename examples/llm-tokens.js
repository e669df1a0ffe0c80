// LLM tokens: 10,000 tokens a minute per API key. A request reserves 500 while the model runs, then settles at
// the tokens it used (`request.rateGuard.settle`): more or less than it reserved. A client that disconnects
// before the answer is given its reservation back (`refundAborted`).
//
//   node examples/llm-tokens.js          (after npm run build; REDIS_URL to count in Redis)
//   curl -i -X POST localhost:3000/chat -H 'x-api-key: key-acme-0001' -H 'content-type: application/json' -d '{"prompt":"hello"}'

import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'

const API_KEYS = new Set(['key-acme-0001'])

export const TOKEN_BUDGET = Object.freeze({ max: 10_000, timeWindow: '1 minute' })
export const RESERVED = 500

/**
 * A stand-in model: an answer costs 100 tokens, plus one per character of the prompt.
 * @param {string} prompt
 */
export async function fakeModel (prompt) {
  return { text: `You said: ${prompt.slice(0, 40)}`, usage: { totalTokens: 100 + prompt.length } }
}

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string, model?: typeof fakeModel }} options */
export async function buildApp ({ redis, nameSpace, model = fakeModel } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false, verifyApiKey: async (key) => API_KEYS.has(key) })
  app.post('/chat', { config: { rateLimit: { ...TOKEN_BUDGET, cost: RESERVED, refundAborted: true } } }, async (request) => {
    const answer = await model(String(/** @type {{ prompt?: unknown } | undefined} */ (request.body)?.prompt ?? ''))
    await request.rateGuard.settle(answer.usage.totalTokens)
    return answer
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`llm-tokens example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`)
}
