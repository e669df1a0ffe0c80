// GraphQL on Mercurius: a query's cost counted before it runs (Shopify's bucket: 1,000 points, 50 back a second)
// and settled to what it returned after; signIn at 5 a minute whatever the operation is called; every response
// with extensions.cost.
//
//   node examples/graphql.js          (after npm run build; REDIS_URL to count in Redis)
//   curl -s localhost:3000/graphql -H 'content-type: application/json' \
//     -d '{"query":"{ products(first: 20) { name reviews(first: 5) { body } } }"}'
//   curl -s localhost:3000/graphql -H 'content-type: application/json' -d '{"query":"mutation { signIn(user: \"ada\") }"}'
//
// The first asks 20 × (2 + 5 × 5) = 540 points and is charged what came back: 4 products with 2 reviews each,
// 4 × (2 + 2 × 5) = 48. Six signIn in a minute: the sixth is refused with extensions.code 'THROTTLED'.

import Fastify from 'fastify'
import mercurius from 'mercurius'
import rateGuard from 'fastify-rate-guard'
import mercuriusRateGuard from 'fastify-rate-guard/mercurius'

const schema = `
  type Review { body: String }
  type Product { name: String, reviews(first: Int): [Review!]! }
  type Query { products(first: Int): [Product!]! }
  type Mutation { signIn(user: String!): Boolean }
`

/** A toy catalogue: four products, two reviews each. */
const PRODUCTS = Array.from({ length: 4 }, (_, i) => ({ name: `product ${i}`, reviews: [{ body: 'good' }, { body: 'fine' }] }))

/** @typedef {{ first?: number }} ListArgs a list field's arguments */

const resolvers = {
  Query: { products: (/** @type {unknown} */ _, /** @type {ListArgs} */ { first = 10 }) => PRODUCTS.slice(0, first) },
  Product: {
    reviews: (/** @type {typeof PRODUCTS[number]} */ product, /** @type {ListArgs} */ { first = 10 }) => product.reviews.slice(0, first)
  },
  Mutation: { signIn: () => true }
}

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string }} options */
export async function buildApp ({ redis, nameSpace } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false })
  await app.register(mercurius, { schema, resolvers, allowBatchedQueries: true })
  await app.register(mercuriusRateGuard, {
    cost: { maximumAvailable: 1000, restoreRate: 50, fields: { 'Query.products': 2, 'Product.reviews': 5 } },
    operations: { signIn: { max: 5, timeWindow: '1 minute' } },
    introspection: { max: 10, timeWindow: '1 minute' }
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`graphql example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}/graphql`)
}
