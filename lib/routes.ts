import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import type { Budgets, RouteBudget } from './budgets.js'
import type { Warn } from './options/compat.js'
import { resolveRouteConfig } from './options/route.js'
import { settlesItself } from './options/resolved.js'
import type { ResolvedOptions, ResolvedRoute } from './options/resolved.js'
import { handlerStarts, refundAborted, settleOnResponse } from './request/charge.js'
import type { BudgetHooks, RequestHook } from './request/pipeline.js'
import type { Callbacks } from './callbacks.js'
import type { HookName } from './types.js'

// Where a registration's budgets meet Fastify's routes: each route added gets its budget's hook (the
// plugin-wide one, its own or its group's) in its own hook list, and the hooks that settle it when it settles
// by itself; unmatched URLs get the ban check.

/** The hooks of a budget a route declares, with the route's options and its `config.rateLimit`. */
type HooksFor = (made: RouteBudget, routeOptions: RouteOptions, config: object) => BudgetHooks

export function limitRoutes (fastify: FastifyInstance, opts: ResolvedOptions, pluginHooks: BudgetHooks, hooksFor: HooksFor, budgets: Budgets, warn: Warn): void {
  // Unmatched URLs: a client known to be banned is refused there too, at no Redis call (a banned scanner
  // would otherwise probe them for free); to count them as well, the app puts fastify.rateLimit() on its
  // not-found handler.
  if (opts.global) fastify.addHook('onRequest', pluginHooks.notFound)

  fastify.addHook('onRoute', (routeOptions) => {
    // `rateLimit` beside `config`, not in it: Fastify keeps it and nobody reads it. Said, once per route.
    if ('rateLimit' in routeOptions) {
      warn(`rate-guard: route ${routeOptions.url} gives rateLimit beside config, where it is not read: move it into config: { rateLimit: { ... } }`)
    }
    const config = routeOptions.config?.rateLimit
    // null, as in @fastify/rate-limit, is no configuration: the plugin's budget.
    if (config === undefined || config === null) {
      if (opts.global) {
        addHook(routeOptions, opts.route.hook, pluginHooks.hook)
        settling(routeOptions, opts.route, opts.callbacks)
      }
      return
    }
    const route = resolveRouteConfig(config, opts, warn)
    if (route === false) return
    const made = budgets.route(routeOptions, route)
    addHook(routeOptions, route.hook, hooksFor(made, routeOptions, config as object).hook)
    settling(routeOptions, route, opts.callbacks)
  })
}

/** A route that settles by itself (countWhen, settle, refundAborted) gets the hooks that do it; others none. */
function settling (routeOptions: RouteOptions, route: ResolvedRoute, callbacks: Callbacks): void {
  if (!settlesItself(route)) return
  if (route.countWhen !== undefined || route.settle !== undefined) appendHook(routeOptions, 'onResponse', settleOnResponse(route, callbacks))
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
    ? (request: FastifyRequest, reply: FastifyReply, _payload: unknown, done: (err?: Error) => void): void => rateGuard(request, reply, done)
    : rateGuard
  appendHook(routeOptions, hook, fn)
}

/** `fn` after the route's own hooks of that name. */
function appendHook (routeOptions: RouteOptions, hook: HookName | 'onResponse' | 'onRequestAbort', fn: unknown): void {
  const existing = routeOptions[hook] as unknown
  routeOptions[hook] = (existing === undefined ? [fn] : [existing, fn].flat()) as never
}
