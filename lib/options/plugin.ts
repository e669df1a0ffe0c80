import { Callbacks } from '../callbacks.js'
import { fail } from './checks.js'
import { canonicalKeyOf, resolveHierarchy } from './clients.js'
import type { Warn } from './compat.js'
import { DRAFT_NAMES, PLAIN_NAMES } from './headers.js'
import { readAlone, readOptions } from './read.js'
import type { ResolvedOptions } from './resolved.js'
import { defaultRoute, resolveRoute } from './route.js'

// The plugin's options, the pass at register: read once (read.ts), the plugin's own resolved, and its budget
// options merged over the defaults (route.ts) into the base of every route's, limiter's and group's.

/**
 * Checks and resolves the plugin options into one frozen object, or throws a coded error; `warn` is told of
 * each value replaced by `@fastify/rate-limit`'s default (see `theirFallbacks`).
 */
export function resolveOptions (options: unknown, warn: Warn): ResolvedOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) fail('options', options, 'an object')
  const read = readOptions(options, 'plugin', '', warn)
  let plugin = readAlone('plugin', read.given)
  if (plugin.store !== undefined && plugin.redis !== undefined) {
    warn('OPTION_UNUSED', 'rate-guard: redis is not used: the store given counts, as with @fastify/rate-limit')
    plugin = { ...plugin, redis: undefined }
  }
  const callbacks = new Callbacks(plugin.callbackTimeout)
  const { keyGeneratorFor, keyTiers } = resolveHierarchy(read.given, callbacks, plugin.addressless)
  const defaults = defaultRoute(keyGeneratorFor, plugin.enableDraftSpec ? DRAFT_NAMES : PLAIN_NAMES)
  const route = resolveRoute(read, defaults, '', { keyGeneratorFor, warn, store: plugin.store !== undefined })
  return Object.freeze({
    ...plugin,
    canonicalKey: canonicalKeyOf(route),
    keyGeneratorFor,
    keyTiers,
    callbacks,
    route
  })
}
