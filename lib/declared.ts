import diagnostics from 'node:diagnostics_channel'
import type { FastifyInstance, RouteOptions } from 'fastify'

// Every route an app declares, with the scope it was declared in, so a registration can name at start-up the
// routes of its scopes that its `onRoute` never saw: those declared before it (in its scope or in a scope
// inside it registered earlier), which Fastify adds without telling it and it therefore never limits.
//
// Fastify's public API has no list of routes with their scopes (`printRoutes` is text without scopes, and a
// hook added later reaches earlier routes only at request time, at a cost on every request). But Fastify
// publishes each new app on the 'fastify.initialization' channel, before the app can declare anything: an
// `onRoute` hook added to it there sees every route of the app and every scope inside it, at no cost per
// request. It sees only apps made after this module was imported (as `import` puts it before the code
// making the app); an app made earlier has no record, and nothing is said for it.

/** A route as declared: the scope it was declared in and the options its `onRoute` hooks were given. */
export interface Declared {
  readonly scope: FastifyInstance
  readonly options: RouteOptions
}

/** Each app's routes, under the app made by `Fastify()` (every scope inside it inherits from it). */
const apps = new WeakMap<object, Declared[]>()

/** What the channel calls: records the routes of the app made. Exported for a test to stand for "imported late". */
export function recordRoutes ({ fastify }: { fastify: FastifyInstance }): void {
  const routes: Declared[] = []
  apps.set(fastify, routes)
  fastify.addHook('onRoute', function (this: FastifyInstance, options) { routes.push({ scope: this, options }) })
}

diagnostics.subscribe('fastify.initialization', recordRoutes as (message: unknown) => void)

/** The routes declared so far in `scope` and the scopes inside it; undefined when its app was not recorded. */
export function declaredIn (scope: FastifyInstance): Declared[] | undefined {
  for (let o: object | null = scope; o !== null; o = Object.getPrototypeOf(o) as object | null) {
    const routes = apps.get(o)
    if (routes !== undefined) {
      return routes.filter(route => route.scope === scope || Object.prototype.isPrototypeOf.call(scope, route.scope))
    }
  }
  return undefined
}
