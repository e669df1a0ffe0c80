import type { Callbacks } from '../callbacks.js'
import { addresslessKey } from '../addressless.js'
import { defaultKeyGenerator, keyTiers, mistakes } from '../identity.js'
import type { KeyHierarchyOptions } from '../identity.js'
import { canonicalKey } from '../ip.js'
import { fail } from './checks.js'
import type { Addressless, AllowListFunction, KeyGenerator } from '../types.js'
import type { ResolvedOptions, ResolvedRoute } from './resolved.js'

// Who a client is, as options: the plugin's key hierarchy (`apiKeyHeader`, `verifyApiKey`, `userId`,
// `addressless`), and a budget's key generator, `ipv6Subnet` and allow list over the plugin's. The key
// generator itself is lib/identity.ts's.

export const ADDRESSLESS: readonly Addressless[] = ['shared', 'connection']

export const API_KEY_HEADER = 'x-api-key'

/** `apiKeyHeader`: a header name (a token, RFC 9110), or false. */
export function checkApiKeyHeader (value: unknown, name: string): string | false {
  if (value !== false && (typeof value !== 'string' || !/^[a-z0-9!#$%&'*+.^_`|~-]+$/i.test(value))) {
    fail(name, value, 'a header name or false')
  }
  return value
}

/** `ipv6Subnet`: bits of an IPv6 address that make a client, 0 to 128 (theirFallbacks gives any other value their default). */
export function checkSubnet (value: unknown): number {
  return value as number
}

/** `allowList` alone: keys, or a function of the request. Kept as given: the app's store is given it so. */
export function checkAllowList (value: unknown, name: string): readonly string[] | AllowListFunction {
  if (typeof value === 'function') return value as AllowListFunction
  if (!Array.isArray(value) || !value.every(k => typeof k === 'string')) fail(name, value, 'an array of keys or a function')
  return value
}

/** The key hierarchy's options, each checked alone. */
export interface GivenHierarchy {
  readonly apiKeyHeader?: string | false
  readonly verifyApiKey?: KeyHierarchyOptions['verifyApiKey']
  readonly userId?: KeyHierarchyOptions['userId']
}

/**
 * The default key generator for a subnet, and the tiers it names clients by. An API key is an identity only
 * when the app verifies it: any client can mint an unverified one, a fresh budget per request. Naming the
 * header without a way to verify it is a mistake, refused.
 */
export function resolveHierarchy (
  given: GivenHierarchy, callbacks: Callbacks, addressless: Addressless
): Pick<ResolvedOptions, 'keyGeneratorFor' | 'keyTiers'> {
  const { apiKeyHeader = API_KEY_HEADER, verifyApiKey, userId } = given
  const hierarchy = {
    apiKeyHeader: apiKeyHeader === false || verifyApiKey === undefined ? false as const : apiKeyHeader.toLowerCase(),
    verifyApiKey,
    userId,
    callbacks,
    addressless: addresslessKey(addressless),
    // Said once per registration, whatever the routes' subnets: the default header sent while no verifyApiKey
    // turns its tier on, and X-Forwarded-For that trustProxy does not trust (lib/identity.ts).
    said: mistakes(given.apiKeyHeader === undefined && verifyApiKey === undefined ? API_KEY_HEADER : false)
  }
  return { keyGeneratorFor: ipv6Subnet => defaultKeyGenerator({ ...hierarchy, ipv6Subnet }), keyTiers: keyTiers(hierarchy) }
}

/** A budget's key options, each checked alone. */
export interface GivenKeys {
  readonly keyGenerator?: KeyGenerator
  readonly ipv6Subnet?: number
  readonly allowList?: readonly string[] | AllowListFunction
}

type Keys = Pick<ResolvedRoute, 'ipv6Subnet' | 'keyGenerator' | 'defaultKey' | 'allowList' | 'allowListGiven'>

/**
 * A budget's key generator and allow list over the base's: the default key generator made again for a route's
 * own `ipv6Subnet`; the allow list written again when what writes the keys changes (the subnet, or the app's
 * key generator for the default).
 */
export function resolveKeys (given: GivenKeys, base: ResolvedRoute, keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator): Keys {
  const ipv6Subnet = given.ipv6Subnet ?? base.ipv6Subnet
  const newSubnet = ipv6Subnet !== base.ipv6Subnet
  const defaultKey = given.keyGenerator === undefined && base.defaultKey
  const allowListGiven = given.allowList ?? base.allowListGiven
  const rewrite = given.allowList !== undefined || (allowListGiven !== undefined && (newSubnet || defaultKey !== base.defaultKey))
  return {
    ipv6Subnet,
    keyGenerator: given.keyGenerator ?? (defaultKey && newSubnet ? keyGeneratorFor(ipv6Subnet) : base.keyGenerator),
    defaultKey,
    allowList: rewrite ? allowedKeys(allowListGiven!, defaultKey ? key => canonicalKey(key, ipv6Subnet) : undefined) : base.allowList,
    allowListGiven
  }
}

/**
 * An allow list's keys as the key generator writes them: with the default one (`canonical`), an address in its
 * canonical form (see `canonicalKey`); with the app's, as given, compared with the key it returns.
 */
function allowedKeys (given: readonly string[] | AllowListFunction, canonical?: (key: string) => string): ResolvedRoute['allowList'] {
  if (typeof given === 'function') return given
  return given.length === 0 ? null : new Set(canonical === undefined ? given : given.map(canonical))
}

/** Writes a key the way the plugin's key generator does: the default one with the plugin's `ipv6Subnet`, the app's as given. */
export function canonicalKeyOf (route: ResolvedRoute): (key: string) => string {
  return route.defaultKey ? key => canonicalKey(key, route.ipv6Subnet) : key => key
}
