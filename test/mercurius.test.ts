// The Mercurius adapter (lib/adapters/mercurius.ts): a query's cost spent before execution and settled after it,
// across two instances on one Redis; budgets per root field (aliases and renamed operations do not escape) and
// per operation type; a batch counted per operation; persisted queries counted as they resolve; introspection's
// own budget; refusals in GraphQL's shape (200 or 429, Retry-After); extensions.cost on every response; shadow
// mode; failMode with a Redis that does not answer; subscriptions open per client. In process and on Redis.
import { createHash } from 'node:crypto'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import mercurius from 'mercurius'
import { parse } from 'graphql'
import t from 'tap'
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import mercuriusRateGuard from '../lib/adapters/mercurius.js'
import type { MercuriusRateGuardOptions } from '../lib/adapters/mercurius.js'
import { actualCost, MAX_DEPTH, requestedCost, rootFieldsOf } from '../lib/adapters/graphql-cost.js'
import { client, getRedis, ready, startRedisServer, uniquePrefix } from './helpers/redis.js'
import { allowing } from './helpers/lag.js'

const schema = `
  type Review { body: String }
  type Product { id: ID!, name: String, reviews(first: Int): [Review!]!, related: Product }
  union Found = Product | Review
  type Query { products(first: Int): [Product!]!, product: Product, hello: String, found: [Found] }
  type Mutation { signIn(user: String): Boolean, forgotPassword(user: String): Boolean, other: Boolean }
  type Subscription { ticks: Int }
`

/** How many times the resolvers ran, by root field. */
type Runs = Record<string, number>

function resolversOf (runs: Runs): object {
  const ran = (name: string): void => { runs[name] = (runs[name] ?? 0) + 1 }
  return {
    // Three products in stock, each with two reviews: what a query asks for more of is not returned.
    Query: {
      products: (_: unknown, { first = 10 }: { first?: number }) => {
        ran('products')
        return Array.from({ length: Math.min(first, 3) }, (_, i) => ({ id: String(i), name: `p${i}` }))
      },
      product: () => { ran('product'); return null },
      hello: () => { ran('hello'); return 'world' },
      found: () => [{ __typename: 'Product', id: '1', name: 'x' }, { __typename: 'Review', body: 'y' }, null]
    },
    Found: { resolveType: (value: { __typename: string }) => value.__typename },
    Product: { reviews: (_: unknown, { first = 10 }: { first?: number }) => [{ body: 'a' }, { body: 'b' }].slice(0, first) },
    Mutation: {
      signIn: () => { ran('signIn'); return true },
      forgotPassword: () => { ran('forgotPassword'); return true },
      other: () => { ran('other'); return true }
    }
  }
}

interface Built { app: FastifyInstance, runs: Runs }

async function build (
  t: Test, options: MercuriusRateGuardOptions, guard: RateGuardOptions = {}, graphql: object = {}
): Promise<Built> {
  const runs: Runs = {}
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false, ...guard })
  await app.register(mercurius, { schema, resolvers: resolversOf(runs) as never, allowBatchedQueries: true, ...graphql })
  await app.register(mercuriusRateGuard, options)
  await app.ready()
  return { app, runs }
}

async function ask (app: FastifyInstance, query: string, variables?: object, operationName?: string): Promise<LightMyRequestResponse> {
  return await app.inject({ method: 'POST', url: '/graphql', payload: { query, variables, operationName } })
}

const EXPENSIVE = '{ products(first: 10) { name reviews(first: 9) { body } } }'
const WORKED = '{ products(first: 10) { name reviews(first: 5) { body } } }'
const FIELDS = { 'Query.products': 2, 'Product.reviews': 5 }

/** Redis for a test: a lent client on the shared server, under its own prefix. */
async function onRedis (t: Test): Promise<RateGuardOptions> {
  const { url } = await getRedis(t)
  // A deadline no loaded machine reaches: a decision past it would be let through uncounted (failMode 'open').
  return { redis: await ready(client(t, url, { enableOfflineQueue: false })), nameSpace: uniquePrefix(), timeout: 5000 }
}

t.test('the cost rule: requested before execution, actual from the result, in extensions.cost', async t => {
  const { app } = await build(t, { cost: { maximumAvailable: 1000, restoreRate: 50, fields: FIELDS } })
  const res = await ask(app, WORKED)
  t.equal(res.statusCode, 200)
  // requested: products 10 × (2 + reviews 5 × (5 + body 0)) = 270; actual: 3 products × (2 + 2 reviews × 5) = 36.
  const { cost } = res.json().extensions
  t.match(cost, { requestedQueryCost: 270, actualQueryCost: 36, throttleStatus: { maximumAvailable: 1000, restoreRate: 50 } })
  t.ok(cost.throttleStatus.currentlyAvailable >= 964 && cost.throttleStatus.currentlyAvailable <= 1000, 'the difference refunded')
  const cheap = (await ask(app, '{ hello }')).json().extensions.cost
  t.match(cheap, { requestedQueryCost: 1, actualQueryCost: 1 }, 'every operation costs at least 1')
  const variables = (await ask(app, 'query Q($n: Int) { products(first: $n) { name } }', { n: 2 })).json().extensions.cost
  t.match(variables, { requestedQueryCost: 4, actualQueryCost: 4 }, 'a list argument from a variable')
  const defaulted = (await ask(app, '{ products { id } product { name } }')).json().extensions.cost
  t.match(defaulted, { requestedQueryCost: 21, actualQueryCost: 6 }, 'defaultListSize 10 × 2, a nullable object 1 (null: 0 actual)')
})

for (const store of ['in process', 'Redis'] as const) {
  t.test(`${store}: an expensive query refused before execution, a cheap actual cost refunded so the next fits`, async t => {
    const guard = store === 'Redis' ? await onRedis(t) : {}
    const options = { cost: { maximumAvailable: 500, restoreRate: 1, maxQueryCost: 480, fields: FIELDS } }
    const one = await build(t, options, guard)
    // Two instances share one Redis: the second counts on the same budgets.
    const two = store === 'Redis' ? await build(t, options, guard) : one
    const started = Date.now()
    const first = (await ask(one.app, WORKED)).json()
    t.match(first.extensions.cost, { requestedQueryCost: 270, actualQueryCost: 36 })
    const second = await ask(two.app, WORKED)
    t.ok(second.json().data, 'fits: 500 − 36 left, not 500 − 270')
    t.equal(one.runs.products! + (store === 'Redis' ? two.runs.products! : 0), 2)
    const left = second.json().extensions.cost.throttleStatus.currentlyAvailable
    // 1 point a second restored meanwhile.
    const restored = Math.ceil((Date.now() - started) / 1000)
    t.ok(left >= 428 && left <= 428 + restored, `what is left after two settled at 36: ${left as number} (${restored} s restored at most)`)
    const refused = await ask(two.app, EXPENSIVE)
    const body = refused.json()
    t.equal(refused.statusCode, 200, 'errors in the body, status 200 by default')
    t.match(body.errors, [{ extensions: { code: 'THROTTLED', budget: 'cost' } }])
    t.match(body.extensions.cost, { requestedQueryCost: 470, actualQueryCost: null })
    t.match(refused.headers['retry-after'], /^\d+$/, 'Retry-After in whole seconds')
    t.equal((one.runs.products ?? 0) + (store === 'Redis' ? two.runs.products ?? 0 : 0), 2, 'the resolver did not run')
  })
}

t.test('a query over maxQueryCost is refused outright, spending nothing', async t => {
  const { app, runs } = await build(t, { cost: { maximumAvailable: 1000, restoreRate: 50, maxQueryCost: 400, fields: FIELDS } })
  const refused = (await ask(app, EXPENSIVE)).json()
  t.match(refused.errors, [{ message: /exceeds the maximum of 400: 470/, extensions: { code: 'MAX_COST_EXCEEDED' } }])
  t.match(refused.extensions.cost, { requestedQueryCost: 470, actualQueryCost: null, throttleStatus: { currentlyAvailable: null } })
  t.equal(runs.products, undefined, 'not run')
  t.equal((await ask(app, '{ hello }')).json().extensions.cost.throttleStatus.currentlyAvailable, 999, 'nothing was spent')
})

t.test('signIn limited apart from other fields; renaming the operation or aliasing does not escape', async t => {
  const { app, runs } = await build(t, { operations: { signIn: { max: 3, timeWindow: '1 minute' } }, cost: false })
  t.ok((await ask(app, 'mutation { signIn(user: "a") }')).json().data)
  t.ok((await ask(app, 'mutation A { x: signIn(user: "a") }')).json().data, 'an alias counts as the field')
  const renamed = (await ask(app, 'mutation Renamed { a: signIn(user: "a") b: signIn(user: "b") }')).json()
  t.match(renamed.errors, [{ extensions: { code: 'THROTTLED', budget: 'operation:signIn' } }], 'two occurrences: 2 of the 1 left')
  t.equal(renamed.extensions, undefined, 'cost: false: no extensions.cost')
  t.ok((await ask(app, 'mutation Renamed2 { signIn(user: "a") }')).json().data, 'the refused one counted nothing: 1 left')
  t.match((await ask(app, 'mutation Fresh { signIn(user: "a") }')).json().errors, [{ extensions: { code: 'THROTTLED' } }])
  t.ok((await ask(app, 'mutation { other forgotPassword(user: "a") }')).json().data, 'other fields untouched')
  t.equal(runs.signIn, 3)
  // The operator reaches the field's budget by its group's name (the client: inject's address, by the default key).
  const seen = await app.rateGuard.peek('127.0.0.1', { groupId: 'graphql operation:signIn' })
  t.match(seen, { max: 3, count: 3, remaining: 0 }, 'peek reads signIn\'s budget as graphql operation:signIn')
})

t.test('a refusal by one budget writes nothing to the others the operation asked', async t => {
  const { app } = await build(t, {
    cost: { maximumAvailable: 100, restoreRate: 1 },
    types: { mutation: { max: 10, timeWindow: '1 minute' } },
    operations: { signIn: { max: 1, timeWindow: '1 minute' } }
  })
  const started = Date.now()
  t.ok((await ask(app, 'mutation { signIn }')).json().data)
  const refused = (await ask(app, 'mutation { signIn other }')).json()
  t.match(refused.errors, [{ extensions: { code: 'THROTTLED', budget: 'operation:signIn' } }])
  const next = (await ask(app, 'mutation { other }')).json()
  // A point a second comes back: exact unless the machine stalled past a second.
  if (Date.now() - started < 1000) {
    t.equal(refused.extensions.cost.throttleStatus.currentlyAvailable, 99, 'the cost budget settled back to what it had')
    t.equal(next.extensions.cost.throttleStatus.currentlyAvailable, 98)
  }
})

t.test('a batch of 10 operations counts 10', async t => {
  const { app, runs } = await build(t, { operations: { hello: { max: 12, timeWindow: '1 minute' } } })
  const batch = await app.inject({ method: 'POST', url: '/graphql', payload: Array.from({ length: 10 }, () => ({ query: '{ hello }' })) })
  const answers = batch.json() as Array<{ data: unknown, extensions: { cost: { requestedQueryCost: number } } }>
  t.equal(answers.length, 10)
  t.ok(answers.every(a => a.data !== null && a.extensions.cost.requestedQueryCost === 1), 'each answered with its own extensions.cost')
  const over = (await app.inject({ method: 'POST', url: '/graphql', payload: [{ query: '{ hello }' }, { query: '{ hello }' }, { query: '{ hello }' }] })).json()
  t.match(over, [{ data: { hello: 'world' } }, { data: { hello: 'world' } }, { data: null, errors: [{ extensions: { code: 'THROTTLED' } }], extensions: { cost: {} } }])
  t.equal(runs.hello, 12)
})

t.test('persisted queries count by the operation they resolve to', async t => {
  const { app } = await build(t, { operations: { hello: { max: 2, timeWindow: '1 minute' } } }, {}, {
    persistedQueryProvider: mercurius.persistedQueryDefaults.automatic()
  })
  const query = '{ hello }'
  const sha256Hash = createHash('sha256').update(query).digest('hex')
  const extensions = { persistedQuery: { version: 1, sha256Hash } }
  const post = async (payload: object): Promise<any> => (await app.inject({ method: 'POST', url: '/graphql', payload })).json()
  t.match(await post({ extensions }), { errors: [{ message: 'PersistedQueryNotFound' }] }, 'not yet known')
  t.match(await post({ query, extensions }), { data: { hello: 'world' } }, 'persisted and run: 1')
  t.match(await post({ extensions }), { data: { hello: 'world' } }, 'by its hash: 2')
  t.match(await post({ extensions }), { errors: [{ extensions: { code: 'THROTTLED', budget: 'operation:hello' } }] })
})

t.test('introspection counts on its own budget, not the cost budget', async t => {
  const { app } = await build(t, { introspection: { max: 2, timeWindow: '1 minute' }, cost: { maximumAvailable: 10, restoreRate: 1 } })
  const introspect = '{ __schema { queryType { name } } }'
  for (let i = 0; i < 2; i++) {
    const { data, extensions } = (await ask(app, introspect)).json()
    t.ok(data.__schema)
    t.match(extensions.cost, { requestedQueryCost: 0, actualQueryCost: 0, throttleStatus: { currentlyAvailable: null } })
  }
  t.match((await ask(app, '{ __typename }')).json().errors, [{ extensions: { code: 'THROTTLED', budget: 'introspection' } }])
  t.equal((await ask(app, '{ hello }')).json().extensions.cost.throttleStatus.currentlyAvailable, 9, 'the cost budget untouched')
  const none = await build(t, { introspection: false, cost: false })
  for (let i = 0; i < 5; i++) t.ok((await ask(none.app, introspect)).json().data, 'introspection: false: not limited')
})

t.test('statusCode 429 over real HTTP: 429, 403 for a ban, Retry-After and the IETF fields', async t => {
  const { app } = await build(t, {
    statusCode: 429,
    operations: { signIn: { max: 1, timeWindow: '1 minute', ban: { threshold: 2, duration: '1 minute' } } },
    cost: false
  }, { standardHeaders: 'draft-10' })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/graphql`
  const post = async (query: string): Promise<Response> =>
    await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query }) })
  t.equal((await post('mutation { signIn }')).status, 200)
  const limited = await post('mutation { signIn }')
  t.equal(limited.status, 429)
  t.match(limited.headers.get('retry-after'), /^\d+$/)
  t.ok(limited.headers.get('ratelimit') !== null && limited.headers.get('ratelimit-policy') !== null, 'the IETF fields')
  t.match(await limited.json(), { data: null, errors: [{ extensions: { code: 'THROTTLED' } }] })
  const banned = await post('mutation { signIn }')
  t.equal(banned.status, 403)
  t.match(await banned.json(), { errors: [{ extensions: { code: 'BANNED' } }] })
  t.match(banned.headers.get('retry-after'), /^\d+$/)
})

t.test('shadow mode lets everything through', async t => {
  const { app, runs } = await build(t, {
    mode: 'shadow',
    operations: { signIn: { max: 1, timeWindow: '1 minute' } },
    cost: { maximumAvailable: 100, restoreRate: 1, maxQueryCost: 50, fields: FIELDS }
  })
  for (let i = 0; i < 3; i++) t.ok((await ask(app, 'mutation { signIn }')).json().data)
  t.ok((await ask(app, EXPENSIVE)).json().data, 'over maxQueryCost and the bucket: let through, reported')
  t.equal(runs.signIn, 3)
})

/** A client lent to the plugin, with the 'error' listener its owner attaches. */
async function lent (t: Test, url: string): Promise<Redis> {
  const redis = client(t, url, { enableOfflineQueue: false })
  redis.on('error', () => {})
  return await ready(redis)
}

t.test('a Redis that does not answer: failMode open answers within the deadline, closed refuses SERVICE_UNAVAILABLE', async t => {
  const server = await startRedisServer(t)
  const guard = { timeout: 200, breaker: false as const }
  const open = await build(t, { failMode: 'open', operations: { hello: { max: 5, timeWindow: '1 minute' } } },
    { redis: await lent(t, server.url), ...guard })
  const closed = await build(t, { failMode: 'closed', statusCode: 429, operations: { hello: { max: 5, timeWindow: '1 minute' } } },
    { redis: await lent(t, server.url), ...guard })
  server.freeze()
  t.teardown(() => server.stop())
  const started = performance.now()
  const answered = await ask(open.app, '{ hello }')
  const ms = performance.now() - started
  t.match(answered.json(), { data: { hello: 'world' } }, 'open: let through unenforced')
  const bound = allowing(400, started, started + ms)
  t.ok(ms <= bound, `answered in ${Math.round(ms)} ms (two budgets, deadline 200 each at once; bound ${Math.round(bound)})`)
  const refused = await ask(closed.app, '{ hello }')
  t.equal(refused.statusCode, 503)
  t.match(refused.json().errors, [{ extensions: { code: 'SERVICE_UNAVAILABLE' } }])
  t.match(refused.headers['retry-after'], /^\d+$/)
})

t.test('invalid options throw a coded InvalidOptionError at register', async t => {
  const cases: Array<[object, RegExp]> = [
    [{ cost: { maximumAvailable: 0, restoreRate: 1 } }, /mercurius\.cost\.maximumAvailable/],
    [{ cost: { maximumAvailable: 1.5 } }, /mercurius\.cost\.maximumAvailable/],
    [{ cost: { restoreRate: 'x' } }, /mercurius\.cost\.restoreRate/],
    [{ cost: { nope: 1 } }, /mercurius\.cost\.nope/],
    [{ cost: 'cheap' }, /mercurius\.cost"/],
    [{ cost: { fields: { 'Nope.x': 1 } } }, /mercurius\.cost\.fields\.Nope\.x/],
    [{ cost: { fields: { 'Query.nope': 1 } } }, /mercurius\.cost\.fields\.Query\.nope/],
    [{ cost: { fields: { 'Query.hello.x': 1 } } }, /mercurius\.cost\.fields/],
    [{ cost: { fields: { 'String.x': 1 } } }, /mercurius\.cost\.fields\.String\.x/],
    [{ cost: { fields: { 'Query.hello': -1 } } }, /mercurius\.cost\.fields\.Query\.hello/],
    [{ cost: { fields: [] } }, /mercurius\.cost\.fields/],
    [{ cost: { listArguments: 'first' } }, /mercurius\.cost\.listArguments/],
    [{ cost: { estimate: 1 } }, /mercurius\.cost\.estimate/],
    [{ actualCost: 'result' }, /mercurius\.actualCost/],
    [{ statusCode: 418 }, /mercurius\.statusCode/],
    [{ types: { fragment: { max: 1, timeWindow: 1000 } } }, /mercurius\.types\.fragment/],
    [{ types: 1 }, /mercurius\.types/],
    [{ operations: { nope: { max: 1, timeWindow: 1000 } } }, /mercurius\.operations\.nope/],
    [{ operations: [] }, /mercurius\.operations/],
    [{ operations: { signIn: 5 } }, /mercurius\.operations\.signIn/],
    [{ introspection: true }, /mercurius\.introspection/],
    [{ subscriptions: { max: 0 } }, /mercurius\.subscriptions\.max/],
    [{ subscriptions: {} }, /mercurius\.subscriptions\.max/],
    [{ subscriptions: { max: 1, lease: 1 } }, /mercurius\.subscriptions/],
    [{ unknownOption: true }, /unknownOption/],
    [{ operations: { signIn: { max: 1, timeWindow: 1000, nope: 1 } } }, /nope/],
    // Each budget's group is the adapter's (what every instance counts together on).
    [{ groupId: 'mine' }, /mercurius\.groupId/],
    [{ operations: { signIn: { max: 1, timeWindow: 1000, groupId: 'mine' } } }, /mercurius\.operations\.signIn\.groupId/]
  ]
  for (const [options, message] of cases) {
    await t.rejects(build(t, options as MercuriusRateGuardOptions), { code: 'FST_RATE_GUARD_INVALID_OPTION', message }, JSON.stringify(options))
  }
})

t.test('the walker: fragments, inline fragments, directives, unions; cycles and hostile documents bounded', async t => {
  const { buildSchema } = await import('graphql')
  const built = buildSchema(schema)
  const rule = { fields: new Map([['Query.products', 2], ['Product.reviews', 5]]), listArguments: ['first'], defaultListSize: 10 }
  const cost = (query: string, variables?: Record<string, unknown>): number => {
    const document = parse(query)
    const operation = document.definitions.find(d => d.kind === 'OperationDefinition') as never
    return requestedCost(built, document, operation, variables, rule)
  }
  t.equal(cost('{ products(first: 2) { ...P } } fragment P on Product { name reviews(first: 3) { body } }'), 2 * (2 + 3 * 5))
  t.equal(cost('{ products(first: 2) { ...P ...P } } fragment P on Product { id }'), 4, 'a fragment spread twice counts once')
  t.equal(cost('{ products(first: 2) { ... on Product { id } ... { name } } }'), 4, 'inline fragments, with and without a type')
  t.equal(cost('{ found { ... on Product { reviews { body } } ... on Review { body } } }'), 10 * (1 + 10 * 5), 'a union: each fragment counted')
  t.equal(cost('query Q($s: Boolean) { products(first: 2) @skip(if: $s) { id } hello @include(if: false) }', { s: true }), 0)
  t.equal(cost('query Q($s: Boolean) { products(first: 2) @skip(if: $s) @deprecated { id } }', { s: false }), 4)
  t.equal(cost('{ products(first: "x") { id } }'), 20, 'a list argument that is no whole number: the default size')
  t.equal(cost('{ products(first: -1) { id } }'), 20)
  t.equal(cost('{ ...Missing hello __typename }'), 0, 'an unknown fragment, a scalar, a meta field: nothing')
  t.equal(cost('{ ...A } fragment A on Query { ...B } fragment B on Query { ...A products(first: 1) { id } }'), 2, 'a fragment cycle followed once')
  t.equal(cost('{ ... on Nope { hello } }'), 0, 'an unknown type')
  const nested = (depth: number): string => `{ product { ${'related { '.repeat(depth - 1)}id${' }'.repeat(depth)} }`
  t.equal(cost(nested(MAX_DEPTH)), MAX_DEPTH, 'as deep as the bound')
  t.equal(cost(nested(MAX_DEPTH + 1)), Infinity, 'past it: Infinity, refused as over maxQueryCost')
  const chain = Array.from({ length: 10_000 }, (_, i) => `fragment F${i} on Query { ...F${i + 1} }`).join('\n')
  let started = performance.now()
  t.equal(cost(`{ ...F0 } ${chain} fragment F10000 on Query { hello }`), Infinity, '10,000 nested fragments: past the bound')
  t.ok(performance.now() - started < 1000, 'at once')
  const wide = Array.from({ length: 30 }, (_, i) => `fragment W${i} on Product { a: reviews { ...W${i + 1} } b: reviews { ...W${i + 1} } }`)
  started = performance.now()
  t.equal(cost(`{ product { ...W0 } } ${wide.join('\n')} fragment W30 on Product { id }`), Infinity, '2^30 paths: bounded by the visits')
  const many = `{ ${Array.from({ length: 25_000 }, (_, i) => `a${i}: hello`).join(' ')} }`
  t.equal(cost(many), Infinity, 'more selections than the bound')
  t.ok(performance.now() - started < 2000, 'at once')
  const roots = rootFieldsOf(built, parse('{ a: hello b: hello ...R } fragment R on Query { product { id } }'), parse('{ a: hello b: hello ...R } fragment R on Query { product { id } }').definitions[0] as never, undefined)
  t.same([...roots.fields], [['hello', 2], ['product', 1]])
  t.equal(roots.introspection, false)
  t.equal(rootFieldsOf(built, parse('{ ...Missing }'), parse('{ ...Missing }').definitions[0] as never, undefined).introspection, false, 'no root field: no introspection')
  const document = parse('{ found { ... on Product { reviews { body } } ... on Review { body } } products { id } }')
  const operation = document.definitions[0] as never
  const data = { found: [{ reviews: [{ body: 'a' }, null] }, { body: 'y' }, null], products: null }
  t.equal(actualCost(built, document, operation, undefined, rule, data), 1 + 5 + 1, 'each value returned; nulls nothing')
  t.equal(actualCost(built, document, operation, undefined, rule, null), 0)
  const deep = parse(nested(MAX_DEPTH + 1))
  let value: Record<string, unknown> = { id: '1' }
  for (let i = 0; i < MAX_DEPTH; i++) value = { related: value }
  value = { product: value }
  t.equal(actualCost(built, deep, deep.definitions[0] as never, undefined, rule, value), Infinity, 'past the bound: Infinity')
  const aliased = parse('{ x: products { id } }')
  t.equal(actualCost(built, aliased, aliased.definitions[0] as never, undefined, rule, { x: [{ id: '1' }] }), 2, 'by the alias')
  // A document given as an AST (Mercurius takes one), without the arrays the parser always fills in.
  const bare = {
    kind: 'Document',
    definitions: [{
      kind: 'OperationDefinition',
      operation: 'query',
      selectionSet: {
        kind: 'SelectionSet',
        selections: [
          { kind: 'Field', name: { kind: 'Name', value: 'product' }, directives: [{ kind: 'Directive', name: { value: 'skip' } }] },
          { kind: 'Field', name: { kind: 'Name', value: 'hello' } }
        ]
      }
    }]
  }
  t.equal(requestedCost(built, bare as never, bare.definitions[0] as never, undefined, rule), 1)
  const bare2 = parse('subscription { ticks }')
  const noSubscriptions = buildSchema('type Query { a: Int }')
  t.equal(requestedCost(noSubscriptions, bare2, bare2.definitions[0] as never, undefined, rule), 0, 'a root type the schema lacks')
  t.equal(actualCost(noSubscriptions, bare2, bare2.definitions[0] as never, undefined, rule, { ticks: 1 }), 0)
  const list = parse('{ products { id } }')
  const long = { products: Array.from({ length: 300_000 }, () => ({ id: '1' })) }
  t.equal(actualCost(built, list, list.definitions[0] as never, undefined, rule, long), Infinity, 'a result past the bound')
})

t.test('the app\'s own estimate and actual cost; actualCost false; a failing one falls back', async t => {
  const estimate = (): number => 7
  const own = await build(t, { cost: { maximumAvailable: 100, restoreRate: 1, estimate }, actualCost: () => 3 })
  t.match((await ask(own.app, '{ hello }')).json().extensions.cost, { requestedQueryCost: 7, actualQueryCost: 3 })
  const none = await build(t, { cost: { maximumAvailable: 100, restoreRate: 1 }, actualCost: false })
  t.match((await ask(none.app, '{ products(first: 10) { id } }')).json().extensions.cost, { requestedQueryCost: 10, actualQueryCost: 10 }, 'no refund')
  const failing = await build(t, {
    cost: { maximumAvailable: 100, restoreRate: 1, estimate: () => { throw new Error('no') } },
    actualCost: () => { throw new Error('no') }
  })
  t.match((await ask(failing.app, '{ products(first: 10) { id } }')).json().extensions.cost, { requestedQueryCost: 10, actualQueryCost: 10 },
    'the walker\'s estimate; the requested as actual')
  const odd = await build(t, { cost: { maximumAvailable: 100, restoreRate: 1, estimate: () => Number.NaN, maxQueryCost: 50 } })
  t.match((await ask(odd.app, '{ hello }')).json().errors, [{ extensions: { code: 'MAX_COST_EXCEEDED' } }], 'NaN: over any maximum')
  const strange = await build(t, { cost: { maximumAvailable: 100, restoreRate: 1 }, actualCost: () => 'many' as never })
  t.match((await ask(strange.app, '{ products(first: 10) { id } }')).json().extensions.cost, { actualQueryCost: 10 })
})

t.test('GET queries, a named operation among several, and app.graphql() without a request', async t => {
  const { app, runs } = await build(t, { operations: { hello: { max: 1, timeWindow: '1 minute' } } })
  const get = await app.inject({ method: 'GET', url: '/graphql?query=' + encodeURIComponent('{ hello }') })
  t.match(get.json(), { data: { hello: 'world' }, extensions: { cost: { requestedQueryCost: 1 } } })
  const named = await ask(app, 'query A { product { id } } query B { hello }', undefined, 'B')
  t.match(named.json().errors, [{ extensions: { code: 'THROTTLED', budget: 'operation:hello' } }], 'B named: hello counted')
  t.ok((await ask(app, 'query A { product { id } } query B { hello }', undefined, 'A')).json().data)
  t.match(await app.graphql('{ hello }'), { data: { hello: 'world' } }, 'no request: not limited')
  t.equal(runs.hello, 2)
  const invalid = await app.inject({ method: 'POST', url: '/graphql', payload: [{ query: '{ nope }' }, { query: '{ product { id } }' }] })
  t.match(invalid.json(), [{ errors: [{}] }, { data: { product: null }, extensions: { cost: {} } }], 'an invalid entry: no cost')
  t.equal(invalid.json()[0].extensions, undefined)
  const ambiguous = await ask(app, 'query A { product { id } } query B { hello }')
  t.match(ambiguous.json(), { errors: [{}] }, 'several operations, none named: Mercurius refuses it')
})

interface Socket {
  on: (event: 'message', listener: (data: unknown) => void) => void
  once: (event: 'open', listener: () => void) => void
  send: (data: string) => void
  close: () => void
}

/** A graphql-transport-ws client: its messages in order (`next`: the next, or null after `ms`), and a way to send. */
async function subscriber (url: string): Promise<{ send: (message: object) => void, next: (ms?: number) => Promise<any>, close: () => void }> {
  // ws has no types here (no @types/ws): the little of it used, typed.
  const ws = 'ws'
  const { default: WebSocket } = await import(ws) as { default: new (url: string, protocol: string) => Socket }
  const socket = new WebSocket(url, 'graphql-transport-ws')
  const queued: any[] = []
  let waiting: ((message: any) => void) | undefined
  socket.on('message', data => {
    queued.push(JSON.parse(String(data)))
    waiting?.(queued.shift())
    waiting = undefined
  })
  await new Promise<void>(resolve => { socket.once('open', resolve) })
  return {
    send: message => { socket.send(JSON.stringify(message)) },
    next: async (ms = 5000) => queued.length > 0
      ? queued.shift()
      : await new Promise(resolve => {
        const timer = setTimeout(() => { waiting = undefined; resolve(null) }, ms)
        waiting = message => { clearTimeout(timer); resolve(message) }
      }),
    close: () => { socket.close() }
  }
}

/** Publishes a tick until each subscription of `ids` receives one (or gives up after 200); the ids that received. */
async function receiving (app: FastifyInstance, client: { next: (ms?: number) => Promise<any> }, ...ids: string[]): Promise<Set<string>> {
  const seen = new Set<string>()
  for (let i = 0; i < 200 && !ids.every(id => seen.has(id)); i++) {
    await app.graphql.pubsub.publish({ topic: 'ticks', payload: { ticks: i } })
    for (;;) {
      const message = await client.next(20)
      if (message === null) break
      if (message.type === 'next') seen.add(message.id)
      if (message.type === 'error') seen.add(`error:${String(message.id)}`)
    }
  }
  return seen
}

t.test('subscriptions: at most max open per client; a stopped one, or a closed connection, frees its slot', async t => {
  const { app } = await build(t, { subscriptions: { max: 2 }, statusCode: 429 }, {}, {
    subscription: true,
    resolvers: {
      ...resolversOf({}) as object,
      Subscription: { ticks: { subscribe: async (_: unknown, __: unknown, { pubsub }: any) => await pubsub.subscribe('ticks') } }
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `ws://127.0.0.1:${(app.server.address() as { port: number }).port}/graphql`
  const one = await subscriber(url)
  one.send({ type: 'connection_init' })
  t.match(await one.next(), { type: 'connection_ack' })
  const subscribe = (client: typeof one, id: string): void => { client.send({ id, type: 'subscribe', payload: { query: 'subscription { ticks }' } }) }
  subscribe(one, '1')
  subscribe(one, '2')
  subscribe(one, '3')
  t.match(await one.next(), { id: '3', type: 'error', payload: [{ extensions: { code: 'THROTTLED', budget: 'subscriptions' } }] }, 'the third refused')
  one.send({ id: '1', type: 'complete' })
  subscribe(one, '4')
  // Until the fourth receives (its hold is answered after the stop): what each subscription received.
  const seen = await receiving(app, one, '2', '4')
  t.ok(seen.has('2') && seen.has('4') && !seen.has('error:4'), `the fourth took the slot the stopped first freed: ${[...seen].join(', ')}`)
  one.close()
  // Until the server has seen the first connection close (its close hook frees the slots).
  const open = async (): Promise<number> => await new Promise(resolve => app.server.getConnections((_, count) => { resolve(count) }))
  while (await open() > 0) await new Promise(resolve => setImmediate(resolve))
  const idle = await subscriber(url)
  idle.send({ type: 'connection_init' })
  t.match(await idle.next(), { type: 'connection_ack' })
  idle.close()
  const two = await subscriber(url)
  two.send({ type: 'connection_init' })
  t.match(await two.next(), { type: 'connection_ack' })
  subscribe(two, 'a')
  subscribe(two, 'b')
  const again = await receiving(app, two, 'a', 'b')
  t.ok(again.has('a') && again.has('b'), `a new connection of the client gets both slots once the first closed: ${[...again].join(', ')}`)
  two.close()
})

t.test('subscriptions: their root field\'s and type\'s budgets spent at the start; a refused slot gives them back', async t => {
  const { app } = await build(t, {
    subscriptions: { max: 1 },
    operations: { ticks: { max: 2, timeWindow: '1 minute' } },
    types: { subscription: { max: 10, timeWindow: '1 minute' } }
  }, {}, {
    subscription: true,
    resolvers: {
      ...resolversOf({}) as object,
      Subscription: { ticks: { subscribe: async (_: unknown, __: unknown, { pubsub }: any) => await pubsub.subscribe('ticks') } }
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const one = await subscriber(`ws://127.0.0.1:${(app.server.address() as { port: number }).port}/graphql`)
  one.send({ type: 'connection_init' })
  t.match(await one.next(), { type: 'connection_ack' })
  const subscribe = (id: string): void => { one.send({ id, type: 'subscribe', payload: { query: 'subscription { ticks }' } }) }
  subscribe('1')
  subscribe('2')
  t.match(await one.next(), { id: '2', type: 'error', payload: [{ extensions: { code: 'THROTTLED', budget: 'subscriptions' } }] },
    'the second: ticks counted 2 of 2, then no slot: ticks given back')
  one.send({ id: '1', type: 'complete' })
  subscribe('3')
  t.ok((await receiving(app, one, '3')).has('3'), 'the third: ticks 2 of 2 (the refused one gave its count back), the freed slot')
  one.send({ id: '3', type: 'complete' })
  subscribe('4')
  t.match(await one.next(), { id: '4', type: 'error', payload: [{ extensions: { code: 'THROTTLED', budget: 'operation:ticks' } }] })
  one.close()
  const typed = await build(t, { types: { subscription: { max: 1, timeWindow: '1 minute' } }, cost: false }, {}, {
    subscription: true,
    resolvers: {
      ...resolversOf({}) as object,
      Subscription: { ticks: { subscribe: async (_: unknown, __: unknown, { pubsub }: any) => await pubsub.subscribe('ticks') } }
    }
  })
  await typed.app.listen({ port: 0, host: '127.0.0.1' })
  const two = await subscriber(`ws://127.0.0.1:${(typed.app.server.address() as { port: number }).port}/graphql`)
  two.send({ type: 'connection_init' })
  t.match(await two.next(), { type: 'connection_ack' })
  two.send({ id: 'a', type: 'subscribe', payload: { query: 'subscription { ticks }' } })
  two.send({ id: 'b', type: 'subscribe', payload: { query: 'subscription { ticks }' } })
  t.match(await two.next(), { id: 'b', type: 'error', payload: [{ extensions: { code: 'THROTTLED', budget: 'type:subscription' } }] })
  two.close()
})
