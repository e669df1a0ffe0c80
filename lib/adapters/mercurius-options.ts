// The Mercurius adapter's options (./mercurius.ts), checked once at register against the app's schema into a
// frozen object: a bad value, an unknown name, a field or root field the schema does not have, each a coded
// InvalidOptionError naming it. The common route options given beside (mode, failMode, keyGenerator...) are
// handed to every budget the adapter makes, which checks them as a limiter's.
import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql'
import { InvalidOptionError } from '../errors.js'
import type { RouteRateLimitOptions } from '../types.js'
import type { CostRule } from './graphql-cost.js'

/** The cost budget and how a query is priced (Shopify's: a bucket of 1,000 points, 50 restored a second). */
export interface CostOptions {
  /** The bucket's size: the most a client can spend at once. Default 1000. */
  maximumAvailable?: number
  /** Points restored a second. Default 50. */
  restoreRate?: number
  /** The most one query may ask; above, refused outright (`MAX_COST_EXCEEDED`). Default `maximumAvailable`. */
  maxQueryCost?: number
  /** Per-field costs, `'Type.field': cost` (a whole number from 0). Default: 1 for an object, interface or union field, 0 for the rest. */
  fields?: Record<string, number>
  /** Arguments whose value is a list's size. Default `['first', 'last', 'limit']`. */
  listArguments?: string[]
  /** A list's size without one of them. Default 10. */
  defaultListSize?: number
  /** The app's own requested cost, instead of the walker's. */
  estimate?: (document: DocumentNode, variables: Record<string, unknown> | undefined, context: unknown) => number
}

/** The actual cost after execution: walked over the result's data, the app's function, or none (no refund). */
export type ActualCost = 'data' | ((result: ExecutionResult, context: unknown) => number) | false

/** A budget's limits, as a route's `config.rateLimit` (max/timeWindow, limits, algorithm, ban, maxWait...). */
export type LimitEntry = RouteRateLimitOptions

export interface MercuriusRateGuardOptions extends Omit<RouteRateLimitOptions, 'cost'> {
  cost?: CostOptions | false
  actualCost?: ActualCost
  /** Budgets by root field name (aliases resolved; each occurrence counts one). */
  operations?: Record<string, LimitEntry>
  /** Budgets by operation type. */
  types?: { query?: LimitEntry, mutation?: LimitEntry, subscription?: LimitEntry }
  /** Introspection's own budget (root fields only `__schema`, `__type`, `__typename`). Default 60 a minute; false: none. */
  introspection?: LimitEntry | false
  /** A refusal's HTTP status: 200 with the error in the body (default, as Shopify), or 429 (403 banned, 503 unavailable). */
  statusCode?: 200 | 429
  /** Subscriptions open at once per client. */
  subscriptions?: { max: number } | false
}

export interface CheckedCost extends CostRule {
  readonly maximumAvailable: number
  readonly restoreRate: number
  readonly maxQueryCost: number
  readonly estimate: CostOptions['estimate'] | undefined
}

export interface CheckedOptions {
  readonly cost: CheckedCost | null
  readonly actualCost: ActualCost
  readonly operations: ReadonlyMap<string, LimitEntry>
  readonly types: ReadonlyMap<string, LimitEntry>
  readonly introspection: LimitEntry | null
  readonly statusCode: 200 | 429
  readonly subscriptions: number | null
  /** The common route options, for every budget. */
  readonly common: Omit<RouteRateLimitOptions, 'cost'>
}

const OWN = new Set(['cost', 'actualCost', 'operations', 'types', 'introspection', 'statusCode', 'subscriptions'])
const COST_KEYS = new Set(['maximumAvailable', 'restoreRate', 'maxQueryCost', 'fields', 'listArguments', 'defaultListSize', 'estimate'])
const TYPES = new Set(['query', 'mutation', 'subscription'])
export const INTROSPECTION_DEFAULT: LimitEntry = Object.freeze({ max: 60, timeWindow: '1 minute' })

function fail (name: string, message: string): never {
  throw new InvalidOptionError(`mercurius.${name}`, message)
}

function isObject (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function wholeNumber (name: string, value: unknown, least: number, fallback: number): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < least) {
    fail(name, `expected a whole number from ${least}, got ${String(value)}`)
  }
  return value
}

function known (name: string, given: Record<string, unknown>, names: ReadonlySet<string>): void {
  for (const key of Object.keys(given)) if (!names.has(key)) fail(`${name}.${key}`, `no such option; expected one of ${[...names].join(', ')}`)
}

/** `fields`: each key a type's field in the schema, each value a whole number from 0. */
function checkFields (given: unknown, schema: GraphQLSchema): Map<string, number> {
  const fields = new Map<string, number>()
  if (given === undefined) return fields
  if (!isObject(given)) fail('cost.fields', 'expected an object of \'Type.field\': cost')
  for (const [key, value] of Object.entries(given)) {
    const parts = key.split('.')
    const found = parts.length === 2 ? schema.getType(parts[0]!) : undefined
    if (found === undefined || !('getFields' in found) || found.getFields()[parts[1]!] === undefined) {
      fail(`cost.fields.${key}`, 'no such field in the schema (\'Type.field\')')
    }
    fields.set(key, wholeNumber(`cost.fields.${key}`, value, 0, 0))
  }
  return fields
}

function checkCost (given: unknown, schema: GraphQLSchema): CheckedCost | null {
  if (given === false) return null
  if (given !== undefined && !isObject(given)) fail('cost', 'expected an object, or false')
  const cost = given ?? {}
  known('cost', cost, COST_KEYS)
  const maximumAvailable = wholeNumber('cost.maximumAvailable', cost.maximumAvailable, 1, 1000)
  const listArguments = cost.listArguments ?? ['first', 'last', 'limit']
  if (!Array.isArray(listArguments) || !listArguments.every(a => typeof a === 'string' && a !== '')) {
    fail('cost.listArguments', 'expected an array of argument names')
  }
  if (cost.estimate !== undefined && typeof cost.estimate !== 'function') fail('cost.estimate', 'expected a function')
  return Object.freeze({
    maximumAvailable,
    restoreRate: wholeNumber('cost.restoreRate', cost.restoreRate, 1, 50),
    maxQueryCost: wholeNumber('cost.maxQueryCost', cost.maxQueryCost, 1, maximumAvailable),
    fields: checkFields(cost.fields, schema),
    listArguments: Object.freeze([...listArguments as string[]]),
    defaultListSize: wholeNumber('cost.defaultListSize', cost.defaultListSize, 0, 10),
    estimate: cost.estimate as CostOptions['estimate']
  })
}

/**
 * A budget's limits: an object (its options checked by the budget made of it), without a `groupId`: the adapter
 * names each budget's group itself (`graphql operation:signIn`), so instances count together.
 */
function entry (name: string, value: unknown): LimitEntry {
  if (!isObject(value)) fail(name, 'expected a budget\'s options (max / timeWindow, limits...)')
  if (value.groupId !== undefined) fail(`${name}.groupId`, GROUPED)
  return value
}

const GROUPED = 'not here: the adapter names each budget\'s group itself (graphql cost, graphql operation:<field>, …)'

/** `operations`: each key a root field of the schema's query, mutation or subscription type. */
function checkOperations (given: unknown, schema: GraphQLSchema): Map<string, LimitEntry> {
  const operations = new Map<string, LimitEntry>()
  if (given === undefined) return operations
  if (!isObject(given)) fail('operations', 'expected an object of root field name: limits')
  const roots = [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()]
  for (const [name, value] of Object.entries(given)) {
    if (!roots.some(root => root?.getFields()[name] !== undefined)) fail(`operations.${name}`, 'no such root field in the schema')
    operations.set(name, entry(`operations.${name}`, value))
  }
  return operations
}

/** The adapter's options, checked against `schema`. */
export function checkOptions (options: MercuriusRateGuardOptions, schema: GraphQLSchema): CheckedOptions {
  const given = options as Record<string, unknown>
  const common: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(given)) if (!OWN.has(key)) common[key] = value
  const { actualCost = 'data', statusCode = 200, types = {}, introspection = INTROSPECTION_DEFAULT, subscriptions = false } = given
  if (given.groupId !== undefined) fail('groupId', GROUPED)
  if (actualCost !== 'data' && actualCost !== false && typeof actualCost !== 'function') fail('actualCost', 'expected \'data\', a function or false')
  if (statusCode !== 200 && statusCode !== 429) fail('statusCode', `expected 200 or 429, got ${String(statusCode)}`)
  if (!isObject(types)) fail('types', 'expected an object of query / mutation / subscription: limits')
  known('types', types, TYPES)
  if (subscriptions !== false && !(isObject(subscriptions) && Object.keys(subscriptions).every(k => k === 'max'))) {
    fail('subscriptions', 'expected { max } or false')
  }
  return Object.freeze({
    cost: checkCost(given.cost, schema),
    actualCost: actualCost as ActualCost,
    operations: checkOperations(given.operations, schema),
    types: new Map(Object.entries(types).map(([name, value]) => [name, entry(`types.${name}`, value)])),
    introspection: introspection === false ? null : entry('introspection', introspection),
    statusCode,
    subscriptions: subscriptions === false ? null : wholeNumber('subscriptions.max', subscriptions.max ?? Number.NaN, 1, 0),
    common: Object.freeze(common)
  })
}
