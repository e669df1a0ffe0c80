import { checkKeys, fail } from './checks.js'
import { theirFallbacks } from './compat.js'
import type { Warn } from './compat.js'
import { unknownOption } from './suggestions.js'
import { ENTRIES, PLUGIN_ONLY, ROUTE_OPTIONS } from './table.js'
import type { At, Given, Place, ReadAlone } from './table.js'

// The table read, the first half of the pass: what each place accepts, the values `@fastify/rate-limit`
// replaces replaced, each option given checked alone, and the options read alone resolved over a base.

/** Fastify's own registration options reach the plugin too. */
const PLUGIN_KEYS = new Set([...ROUTE_OPTIONS, ...PLUGIN_ONLY, 'prefix', 'logLevel', 'logSerializers'])

/** The options given at a place, as given (for messages) and each checked alone. */
export interface Read {
  readonly input: Record<string, unknown>
  readonly given: Given
  readonly place: Place
}

/**
 * The options given at `place` (`where`: how their names are prefixed), read: refused where the place does not
 * take them, replaced where `@fastify/rate-limit` replaces them (`warn` says so), and each checked alone, in
 * the table's order. A route's or a limiter's names outside the table are refused, but with the app's own
 * store (`anyName`), whose `child()` is given the route's options as they are (theirs pass it options of the
 * app's own that way).
 */
export function readOptions (options: object, place: Place, where: string, warn: Warn, anyName = false): Read {
  const input = theirFallbacks(acceptedAt(options, place, where, warn, anyName), where, warn)
  const at: At = place === 'plugin' ? 'plugin' : 'route'
  const given: Record<string, unknown> = {}
  for (const [option, entry] of ENTRIES) {
    if (input[option] !== undefined && (at === 'plugin' || entry.at === 'route')) {
      given[option] = entry.check(input[option], `${where}${option}`)
    }
  }
  return { input, given, place }
}

/** The options `place` takes: each name checked, and what a limiter does not use left out. */
function acceptedAt (options: object, place: Place, where: string, warn: Warn, anyName: boolean): Record<string, unknown> {
  if (place === 'plugin') {
    checkKeys(options, PLUGIN_KEYS, '', name => unknownOption(name, PLUGIN_KEYS, PLUGIN_ONLY))
    return options as Record<string, unknown>
  }
  for (const [key, value] of Object.entries(options)) {
    if (PLUGIN_ONLY.has(key)) fail(`${where}${key}`, value, 'it at register only (it holds for the whole plugin)')
  }
  if (!anyName) checkKeys(options, ROUTE_OPTIONS, where, name => unknownOption(name, ROUTE_OPTIONS, PLUGIN_ONLY))
  if (place === 'route') return options as Record<string, unknown>
  const out = { ...options } as Record<string, unknown>
  for (const [option, entry] of ENTRIES) {
    if (out[option] === undefined || entry.limiter === 'read') continue
    if (entry.limiter === 'refused') {
      fail(`${where}${option}`, out[option], 'it on a route\'s config.rateLimit or the plugin\'s options: ' +
        'a limiter the app places settles from the handler (request.rateGuard.settle)')
    }
    warn('OPTION_UNUSED', `rate-guard: ${where}${option} is not used: the limiter runs where the app places it`)
    delete out[option]
  }
  return out
}

/**
 * The options at `at` read alone: each given one as its check made it; the others `base`'s (a route's over the
 * plugin's; never for an option of its own, as `groupId`) or, with no base, their defaults.
 */
export function readAlone<A extends At> (at: A, given: Given, base?: object): ReadAlone<A> {
  const out: Record<string, unknown> = {}
  for (const [option, entry] of ENTRIES) {
    if (entry.at !== at || entry.merge === 'with') continue
    out[option] = option in given
      ? given[option]
      : entry.merge === 'own'
        ? undefined
        : base !== undefined
          ? (base as Record<string, unknown>)[option]
          : entry.fallback === undefined ? undefined : entry.check(entry.fallback, option)
  }
  return out as ReadAlone<A>
}
