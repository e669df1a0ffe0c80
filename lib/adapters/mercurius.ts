// GraphQL on Mercurius (`fastify-rate-guard/mercurius`): a plugin registered after fastify-rate-guard and
// Mercurius that spends budgets by hand (fastify.rateGuard.budget()) for each operation: its requested cost on a
// token bucket before execution (Mercurius's preExecution hook: the document resolved, a batch's operations each
// apart), settled to its actual cost after it (onResolution); budgets per root field and per operation type; its
// own budget for introspection; subscriptions open per client held as slots. A refusal is Mercurius's
// ErrorWithProps with `extensions.code`; every response carries Shopify's `extensions.cost`.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { getOperationAST, Kind } from 'graphql'
import type { DocumentNode, ExecutionResult, GraphQLSchema, OperationDefinitionNode } from 'graphql'
import type { MercuriusContext } from 'mercurius'
import type { RateGuardBudget } from '../limiters.js'
import type { HeldSlots, Spent } from '../request/spend.js'
import { actualCost, requestedCost, rootFieldsOf } from './graphql-cost.js'
import { codeOf, quoted, refusal } from './graphql-response.js'
import type { QueryCost } from './graphql-response.js'
import { checkOptions } from './mercurius-options.js'
import type { CheckedCost, CheckedOptions, MercuriusRateGuardOptions } from './mercurius-options.js'

export type { CostOptions, ActualCost, LimitEntry, MercuriusRateGuardOptions } from './mercurius-options.js'
export type { QueryCost, RefusalCode } from './graphql-response.js'

/** What an operation spent, kept on its context from preExecution to onResolution. */
interface Admitted {
  readonly document: DocumentNode
  readonly operation: OperationDefinitionNode
  readonly variables: Record<string, unknown> | undefined
  readonly requested: number
  readonly spent: Spent | undefined
}

/** A budget asked for an operation, and how many units. */
interface Ask { readonly name: string, readonly budget: RateGuardBudget, readonly cost: number }

const ADMITTED = Symbol('rateGuard.graphql.admitted')
/** The `extensions.cost` of a request's operations, by operationId (0 for a request of one). */
const COSTS = Symbol('rateGuard.graphql.costs')

type Context = MercuriusContext & { [ADMITTED]?: Admitted }
type Costly = FastifyRequest & { [COSTS]?: Array<QueryCost | undefined> }

interface Budgets {
  readonly cost: RateGuardBudget | null
  readonly operations: ReadonlyMap<string, RateGuardBudget>
  readonly types: ReadonlyMap<string, RateGuardBudget>
  readonly introspection: RateGuardBudget | null
  readonly subscriptions: RateGuardBudget | null
}

/**
 * Every budget the options name, made once at register; each with the common route options under its own, in a
 * group named after what it limits (`graphql operation:signIn`): the same on every instance registered alike,
 * whatever order the budgets are made in, and the name the operator's calls take (`peek(key, { groupId })`).
 */
function budgetsOf (fastify: FastifyInstance, checked: CheckedOptions): Budgets {
  const make = (own: object, name: string): RateGuardBudget =>
    fastify.rateGuard.budget({ ...checked.common, ...own, groupId: `graphql ${name}` })
  const each = (entries: ReadonlyMap<string, object>, kind: string): Map<string, RateGuardBudget> =>
    new Map([...entries].map(([name, own]) => [name, make(own, `${kind}:${name}`)]))
  const { cost } = checked
  return {
    cost: cost === null
      ? null
      : make({ algorithm: 'token-bucket', max: cost.restoreRate, timeWindow: 1000, burst: cost.maximumAvailable }, 'cost'),
    operations: each(checked.operations, 'operation'),
    types: each(checked.types, 'type'),
    introspection: checked.introspection === null ? null : make(checked.introspection, 'introspection'),
    subscriptions: checked.subscriptions === null ? null : make({ concurrency: { max: checked.subscriptions } }, 'subscriptions')
  }
}

/** The operation the request names (a batch's: its own entry's `operationName`). */
function operationOf (document: DocumentNode, context: Context): OperationDefinitionNode | null {
  const { request } = context.reply
  const body = request.body as unknown
  const entry = Array.isArray(body) ? body[context.operationId!] as unknown : body ?? request.query
  const name = (entry as { operationName?: unknown } | undefined)?.operationName
  return getOperationAST(document, typeof name === 'string' && name !== '' ? name : undefined) ?? null
}

/** The query's requested cost: the app's estimate or the walker's, at least 1 (every operation is worth a point). */
function requestedOf (
  cost: CheckedCost, schema: GraphQLSchema, document: DocumentNode, operation: OperationDefinitionNode,
  variables: Record<string, unknown> | undefined, context: Context
): number {
  let asked: number
  if (cost.estimate === undefined) asked = requestedCost(schema, document, operation, variables, cost)
  else {
    try {
      asked = cost.estimate(document, variables, context)
    } catch (err) {
      context.reply.request.log.error({ err }, 'rate-guard: cost.estimate threw; the walker\'s cost counts')
      asked = requestedCost(schema, document, operation, variables, cost)
    }
  }
  if (Number.isNaN(asked)) asked = Infinity
  return Math.max(1, Math.ceil(asked))
}

/** Records an operation's `extensions.cost` for the response (a batch's by its operationId). */
function record (context: Context, cost: QueryCost): void {
  const request = context.reply.request as Costly
  const costs = request[COSTS] ??= []
  costs[context.operationId ?? 0] = cost
}

/** The budgets an operation asks, and its requested cost (0 when the cost budget is not asked). */
function asksOf (
  checked: CheckedOptions, budgets: Budgets, schema: GraphQLSchema, document: DocumentNode, operation: OperationDefinitionNode,
  variables: Record<string, unknown> | undefined, context: Context
): { asks: Ask[], requested: number } {
  const { fields, introspection } = rootFieldsOf(schema, document, operation, variables)
  const asks: Ask[] = []
  let requested = 0
  if (introspection && budgets.introspection !== null) asks.push({ name: 'introspection', budget: budgets.introspection, cost: 1 })
  else if (checked.cost !== null) {
    requested = requestedOf(checked.cost, schema, document, operation, variables, context)
    asks.push({ name: 'cost', budget: budgets.cost!, cost: requested })
  }
  const type = budgets.types.get(operation.operation)
  if (type !== undefined) asks.push({ name: `type:${operation.operation}`, budget: type, cost: 1 })
  for (const [name, count] of fields) {
    const own = budgets.operations.get(name)
    if (own !== undefined) asks.push({ name: `operation:${name}`, budget: own, cost: count })
  }
  return { asks, requested }
}

/**
 * Spends each budget the operation asks (together: one round trip's wait); a refusal by one settles what the
 * others counted to 0 (a refused operation writes nothing to its budgets) and is thrown, its headers written.
 */
async function admit (
  checked: CheckedOptions, budgets: Budgets, schema: GraphQLSchema, document: DocumentNode,
  variables: Record<string, unknown> | undefined, context: Context
): Promise<void> {
  const operation = operationOf(document, context)
  if (operation === null) return
  const { asks, requested } = asksOf(checked, budgets, schema, document, operation, variables, context)
  const cost = checked.cost
  const costly = asks.some(ask => ask.name === 'cost')
  const shadow = checked.common.mode === 'shadow'
  const request = context.reply.request
  if (costly && requested > cost!.maxQueryCost) {
    if (!shadow) {
      record(context, quoted(cost!, requested, null, undefined, 0, 0))
      throw refusal(checked.statusCode, 'MAX_COST_EXCEEDED', 'cost', ` of ${cost!.maxQueryCost}: ${requested}`)
    }
    request.log.info({ rateGuard: { requested, maxQueryCost: cost!.maxQueryCost } }, 'rate-guard: shadow: query cost over the maximum')
  }
  const { spents, refused } = await spendAll(asks, request)
  const spent = costly ? spents[asks.findIndex(ask => ask.name === 'cost')] : undefined
  if (refused !== -1) {
    if (cost !== null) record(context, quoted(cost, requested, null, spent, spent?.charged ?? 0, 0))
    const by = spents[refused]!
    by.writeHeaders(context.reply)
    throw refusal(checked.statusCode, codeOf(by.outcome), asks[refused]!.name)
  }
  context[ADMITTED] = { document, operation, variables, requested, spent }
}

/** Spends each budget asked, together (one round trip's wait); on a refusal, what the others counted is settled to 0. */
async function spendAll (asks: readonly Ask[], request: FastifyRequest): Promise<{ spents: Spent[], refused: number }> {
  const spents = await Promise.all(asks.map(async ask => await ask.budget.spend(request, { cost: ask.cost })))
  const refused = spents.findIndex(one => !one.ok)
  if (refused !== -1) await settleAll(spents)
  return { spents, refused }
}

async function settleAll (spents: readonly Spent[]): Promise<void> {
  await Promise.all(spents.map(async one => { if (one.charged > 0) await one.settle(0) }))
}

/** The operation's actual cost, at most its requested: measured, the app's, or (false, or a bad answer) the requested. */
function actualOf (checked: CheckedOptions, schema: GraphQLSchema, admitted: Admitted, execution: ExecutionResult, context: Context): number {
  const { actualCost: measure } = checked
  const { requested } = admitted
  let actual = requested
  try {
    if (measure === 'data') actual = actualCost(schema, admitted.document, admitted.operation, admitted.variables, checked.cost!, execution.data)
    else if (measure !== false) actual = measure(execution, context)
  } catch (err) {
    context.reply.request.log.error({ err }, 'rate-guard: actualCost threw; the requested cost counts')
  }
  if (typeof actual !== 'number' || Number.isNaN(actual)) return requested
  return Math.min(requested, Math.max(1, Math.ceil(actual)))
}

/** After execution: the cost spend settled to the actual cost (when it differs), and the operation's `extensions.cost`. */
async function settle (checked: CheckedOptions, schema: GraphQLSchema, execution: ExecutionResult, context: Context): Promise<void> {
  const admitted = context[ADMITTED]
  if (admitted === undefined || checked.cost === null) return
  // Introspection, on its own budget: nothing asked of the cost budget.
  if (admitted.requested === 0) return record(context, quoted(checked.cost, 0, 0, undefined, 0, 0))
  const actual = actualOf(checked, schema, admitted, execution, context)
  const { spent } = admitted
  const charged = spent!.charged
  if (actual !== admitted.requested && charged > 0) await spent!.settle(actual)
  record(context, quoted(checked.cost, admitted.requested, actual, spent, charged, charged > 0 ? actual : 0))
}

/** Puts each operation's `extensions.cost` on the response (a batch's, each on its own entry). */
function addCosts (request: Costly, payload: unknown): unknown {
  const costs = request[COSTS]
  if (costs === undefined) return payload
  // A batch's entry refused before preExecution (invalid) has no cost to put.
  const put = (entry: { extensions?: Record<string, unknown> }, cost: QueryCost | undefined): void => {
    if (cost !== undefined) entry.extensions = { ...entry.extensions, cost }
  }
  // preSerialization is called with objects only (never a string, a Buffer, a stream or null).
  if (Array.isArray(payload)) payload.forEach((entry, i) => { put(entry, costs[i]) })
  else put(payload as object, costs[0])
  return payload
}

/**
 * Subscriptions: their type's budget and their root fields' spent at the start (preSubscriptionExecution), and,
 * under `subscriptions`, a slot held until the client stops the subscription or its connection closes.
 */
function limitSubscriptions (fastify: FastifyInstance, checked: CheckedOptions, budgets: Budgets): void {
  // The slots of each connection's subscriptions, by the connection's request and the subscription's id.
  const open = new WeakMap<object, Map<unknown, HeldSlots>>()
  fastify.graphql.addHook('preSubscriptionExecution', async (schema, document, context, id) => {
    const request = (context as unknown as { request: FastifyRequest }).request
    // Mercurius runs this hook for a subscription operation only.
    const operation = document.definitions.find(d => d.kind === Kind.OPERATION_DEFINITION && d.operation === 'subscription')
    const { fields } = rootFieldsOf(schema, document, operation as OperationDefinitionNode, undefined)
    const asks: Ask[] = []
    const type = budgets.types.get('subscription')
    if (type !== undefined) asks.push({ name: 'type:subscription', budget: type, cost: 1 })
    for (const [name, count] of fields) {
      const own = budgets.operations.get(name)
      if (own !== undefined) asks.push({ name: `operation:${name}`, budget: own, cost: count })
    }
    const { spents, refused } = await spendAll(asks, request)
    if (refused !== -1) throw refusal(checked.statusCode, codeOf(spents[refused]!.outcome), asks[refused]!.name)
    if (budgets.subscriptions === null) return
    const held = await budgets.subscriptions.hold(request)
    if (!held.ok) {
      await settleAll(spents)
      throw refusal(checked.statusCode, codeOf(held.outcome), 'subscriptions')
    }
    const slots = open.get(request) ?? new Map<unknown, HeldSlots>()
    open.set(request, slots)
    slots.set(id, held)
  })
  const release = (request: object, id?: unknown): void => {
    const slots = open.get(request)
    if (slots === undefined) return
    for (const [key, held] of slots) {
      if (id !== undefined && key !== id) continue
      held.release()
      slots.delete(key)
    }
  }
  fastify.graphql.addHook('onSubscriptionEnd', async (context, id) => {
    release((context as unknown as { request: FastifyRequest }).request, id)
  })
  fastify.graphql.addHook('onSubscriptionConnectionClose', async (context) => {
    release((context as unknown as { request: FastifyRequest }).request)
  })
}

async function mercuriusRateGuard (fastify: FastifyInstance, options: MercuriusRateGuardOptions): Promise<void> {
  const checked = checkOptions(options, fastify.graphql.schema)
  const budgets = budgetsOf(fastify, checked)
  fastify.graphql.addHook('preExecution', async (schema, document, context, variables) => {
    if ((context as Context).reply === undefined) return
    await admit(checked, budgets, schema, document, variables as Record<string, unknown> | undefined, context as Context)
  })
  fastify.graphql.addHook('onResolution', async (execution, context) => {
    await settle(checked, fastify.graphql.schema, execution, context as Context)
  })
  fastify.addHook('preSerialization', (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done) => {
    done(null, addCosts(request as Costly, payload))
  })
  if (budgets.subscriptions !== null || budgets.types.has('subscription') || budgets.operations.size > 0) {
    limitSubscriptions(fastify, checked, budgets)
  }
}

export default fp(mercuriusRateGuard, {
  fastify: '5.x',
  name: 'fastify-rate-guard/mercurius',
  dependencies: ['fastify-rate-guard', 'mercurius']
})
