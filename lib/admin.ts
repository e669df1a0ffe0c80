import { ALGORITHMS } from './algorithms/index.js'
import type { Algorithm, Limit } from './algorithms/index.js'
import { InvalidOptionError } from './errors.js'
import { budgetName } from './budgets.js'
import type { BudgetOptions, Budgets, RouteBudget } from './budgets.js'
import { fallbacksOf, limitsOf, staticLimits } from './request/computed.js'
import type { Callbacks } from './callbacks.js'
import { remainingOf } from './headers.js'
import { hashedKeys, identityKeys, isKeyHash, isShadowBan, keyHashOf } from './stores/key-names.js'
import type { Family, IdentityKeys } from './stores/key-names.js'
import { deadline } from './deadline.js'
import { isPromise } from './awaitable.js'
import { refusedOutright } from './decider.js'
import { checkDuration, checkMax } from './options/checks.js'
import { checkSizes, checkStaticLimits } from './options/limits.js'
import type { ResolvedLimit, ResolvedOptions } from './options/resolved.js'
import { encodeLimits, encodeQuota } from './stores/overrides.js'
import type { DecideInput, Decision, Store } from './stores/store.js'
import type { Ban } from './stores/ban-index.js'
import type { DecisionStats } from './stats.js'
import type { BanEntry, OverrideOptions, PeekOptions, PeekResult, RateGuardAdmin } from './admin-api.js'

// `fastify.rateGuard`: what an operator does to one client. It acts on the shared store, so with Redis a ban,
// a reset or an override holds on every instance at once. Keys are the ones the key generator makes
// (`ip:1.2.3.4`, `user:42`, `apikey:…`).

function checkKeyHash (hash: unknown): string {
  if (!isKeyHash(hash)) {
    throw new InvalidOptionError('unban.keyHash', 'expected a client\'s hash as bans() gives it: 22 characters of A-Z, a-z, 0-9, - and _')
  }
  return hash
}

/** Operator calls wait for Redis at least this long (or the decision deadline, when longer), then reject. */
const ADMIN_MIN_DEADLINE = 1000

/** The key families of one client: the enforcing one and shadow mode's (see `Family`). */
const FAMILIES: readonly Family[] = ['enforce', 'shadow']

/** Options of setOverride that are not the limits. */
const OVERRIDE_KEYS = ['route', 'groupId', 'ttl', 'permanent']

/** What the operator calls work with: the store under the operators' deadline, and the names of a client's keys. */
interface Context {
  readonly nameSpace: string
  readonly budgets: Budgets
  /** The store's calls, each rejected past the operators' deadline; `forget` tells every instance what changed. */
  readonly store: GuardedStore
  readonly bans: (limit: number, signal: AbortSignal) => Promise<readonly Ban[]>
  readonly canonicalKey: (key: string) => string
  /** What `peek` with a request calls the budget's limit functions through (and the plugin's limits, their fallbacks). */
  readonly callbacks: Callbacks
  readonly pluginLimits: readonly ResolvedLimit[]
}

interface GuardedStore {
  decide: (input: DecideInput) => Promise<Decision>
  setBan: (key: string, banMs: number) => Promise<void>
  setValue: (key: string, value: string, ttl: number | null) => Promise<void>
  delete: (keys: readonly string[]) => Promise<void>
  unban: (keys: readonly string[]) => Promise<void>
  forget: (keys: readonly string[]) => Promise<void>
  inUse: (key: string) => Promise<number>
}

/** `forget`: tells every instance which keys were changed, so none goes on answering from what it held for them. */
export function createAdmin (
  inner: Store, opts: ResolvedOptions, budgets: Budgets, forget: (keys: readonly string[]) => Promise<void>, stats: DecisionStats
): RateGuardAdmin {
  const ms = Math.max(opts.timeout, ADMIN_MIN_DEADLINE)
  const within = async <T>(work: T | Promise<T>): Promise<T> => await deadline(work, ms)
  const ctx: Context = {
    nameSpace: opts.nameSpace,
    budgets,
    canonicalKey: opts.canonicalKey,
    callbacks: opts.callbacks,
    pluginLimits: opts.route.limits,
    // The deadline (or an answer) stops the store's work: on a Cluster, no more slots are read.
    bans: async (limit, signal) => await within(inner.bans(opts.nameSpace, limit, signal)),
    store: {
      decide: async input => await within(inner.decide(input)),
      setBan: async (key, banMs) => { await within(inner.setBan(key, banMs)) },
      setValue: async (key, value, ttl) => { await within(inner.setValue(key, value, ttl)) },
      delete: async keys => { await within(inner.delete(keys)) },
      unban: async keys => { await within(inner.unban(keys)) },
      forget: async keys => { await within(forget(keys)) },
      inUse: async key => await within(inner.leases.inUse(key))
    }
  }
  return Object.freeze({
    has: (budget: string) => budgets.get(budget) !== undefined,
    stats: () => stats.snapshot(),
    bans: async (options?: { limit?: number }) => await listBans(ctx, options),
    ban: async (key: string, duration: number | string) => { await ban(ctx, key, duration) },
    unban: async (key: string | { keyHash: string }) => { await unban(ctx, key) },
    reset: async (key: string) => { await reset(ctx, key) },
    peek: async (key: string, options?: PeekOptions) => await peek(ctx, key, options),
    setOverride: async (key: string, options: OverrideOptions) => { await setOverride(ctx, key, options) },
    clearOverride: async (key: string, options?: BudgetOptions) => { await clearOverride(ctx, key, options) }
  })
}

async function listBans (ctx: Context, { limit = 100 }: { limit?: number } = {}): Promise<BanEntry[]> {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000) {
    throw new InvalidOptionError('bans.limit', `expected an integer from 1 to 10000, got ${String(limit)}`)
  }
  const stop = new AbortController()
  try {
    const found = await ctx.bans(limit, stop.signal)
    // A ban's key is an identity's, never a shared budget's: it always has a client's hash.
    return found.map(({ key, retryMs }) => ({ keyHash: keyHashOf(key)!, retryMs, shadow: isShadowBan(key) }))
  } finally {
    stop.abort()
  }
}

async function ban (ctx: Context, key: string, duration: number | string): Promise<void> {
  const { banned } = keysOf(ctx, key)
  await ctx.store.setBan(banned, checkDuration(duration, 'duration'))
  // A ban held anywhere would go on answering with the wait it had, and a denial held 429 until it ended:
  // the new ban's 403, with its own wait, comes at once.
  await ctx.store.forget([banned, ...statesOf(ctx, key)])
}

async function unban (ctx: Context, key: string | { keyHash: string }): Promise<void> {
  const [keys, shadow] = FAMILIES.map(family => typeof key === 'object' && key !== null
    ? hashedKeys(ctx.nameSpace, checkKeyHash(key.keyHash), undefined, undefined, family)
    : keysOf(ctx, key, undefined, undefined, family)) as [IdentityKeys, IdentityKeys]
  await ctx.store.unban([keys.banned, keys.strikes, keys.offences, shadow.banned, shadow.strikes, shadow.offences])
  await ctx.store.forget([keys.banned, shadow.banned])
}

async function reset (ctx: Context, key: string): Promise<void> {
  const states = statesOf(ctx, key)
  await ctx.store.delete([...states, ...FAMILIES.map(family => keysOf(ctx, key, undefined, undefined, family).strikes)])
  await ctx.store.forget(states)
}

async function peek (ctx: Context, key: string, options: PeekOptions = {}): Promise<PeekResult> {
  const budget = budgetOf(ctx, options, 'peek')
  const { algorithm, mode } = budget.route
  // Static limits at once, so the store is asked before this call's first await (as every other call is).
  const found = peekedLimits(ctx, budget, key, options)
  const limits = isPromise(found) ? await found : found
  const family: Family = mode === 'shadow' ? 'shadow' : 'enforce'
  const input = { keys: keysOf(ctx, key, budget.scope, algorithm, family), limits, ban: null, peek: true, algorithm }
  const refused = refusedOutright(input)
  // The ban shadow mode recorded: read with the budget's own decision when it is shadow's and the store is asked.
  const shadowPeek = family === 'shadow' && refused === undefined
    ? undefined
    : { ...input, keys: keysOf(ctx, key, budget.scope, algorithm, 'shadow') }
  const { concurrency } = budget.route
  const [decision, shadowed, inUse] = await Promise.all([
    refused ?? ctx.store.decide(input),
    shadowPeek === undefined ? undefined : ctx.store.decide(shadowPeek),
    concurrency === null ? undefined : ctx.store.inUse(input.keys.leases)
  ])
  const shadowBan = shadowed ?? decision
  const banned = decision.status === 'banned'
  return {
    key,
    status: decision.status,
    max: decision.limit,
    count: decision.count,
    remaining: remainingOf(decision.limit, decision.count, banned),
    resetMs: decision.resetMs,
    retryMs: decision.retryMs,
    limits: decision.limits.map(l => ({
      max: l.limit, windowMs: l.windowMs, count: l.count, remaining: remainingOf(l.limit, l.count, banned), resetMs: l.resetMs
    })),
    shadow: family === 'shadow',
    shadowBanMs: shadowBan.status === 'banned' ? shadowBan.retryMs : 0,
    inFlight: concurrency === null ? null : { max: concurrency.max, count: inUse! }
  }
}

type Named = RouteBudget & { name: string }

/**
 * The budget's limits for `peek`: `max` / `timeWindow` stand in for the parts that are functions of the
 * request; the others are called with `request` (a request of the client, its key `key`), when given.
 */
function peekedLimits (ctx: Context, budget: Named, key: string, options: PeekOptions): readonly Limit[] | Promise<Limit[]> {
  const max = options.max === undefined ? undefined : checkMax(options.max)
  const windowMs = options.timeWindow === undefined ? undefined : checkDuration(options.timeWindow, 'timeWindow')
  const given = budget.route.limits.map(limit => ({
    ...limit,
    max: typeof limit.max === 'function' ? max ?? limit.max : limit.max,
    windowMs: typeof limit.windowMs === 'function' ? windowMs ?? limit.windowMs : limit.windowMs
  }))
  checkSizes(given, budget.route.algorithm, '')
  const limits = staticLimits(given, Date.now())
  if (limits !== null) return limits
  const { request } = options
  if (request === undefined) throw new InvalidOptionError('peek', needs(budget.name, given))
  return limitsOf(given, fallbacksOf(given, ctx.pluginLimits), budget.route.algorithm, request, key, ctx.callbacks)
}

/** What `peek` needs on a budget whose limits are functions of the request: which options, with an example. */
function needs (name: string, limits: readonly ResolvedLimit[]): string {
  const missing = [
    ...limits.some(limit => typeof limit.max === 'function') ? ['max'] : [],
    ...limits.some(limit => typeof limit.windowMs === 'function') ? ['timeWindow'] : []
  ]
  const budget = name === 'default'
    ? ''
    : name.startsWith('group:') ? `groupId: ${JSON.stringify(name.slice(6))}, ` : `route: ${JSON.stringify(name)}, `
  const example = missing.map(option => option === 'max' ? 'max: 100' : "timeWindow: '1 minute'").join(', ')
  const what = missing.join(' and ')
  return `budget ${JSON.stringify(name)} computes ${what} per request (a function of it): give peek ${what} ` +
    `(the client's own, standing in for the function), e.g. peek(key, { ${budget}${example} }), ` +
    `or request (a request of the client, which the functions are called with), e.g. peek(key, { ${budget}request })`
}

async function setOverride (ctx: Context, key: string, options: OverrideOptions): Promise<void> {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidOptionError('setOverride', 'expected options { max, timeWindow, ttl }')
  }
  const budget = budgetOf(ctx, options, 'setOverride')
  const resolved = checkStaticLimits(options, 'setOverride', OVERRIDE_KEYS, true)
  if (budget.route.algorithm !== 'token-bucket' && resolved.some(limit => limit.burst !== null)) {
    throw new InvalidOptionError('setOverride.burst', "expected no burst but on a budget with algorithm: 'token-bucket'")
  }
  if (resolved.some(limit => limit.name !== undefined)) {
    throw new InvalidOptionError('setOverride.name', 'expected no names: an override keeps the budget\'s policy names')
  }
  checkSizes(resolved, budget.route.algorithm, 'setOverride.')
  const text = overrideText(resolved, budget.route.limits)
  if ((options.ttl === undefined) === (options.permanent !== true)) {
    throw new InvalidOptionError('setOverride', 'expected either ttl (how long the override holds) or permanent: true')
  }
  const ttl = options.permanent === true ? null : checkDuration(options.ttl, 'setOverride.ttl')
  const keys = keysOf(ctx, key, budget.scope, budget.route.algorithm)
  await ctx.store.setValue(keys.override, text, ttl)
  await ctx.store.forget(logsOf(ctx, key, budget))
}

/**
 * An override's limits as the stores read them (the override key): the limits it gives the algorithm
 * (`encodeLimits`: all of them, replacing the budget's), then, for each calendar quota it names, `'<max> q<j>'`,
 * quota j of the budget's (`budgetLimits`, their quotas last) counting to that max instead.
 */
function overrideText (resolved: readonly ResolvedLimit[], budgetLimits: readonly ResolvedLimit[]): string {
  const quotas = budgetLimits.filter(limit => limit.calendar !== undefined)
  const parts = [encodeLimits(staticLimits(resolved.filter(limit => limit.calendar === undefined))!)].filter(part => part !== '')
  for (const { max, calendar } of resolved) {
    if (calendar === undefined) continue
    const j = quotas.findIndex(quota => quota.calendar!.per === calendar.per && quota.calendar!.timeZone === calendar.timeZone)
    if (j === -1) {
      throw new InvalidOptionError('setOverride', `a quota the budget has: it has none per ${calendar.per} in ${calendar.timeZone}`)
    }
    parts.push(encodeQuota(max as number, j + 1))
  }
  return parts.join(';')
}

async function clearOverride (ctx: Context, key: string, options: BudgetOptions = {}): Promise<void> {
  const budget = budgetOf(ctx, options, 'clearOverride')
  await ctx.store.delete([keysOf(ctx, key, budget.scope, budget.route.algorithm).override])
  await ctx.store.forget(logsOf(ctx, key, budget))
}

/** A client's keys, the client named as the default key generator (or the app's) writes it. */
function keysOf (ctx: Context, key: string, scope = '', algorithm?: Algorithm, family?: Family): IdentityKeys {
  if (typeof key !== 'string') throw new InvalidOptionError('key', `expected a string, got ${typeof key}`)
  return identityKeys(ctx.nameSpace, scope, ctx.canonicalKey(key), algorithm, family)
}

function budgetOf (ctx: Context, options: BudgetOptions, call: string): RouteBudget & { name: string } {
  const name = budgetName(options)
  const budget = ctx.budgets.get(name)
  if (budget === undefined) throw new InvalidOptionError(call, `no budget named ${JSON.stringify(name)}`)
  return { ...budget, name }
}

/**
 * Every algorithm's state of `key` on every budget (a budget whose algorithm changed in a deploy too), and
 * the wait `continueExceeding` / `exponentialBackoff` set on it: the enforcing ones and shadow mode's.
 */
function statesOf (ctx: Context, key: string): string[] {
  return [...ctx.budgets.scopes()].flatMap(scope => FAMILIES.flatMap(family => [
    ...ALGORITHMS.map(algorithm => keysOf(ctx, key, scope, algorithm, family).log),
    keysOf(ctx, key, scope, undefined, family).backoff,
    keysOf(ctx, key, scope, undefined, family).quota
  ]))
}

/** The budget's state of `key`, enforcing and shadow mode's: where an override changes what is held. */
function logsOf (ctx: Context, key: string, { scope, route }: RouteBudget): string[] {
  return FAMILIES.map(family => keysOf(ctx, key, scope, route.algorithm, family).log)
}
