import { createHash, hash as digest } from 'node:crypto'
import { isIP, isIPv4, isIPv6 } from 'node:net'
import { compile } from '@fastify/proxy-addr'
import type { FastifyRequest } from 'fastify'
import { DEFAULT_ALGORITHM, STATE_SEGMENT } from './algorithms/index.js'
import type { Algorithm } from './algorithms/index.js'
import type { Awaitable, KeyGenerator } from './types.js'
import { then } from './awaitable.js'
import type { Callbacks } from './callbacks.js'
import { Oldest } from './oldest.js'

/** Who a request is (API key, then user, then client IP) and where that identity lives in Redis. */

export interface KeyHierarchyOptions {
  /** The API-key tier's header; false when the tier is off (always, unless the app verifies keys). */
  apiKeyHeader: string | false
  verifyApiKey: ((apiKey: string, request: FastifyRequest) => Awaitable<boolean>) | undefined
  userId: ((request: FastifyRequest) => unknown) | undefined
  ipv6Subnet: number
  callbacks: Callbacks
  /** The key of a request without an address (see lib/addressless.ts): made once per registration, so it warns once. */
  addressless: (request: FastifyRequest) => string
}

/** Longest API key or user id considered; longer values are not identities anyone issues. */
const MAX_ID_LENGTH = 4096

function defaultUserId (request: FastifyRequest): unknown {
  const user = (request as { user?: unknown }).user
  return typeof user === 'object' && user !== null ? (user as { id?: unknown }).id : undefined
}

function asId (value: unknown): string | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value)
  if (typeof value === 'string' && value.length > 0 && value.length <= MAX_ID_LENGTH) return value
  return undefined
}

/** The tiers the default key generator names clients by, for the log line at register. */
export function keyTiers ({ apiKeyHeader }: Pick<KeyHierarchyOptions, 'apiKeyHeader'>): string {
  return `${apiKeyHeader === false ? '' : `verified API key (${apiKeyHeader}) → `}authenticated user → client IP`
}

/**
 * The default key: `apikey:<key>` when the API key header is present and `verifyApiKey` says it is valid,
 * else `user:<id>` for an authenticated user, else the client's address as `@fastify/rate-limit` writes it
 * (`normalizeIP`: IPv6 masked to its subnet); a `request.ip` that is no address is `ip:<it>`; none at all, the
 * `addressless` option's key. So an API key, a user id and an address never name each other's budget. Without `verifyApiKey` there is no API-key tier:
 * a key nobody checked is free to mint, a fresh budget per request.
 * A `verifyApiKey` or `userId` that throws (or a `verifyApiKey` that misses the deadline) gives the next tier.
 */
export function defaultKeyGenerator (opts: KeyHierarchyOptions): KeyGenerator {
  const { apiKeyHeader, verifyApiKey, userId, ipv6Subnet, callbacks, addressless } = opts
  const byAddress = (request: FastifyRequest): string => {
    if (request.ip !== undefined && request.ip !== '') {
      // What is not an address (a forged X-Forwarded-For entry, under a trustProxy that trusts it) is kept
      // apart from the other tiers: `user:victim` there must not spend that user's budget.
      const address = clientIP(request.ip, ipv6Subnet)
      return isIP(address) !== 0 ? address : `ip:${address}`
    }
    return addressless(request)
  }
  const byUserOrIp = (request: FastifyRequest): string => {
    const user = asId(userId === undefined ? defaultUserId(request) : callbacks.run('userId', () => userId(request), () => undefined, request.log))
    return user !== undefined ? `user:${user}` : byAddress(request)
  }
  if (apiKeyHeader === false || verifyApiKey === undefined) return byUserOrIp
  return (request) => {
    const apiKey = asId(request.headers[apiKeyHeader])
    if (apiKey === undefined) return byUserOrIp(request)
    const verified = callbacks.run('verifyApiKey', () => verifyApiKey(apiKey, request), () => false, request.log)
    return then(verified, valid => valid === true ? `apikey:${apiKey}` : byUserOrIp(request)) as Awaitable<string>
  }
}

/**
 * An IP in a canonical form: IPv4 as is (also when IPv4-mapped in IPv6), IPv6 masked to `subnet` bits and
 * written in its one RFC 5952 form (`2001:db8::`), so every address of one /64 is one client. The same
 * string as `@fastify/rate-limit`'s `normalizeIP`: anything that is not an IPv6 address is given back in
 * lower case, as theirs does (`undefined`, on which theirs throws, is `'unknown'`).
 */
export function normalizeIP (ip: string | undefined, subnet = 64): string {
  return canonicalIP(ip, subnet, isMapped)
}

/**
 * The client an address stands for, as the default key names it: `normalizeIP`'s string, except that an
 * IPv6 address carrying an IPv4 client's address in its last 32 bits is that IPv4 address (see
 * `carriesIPv4`): masked to its /64, every IPv4 client written that way would be one client.
 */
export function clientIP (ip: string | undefined, subnet = 64): string {
  return canonicalIP(ip, subnet, carriesIPv4)
}

function canonicalIP (ip: string | undefined, subnet: number, carries: (groups: readonly number[]) => boolean): string {
  if (ip === undefined || ip === '') return 'unknown'
  if (isIPv4(ip)) return ip
  const zone = ip.indexOf('%')
  const address = zone === -1 ? ip : ip.slice(0, zone)
  if (!isIPv6(address)) return ip.toLowerCase()
  const groups = expandIPv6(address)
  if (carries(groups)) return lastIPv4(groups)
  const masked = groups.map((group, i) => {
    const bits = Math.min(16, Math.max(0, subnet - i * 16))
    return group & ((0xffff << (16 - bits)) & 0xffff)
  })
  return rfc5952(masked)
}

/** IPv4-mapped (`::ffff:a.b.c.d`), the one form `@fastify/rate-limit` reads as its IPv4 address. */
function isMapped (g: readonly number[]): boolean {
  return g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff
}

/**
 * Whether an IPv6 address is an IPv4 client's, in its last 32 bits: IPv4-mapped; IPv4-compatible
 * (`::a.b.c.d`, RFC 4291), but for `::` and `::1` (unspecified, loopback), which stay themselves; SIIT's
 * IPv4-translated (`::ffff:0:a.b.c.d`, RFC 2765); or seen through a NAT64 translator, in the well-known
 * `64:ff9b::/96` (RFC 6052) or the local-use `64:ff9b:1::/48` (RFC 8215) read with the /96 layout, the
 * one translators use by default.
 */
function carriesIPv4 (g: readonly number[]): boolean {
  if (g[0] === 0x64 && g[1] === 0xff9b) return g[2] === 1 || (g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0)
  if (g[0] !== 0 || g[1] !== 0 || g[2] !== 0 || g[3] !== 0) return false
  if (g[4] === 0 && g[5] === 0) return g[6] !== 0 || g[7]! > 1
  return (g[4] === 0 && g[5] === 0xffff) || (g[4] === 0xffff && g[5] === 0)
}

/** Addresses from across the IPv4 and the IPv6 internet: a `trustProxy` that trusts all of either trusts any client. */
const PROBES = [
  ['1.1.1.1', '100.64.0.1', '129.0.0.1', '203.0.113.9', '255.255.255.254'],
  ['2001:db8::1', '2a00::1', 'fe80::1', 'ffff::1']
]

/**
 * Whether Fastify's `trustProxy` trusts every address at every hop (`true`, a function or a list that lets
 * any address through, as `() => true` or `['0.0.0.0/1', '128.0.0.0/1']`), so the left-most
 * `X-Forwarded-For` entry, which any client writes, is `request.ip`.
 */
export function trustsEveryAddress (trustProxy: unknown): boolean {
  if (trustProxy === true) return true
  try {
    let trust: (address: string, hop: number) => unknown
    if (typeof trustProxy === 'function') trust = trustProxy as typeof trust
    else if (typeof trustProxy === 'string') trust = compile(trustProxy.split(',').map(entry => entry.trim()))
    else if (Array.isArray(trustProxy)) trust = compile(trustProxy as string[])
    else return false
    // Trusting the nearest hop alone (`(address, hop) => hop === 0`) is sound: the entry a proxy appended.
    return PROBES.some(family => family.every(address => trust(address, 0) === true && trust(address, 1) === true))
  } catch {
    // A list Fastify cannot read fails its own start; a function that throws trusts nobody it threw for.
    return false
  }
}

/** The IPv4 address in the last 32 bits of an IPv6 address's eight groups. */
function lastIPv4 (groups: readonly number[]): string {
  return `${groups[6]! >> 8}.${groups[6]! & 255}.${groups[7]! >> 8}.${groups[7]! & 255}`
}

/** Eight groups as RFC 5952 writes them: lower-case hex without leading zeros, the first longest run of two or more zero groups as `::`. */
function rfc5952 (groups: readonly number[]): string {
  let start = -1
  let length = 1
  for (let i = 0; i < 8;) {
    let end = i
    while (end < 8 && groups[end] === 0) end++
    if (end - i > length) [start, length] = [i, end - i]
    i = Math.max(end, i + 1)
  }
  const hex = groups.map(group => group.toString(16))
  return start === -1 ? hex.join(':') : `${hex.slice(0, start).join(':')}::${hex.slice(start + length).join(':')}`
}

function expandIPv6 (address: string): number[] {
  let text = address
  const lastColon = text.lastIndexOf(':')
  const tail = text.slice(lastColon + 1)
  if (isIPv4(tail)) {
    const [a, b, c, d] = tail.split('.').map(Number) as [number, number, number, number]
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head, rest] = text.split('::') as [string, string | undefined]
  const left = head === '' ? [] : head.split(':')
  const right = rest === undefined || rest === '' ? [] : rest.split(':')
  const fill = rest === undefined ? [] : new Array<string>(8 - left.length - right.length).fill('0')
  return [...left, ...fill, ...right].map(g => parseInt(g, 16))
}

/**
 * A key as the default generator writes it: an address is normalized (IPv6 masked to its subnet), so allow
 * lists and operator calls may spell an address any way (`2001:db8::1`).
 */
export function canonicalKey (key: string, ipv6Subnet: number): string {
  return isIP(key) !== 0 ? clientIP(key, ipv6Subnet) : key
}

const LONE_SURROGATE = /\p{Surrogate}/u
const ILL_FORMED = Buffer.from([0xff])

/**
 * The fixed-length hash of an identity: 22 base64url characters (132 bits of SHA-256). It is the Redis
 * Cluster hash tag of every key of that identity, so whatever a client sends (`}`, `{}`, nothing, 16 KB),
 * the keys of one decision share one slot, have one length, and never hold an API key in plain text.
 */
export function hashIdentity (key: string): string {
  let hash = HASHES.get(key)
  if (hash === undefined) {
    hash = digestIdentity(key)
    if (key.length <= MAX_CACHED_KEY) {
      if (HASHES.size >= MAX_CACHED_HASHES) HASHES.delete(OLDEST_HASH.next()![0])
      HASHES.set(key, hash)
    }
  }
  return hash
}

/**
 * Hashes of the identities seen last, so a returning client costs a map lookup instead of SHA-256: at most
 * this many, of identities up to this long (a hostile 4 KB identity is hashed every time instead of held).
 */
const MAX_CACHED_HASHES = 10_000
const MAX_CACHED_KEY = 256
const HASHES = new Map<string, string>()
const OLDEST_HASH = new Oldest(HASHES)

function digestIdentity (key: string): string {
  // UTF-8 turns every lone surrogate into U+FFFD, so '\uD800', '\uDFFF' and '\uFFFD' would share one budget:
  // a string holding one is hashed as 0xFF (a byte UTF-8 never has) and its UTF-16 code units, losing nothing.
  if (LONE_SURROGATE.test(key)) return createHash('sha256').update(ILL_FORMED).update(key, 'utf16le').digest('base64url').slice(0, 22)
  // One call, no Hash object: about a quarter of createHash's cost.
  return digest('sha256', key, 'base64url').slice(0, 22)
}

/**
 * Whose decisions a key family holds: enforcing ones (`enforce` and `report` modes, the operator's calls), or
 * shadow mode's, kept apart under `…{<hash>}:shadow:` so nothing a shadow decision writes (counts, strikes,
 * bans, offences, over-limit waits) is read by a decision that enforces.
 */
export type Family = 'enforce' | 'shadow'

/** The names of every key one identity has under one budget (`scope`): one hash tag, so one Redis Cluster slot. */
export interface IdentityKeys {
  /** The budget's state: the sliding log, or the algorithm's counters (see `STATE_SEGMENT`). */
  readonly log: string
  /** Per identity: denials toward a ban, the ban, and how many bans in a row (for escalation). */
  readonly strikes: string
  readonly banned: string
  readonly offences: string
  /** Limits an operator set for this identity on this budget (`setOverride`). */
  readonly override: string
  /** Per identity and budget, under continueExceeding or exponentialBackoff: the denials in a row, alive while the client waits. */
  readonly backoff: string
}

/**
 * `<nameSpace>{<hash>}:log:<scope>` holds the sliding log of one budget (`fw:` / `sw:` / `tb:` the state of
 * the other algorithms) and `…:override:<scope>` its override; `…:strikes`, `…:banned` and `…:offences` are
 * per identity, so a ban holds on every route of the registration. Shadow mode's (`family: 'shadow'`) are
 * the same under `…:shadow:` (`…{<hash>}:shadow:banned`), but the override, which an operator sets for both.
 */
export function identityKeys (nameSpace: string, scope: string, key: string, algorithm: Algorithm = DEFAULT_ALGORITHM, family: Family = 'enforce'): IdentityKeys {
  return keysUnder(`${nameSpace}{${hashIdentity(key)}}:`, scope, algorithm, family)
}

/** The keys of the identity whose hash is `hash` (what `bans()` lists): as `identityKeys` makes them from its key. */
export function hashedKeys (nameSpace: string, hash: string, scope = GLOBAL_SCOPE, algorithm: Algorithm = DEFAULT_ALGORITHM, family: Family = 'enforce'): IdentityKeys {
  return keysUnder(`${nameSpace}{${hash}}:`, scope, algorithm, family)
}

/** Whether a ban's key (as `bans()` finds it) is one shadow mode recorded, never enforced. */
export function isShadowBan (bannedKey: string): boolean {
  return bannedKey.endsWith(`}:${SHADOW}banned`)
}

/** Whether `key` is an identity's ban (its `banned` key, of either family). */
export function isBanKey (key: string): boolean {
  return key.endsWith('}:banned') || isShadowBan(key)
}

/**
 * The hash tag of a key the plugin made (`<nameSpace>{<hash>}:…`): the client's hash, never its key;
 * undefined for a budget shared by all clients (`{s:…}`).
 */
export function keyHashOf (key: string): string | undefined {
  const open = key.indexOf('{')
  const hash = key.slice(open + 1, key.indexOf('}', open))
  return hash.startsWith('s:') ? undefined : hash
}

/** Whether `hash` is one `hashIdentity` makes: 22 base64url characters. */
export function isKeyHash (hash: unknown): hash is string {
  return typeof hash === 'string' && /^[\w-]{22}$/.test(hash)
}

/**
 * The keys of a budget shared by every client of a route: `<nameSpace>{s:<hash of the scope>}:…`, a slot of
 * its own (no identity's hash has a colon), with no strikes, bans or overrides ever written.
 */
export function sharedKeys (nameSpace: string, scope: string, algorithm: Algorithm, family: Family = 'enforce'): IdentityKeys {
  return keysUnder(`${nameSpace}{s:${hashIdentity(scope)}}:`, scope, algorithm, family)
}

/** What follows the hash tag in the keys of shadow mode's family. */
const SHADOW = 'shadow:'

function keysUnder (prefix: string, scope: string, algorithm: Algorithm, family: Family = 'enforce'): IdentityKeys {
  const own = family === 'shadow' ? `${prefix}${SHADOW}` : prefix
  return {
    log: `${own}${STATE_SEGMENT[algorithm]}:${scope}`,
    strikes: `${own}strikes`,
    banned: `${own}banned`,
    offences: `${own}offences`,
    override: `${prefix}override:${scope}`,
    backoff: `${own}backoff:${scope}`
  }
}

/**
 * The scope of the limits a budget watches (`limits: [..., { mode: 'shadow' }]`): its own, beside the budget's
 * (`~` is in no scope `scopeOf` makes, nor in `GLOBAL_SCOPE`).
 */
export function watchedScope (scope: string): string {
  return `${scope}~shadow`
}

/** A short, fixed-length scope for a route's own budget or a group's, from names the developer chose. */
export function scopeOf (kind: 'route' | 'group', name: string): string {
  return `${kind === 'route' ? 'r' : 'g'}${createHash('sha256').update(name).digest('base64url').slice(0, 12)}`
}

export const GLOBAL_SCOPE = 'all'
