import type { RouteOptions } from 'fastify'
import { BudgetConflictError } from './errors.js'
import { headerStyle } from './headers.js'
import type { HeaderStyle } from './headers.js'
import { GLOBAL_SCOPE, scopeOf, watchedScope } from './stores/key-names.js'
import type { ResolvedLimit, ResolvedRoute } from './options/resolved.js'

// Budgets, named in one place. A budget is what a client's requests are counted under, one state per client
// in the store:
// - `default`: the plugin's own options, for every route without a `rateLimit` config of its own;
// - a route's own, named by its methods and URL: `GET /search`, `GET,POST /m`. HEAD counts as GET, and the
//   HEAD route Fastify adds for a route with GET (whose method is HEAD alone, with the same constraints) shares
//   that route's budget, whatever its other methods: a client cannot double its allowance by alternating GET
//   and HEAD. A route with Fastify `constraints` (routes of one method and URL told apart by version, host…)
//   has them in its name, by constraint name, each value as given (a RegExp as its literal, `/^api\./i`):
//   `GET /x {host=example.com, version=1.0.0}`. So each counts apart, as with @fastify/rate-limit;
// - a group's, `group:<id>`, shared by every route (and limiter) given that `groupId`;
// - a limiter made with options (`fastify.rateLimit(options)`, `createRateLimit(options)`): `limiter 1`, …
// Every route of one budget shares its state, so all must count alike: the same algorithm and the same
// limits (max, window, burst, and the shared budget's). A route that would share a budget counting otherwise
// is refused when it is declared, with a coded error naming both. A limit computed per request (a function)
// is taken as the same as any other function: what it returns is checked per request, not here.
// Each route keeps its own RouteBudget (its headers, callbacks, key generator), around the shared state.

/** One route's budget: the budget (its scope and name), with the route's own options and headers. */
export interface RouteBudget {
  readonly route: ResolvedRoute
  /** Which budget: the plugin-wide one, a route's own, or a group's. */
  readonly scope: string
  /** Its name (`default`, `GET /search`, `group:<id>`, `decider 1`), as fastify.rateGuard's calls take it. */
  readonly name: string
  readonly headers: HeaderStyle
  /** The headers of the budget shared by the route's clients, when it has one. */
  readonly sharedHeaders: HeaderStyle
  /** The names of the limits the route watches (`mode: 'shadow'` per limit), as the channel reports them. */
  readonly watchedHeaders: HeaderStyle
}

/** Which budget: a route as `'GET /search'`, or a group id. Default: the plugin-wide budget. */
export interface BudgetOptions {
  route?: string
  groupId?: string
}

/**
 * The name of the budget an operator's call means: a route's (`GET /search`, `GET /x {version=1.0.0}`), a group's
 * (`group:<id>`), else the plugin's (`default`).
 */
export function budgetName ({ route, groupId }: BudgetOptions = {}): string {
  return route ?? (groupId !== undefined ? `group:${groupId}` : 'default')
}

interface Named {
  /** The first route (or limiter) that declared it: what others are checked against. */
  readonly first: RouteBudget
  readonly by: string
}

export class Budgets {
  readonly #named = new Map<string, Named>()
  /** The budget of the route with GET at each URL and constraints, for the HEAD route Fastify adds for it. */
  readonly #gets = new Map<string, string>()
  #limiters = 0

  /** The plugin-wide budget. */
  plugin (route: ResolvedRoute): RouteBudget {
    return this.#add(budgetName(), GLOBAL_SCOPE, route, 'the plugin\'s options')
  }

  /** The budget of a route with its own `rateLimit` config. */
  route (routeOptions: RouteOptions, route: ResolvedRoute): RouteBudget {
    const methods = [routeOptions.method].flat()
    const at = `${routeOptions.url}${constraintsOf(routeOptions)}`
    const declared = `${methods.join(',')} ${at}`
    if (route.groupId !== undefined) return this.#group(route, declared)
    const head = methods.length === 1 && methods[0] === 'HEAD' ? this.#gets.get(at) : undefined
    const name = head ?? `${[...new Set(methods.map(m => m === 'HEAD' ? 'GET' : m))].sort().join(',')} ${at}`
    if (methods.includes('GET')) this.#gets.set(at, name)
    return this.#add(name, scopeOf('route', name), route, declared)
  }

  /** The budget of a limiter made with options: its group's, or one of its own. */
  limiter (route: ResolvedRoute): RouteBudget {
    const declared = `limiter ${++this.#limiters}`
    return route.groupId !== undefined ? this.#group(route, declared) : this.#add(declared, scopeOf('route', declared), route, declared)
  }

  /** A budget by name (`default`, `GET /search`, `group:<id>`, `limiter 1`), as its first route declared it. */
  get (name: string): RouteBudget | undefined {
    return this.#named.get(name)?.first
  }

  /** The scope of every budget, and of the limits each watches: where a client's state may be kept. */
  scopes (): Set<string> {
    return new Set([...this.#named.values()].flatMap(({ first }) =>
      first.route.watched === null ? [first.scope] : [first.scope, watchedScope(first.scope)]))
  }

  #group (route: ResolvedRoute, declared: string): RouteBudget {
    const groupId = route.groupId!
    return this.#add(budgetName({ groupId }), scopeOf('group', groupId), route, declared)
  }

  #add (name: string, scope: string, route: ResolvedRoute, declared: string): RouteBudget {
    const made = routeBudget(route, scope, name)
    const named = this.#named.get(name)
    if (named === undefined) {
      this.#named.set(name, { first: made, by: declared })
      return made
    }
    const difference = differs(named.first.route, route)
    if (difference !== null) throw new BudgetConflictError(declared, name, named.by, difference)
    return made
  }
}

/** A route's constraints as its budget's name spells them (` {host=example.com, version=1.0.0}`), '' for none. */
function constraintsOf ({ constraints = {} }: RouteOptions): string {
  const shown = Object.keys(constraints).sort().map(name => {
    const value = constraints[name]
    return `${name}=${typeof value === 'string' || value instanceof RegExp ? String(value) : JSON.stringify(value)}`
  })
  return shown.length === 0 ? '' : ` {${shown.join(', ')}}`
}

/**
 * A group's id as an IETF policy name, the content of a structured-field string: printable ASCII with `"` and
 * `\` escaped, or, for an id past 64 characters or with others, `group-` and a hash of it.
 */
function policyName (groupId: string): string {
  return /^[\x20-\x7e]{1,64}$/.test(groupId) ? groupId.replace(/["\\]/g, '\\$&') : `group-${scopeOf('group', groupId).slice(1)}`
}

function routeBudget (route: ResolvedRoute, scope: string, name: string): RouteBudget {
  const policy = route.groupId === undefined ? 'default' : policyName(route.groupId)
  const policies = (limits: readonly ResolvedLimit[], first: string): string[] =>
    limits.map((limit, i) => limit.name ?? (i === 0 ? first : `${first}-${i + 1}`))
  return {
    route,
    scope,
    name,
    headers: headerStyle(route, policies(route.limits, policy)),
    sharedHeaders: headerStyle(route, policies(route.shared ?? [], `${policy}-shared`)),
    watchedHeaders: headerStyle(route, policies(route.watched ?? [], `${policy}-shadow`))
  }
}

/** How two routes of one budget count differently, or null when they count alike. */
function differs (a: ResolvedRoute, b: ResolvedRoute): string | null {
  if (a.algorithm !== b.algorithm) return `algorithm '${a.algorithm}' and '${b.algorithm}'`
  return differentLimits(a.limits, b.limits, 'limits') ?? differentLimits(a.shared ?? [], b.shared ?? [], 'shared') ??
    differentLimits(a.watched ?? [], b.watched ?? [], 'watched limits')
}

function differentLimits (a: readonly ResolvedLimit[], b: readonly ResolvedLimit[], what: string): string | null {
  const per = ({ windowMs, calendar }: ResolvedLimit): string =>
    calendar !== undefined ? `${calendar.per} in ${calendar.timeZone}` : typeof windowMs === 'function' ? 'f()' : `${windowMs} ms`
  const burstOf = ({ max, burst }: ResolvedLimit): string => burst === null || burst === max ? '' : ` burst ${burst}`
  const show = (limits: readonly ResolvedLimit[]): string => limits.map(limit =>
    `${typeof limit.max === 'function' ? 'f()' : limit.max}/${per(limit)}${burstOf(limit)}`).join(', ') || 'none'
  return show(a) === show(b) ? null : `${what} ${show(a)} and ${show(b)}`
}
