import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import type { Budgets, RouteBudget } from './budgets.js'
import type { Warn } from './options/compat.js'
import { resolveRouteConfig } from './options/route.js'
import { settlesItself } from './options/resolved.js'
import type { ResolvedOptions, ResolvedRoute } from './options/resolved.js'
import { handlerStarts, refundAborted, settleOnResponse } from './request/charge.js'
import type { BudgetHooks, RequestHook } from './request/pipeline.js'
import type { Callbacks } from './callbacks.js'
import { declaredIn } from './declared.js'
import type { HookName } from './types.js'
import { holdsSlots } from './limiters.js'
import { watchHandler } from './request/work.js'

// Where a registration's budgets meet Fastify's routes: each route added gets its budget's hook (the
// plugin-wide one, its own or its group's) in its own hook list, and the hooks that settle it when it settles
// by itself; a route whose requests may hold `concurrency`'s slots has its handler watched, so they are held
// until it ends (lib/request/work.ts); unmatched URLs get the ban check. At start-up, the routes of its
// scopes it never saw are named.

/** The hooks of a budget a route declares, with the route's options and its `config.rateLimit`. */
type HooksFor = (made: RouteBudget, routeOptions: RouteOptions, config: object) => BudgetHooks

export function limitRoutes (
  fastify: FastifyInstance, opts: ResolvedOptions, pluginHooks: BudgetHooks, hooksFor: HooksFor, budgets: Budgets, warn: Warn
): void {
  // Unmatched URLs: a client known to be banned is refused there too, at no Redis call (a banned scanner
  // would otherwise probe them for free); to count them as well, the app puts fastify.rateLimit() on its
  // not-found handler.
  if (opts.global) fastify.addHook('onRequest', pluginHooks.notFound)

  const seen = new WeakSet<RouteOptions>()
  fastify.addHook('onReady', () => { unseen(fastify, opts, seen, warn) })
  fastify.addHook('onRoute', (routeOptions) => {
    seen.add(routeOptions)
    // `rateLimit` beside `config`, not in it: Fastify keeps it and nobody reads it. Said, once per route.
    if ('rateLimit' in routeOptions) {
      warn('RATE_LIMIT_BESIDE_CONFIG', `rate-guard: route ${routeOptions.url} gives rateLimit beside config, where it is not read: ` +
        'move it into config: { rateLimit: { ... } }')
    }
    const config = routeOptions.config?.rateLimit
    // null, as in @fastify/rate-limit, is no configuration: the plugin's budget.
    if (config === undefined || config === null) {
      if (opts.global) {
        addHook(routeOptions, opts.route.hook, pluginHooks.hook)
        settling(routeOptions, opts.route, opts.callbacks)
      }
      watching(routeOptions, opts.global ? opts.route : false)
      return
    }
    const declared = `${[routeOptions.method].flat().join(',')} ${routeOptions.url}`
    const route = resolveRouteConfig(config, opts, warn, declared)
    watching(routeOptions, route)
    if (route === false) return
    const made = budgets.route(routeOptions, route)
    addHook(routeOptions, route.hook, hooksFor(made, routeOptions, config as object).hook)
    settling(routeOptions, route, opts.callbacks)
  })
}

/** The hooks a limiter the app places may be given in. */
const PLACES = ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const

/**
 * Watches the route's handler when its requests may hold slots: its budget (`route`, false when none) has
 * `concurrency`, or a limiter with it (fastify.rateLimit()) is among its hooks. Other routes pay nothing.
 */
function watching (routeOptions: RouteOptions, route: ResolvedRoute | false): void {
  const placed = PLACES.some(name => [routeOptions[name] as unknown].flat().some(holdsSlots))
  if ((route !== false && route.concurrency !== null) || placed) routeOptions.handler = watchHandler(routeOptions.handler)
}

/** How many routes a warning names before it counts the rest. */
const NAMED = 5

/**
 * Says, once, which routes of the registration's scopes were declared before it and so are not limited: the
 * routes its `onRoute` would have limited had it seen them. Those the app left out on purpose (`config: {
 * rateLimit: false }`, or no config while `global` is false) are read from their options as declared, so
 * they are told apart and not named, early or not. Fastify's 404 handler is no route; a GET's HEAD twin is named
 * with its GET.
 */
function unseen (fastify: FastifyInstance, opts: ResolvedOptions, seen: WeakSet<RouteOptions>, warn: Warn): void {
  const missed = (declaredIn(fastify) ?? []).filter(({ options }) => {
    if (seen.has(options)) return false
    const config = options.config?.rateLimit
    return config === undefined || config === null ? opts.global : config !== false
  })
  const names = new Set(missed.flatMap(({ options }) => [options.method].flat().map(method => `${method} ${options.url}`)))
  const named = [...names].filter(name => !(name.startsWith('HEAD ') && names.has(`GET ${name.slice(5)}`)))
  if (named.length === 0) return
  const more = named.length > NAMED ? ` and ${named.length - NAMED} more` : ''
  warn('ROUTES_BEFORE_PLUGIN', `rate-guard: ${named.length} route(s) declared before the plugin was registered, never seen by it ` +
    `and so not limited: ${named.slice(0, NAMED).join(', ')}${more}. Register the plugin first, with await (await ` +
    'fastify.register(rateGuard, options)), then declare the routes and register the plugins that declare them')
}

/** A route that settles by itself (countWhen, settle, refundAborted) gets the hooks that do it; others none. */
function settling (routeOptions: RouteOptions, route: ResolvedRoute, callbacks: Callbacks): void {
  if (!settlesItself(route)) return
  if (route.countWhen !== undefined || route.settle !== undefined) {
    appendHook(routeOptions, 'onResponse', settleOnResponse(route, callbacks))
  }
  if (route.refundAborted) {
    // After every other preHandler, the rate limiter's own included: the handler starts when it runs.
    appendHook(routeOptions, 'preHandler', handlerStarts)
    appendHook(routeOptions, 'onRequestAbort', refundAborted)
  }
}

/**
 * Appends to the route's own hook list, so routes that opt out pay nothing. A `preParsing` hook is given the
 * payload before its callback.
 */
function addHook (routeOptions: RouteOptions, hook: HookName, rateGuard: RequestHook): void {
  const fn = hook === 'preParsing'
    ? (request: FastifyRequest, reply: FastifyReply, _payload: unknown, done: (err?: Error) => void): void =>
        rateGuard(request, reply, done)
    : rateGuard
  appendHook(routeOptions, hook, fn)
}

/** `fn` after the route's own hooks of that name. */
function appendHook (routeOptions: RouteOptions, hook: HookName | 'onResponse' | 'onRequestAbort', fn: unknown): void {
  const existing = routeOptions[hook] as unknown
  routeOptions[hook] = (existing === undefined ? [fn] : [existing, fn].flat()) as never
}
