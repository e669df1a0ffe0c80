import type { FastifyRequest } from 'fastify'
import { andThen } from '../awaitable.js'
import type { Callbacks } from '../callbacks.js'
import { InvalidOptionError } from '../errors.js'
import type { ResolvedOptions, ResolvedRoute } from '../options/resolved.js'
import type { KeyGenerator } from '../types.js'

// Stage 1, identify: who the client is, as the route names its clients (the default hierarchy, or the app's
// key generator, checked, with the hierarchy in its place when it fails: see lib/callbacks.ts). The key
// generator is made here once, at onRoute (./plan.ts); the pipeline's identify stage calls it (./pipeline.ts).

/** A key as a key generator returns it: what the app's callbacks are given (a number stays a number). */
export type Given = string | number

/** A key generator whose keys are checked (the default one's, or the app's). */
export type Keyed = (request: FastifyRequest) => Given | PromiseLike<Given>

/** The route's key generator, as its requests are identified. */
export function keyerOf (route: ResolvedRoute, opts: ResolvedOptions): Keyed {
  if (route.defaultKey) return route.keyGenerator as Keyed
  return controlled(route.keyGenerator, opts.keyGeneratorFor(route.ipv6Subnet), opts.callbacks)
}

/** The app's key generator, checked, with the default hierarchy in its place when it fails. */
function controlled (keyGenerator: KeyGenerator, fallback: KeyGenerator, callbacks: Callbacks): Keyed {
  return request => callbacks.run<Given>('keyGenerator', () => andThen(keyGenerator(request), checkKey),
    () => fallback(request) as ReturnType<Keyed>, request.log)
}

function checkKey (key: unknown): Given {
  if (typeof key === 'string') return key
  if (typeof key === 'number' && Number.isFinite(key)) return key
  throw new InvalidOptionError('keyGenerator', `expected it to return a string or a number, got ${typeof key}`)
}
