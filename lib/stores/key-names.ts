import { createHash, hash as digest } from 'node:crypto'
import { DEFAULT_ALGORITHM, STATE_SEGMENT } from '../algorithms/index.js'
import type { Algorithm } from '../algorithms/index.js'
import { Oldest } from '../oldest.js'

// Where an identity lives in Redis (and in the in-process store): its hash, its budget's scope and the names
// of its keys, all under one hash tag.

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
