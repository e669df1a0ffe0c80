// Two apps built the same way, one with @fastify/rate-limit and one with this plugin (both in process), so
// a compatibility test can send both the same requests and compare what a client sees.
import { createRequire } from 'node:module'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyPluginAsync, InjectOptions, RouteShorthandOptions } from 'fastify'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'

/**
 * @fastify/rate-limit, loaded without its types: they declare `fastify.rateLimit()` and `config.rateLimit` as
 * theirs, which a program holding this plugin's declarations cannot have too (an app has one or the other).
 */
export const theirPlugin = createRequire(import.meta.url)('@fastify/rate-limit') as FastifyPluginAsync

export type Plugin = 'theirs' | 'ours'

/**
 * An app with `plugin` registered with `options` and `GET /` (with `route` options) answering 'ok', and
 * whatever else `more` adds before it is ready.
 */
export async function appWith (t: Test, plugin: Plugin, options: Record<string, unknown>, route: RouteShorthandOptions = {}, more?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register((plugin === 'theirs' ? theirPlugin : rateGuard) as FastifyPluginAsync, options)
  app.get('/', route, async () => 'ok')
  more?.(app)
  await app.ready()
  return app
}

/** `request` `n` times over, for `statuses`. */
export function times<T> (n: number, request: T): T[] {
  return Array.from({ length: n }, () => request)
}

/** The status codes of `requests` sent in order. */
export async function statuses (app: FastifyInstance, requests: ReadonlyArray<string | InjectOptions>): Promise<number[]> {
  const codes: number[] = []
  for (const request of requests) codes.push((await app.inject(request)).statusCode)
  return codes
}

/** The rate-limit headers of a response (their names and values), in name order. */
export function rateLimitHeaders (headers: Record<string, unknown>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => /ratelimit|retry-after/.test(name)).sort().map(([name, value]) => [name, String(value)]))
}
