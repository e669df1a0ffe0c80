import { createHash, hash as digest } from 'node:crypto'
import { DEFAULT_ALGORITHM, STATE_SEGMENT } from '../algorithms/index.js'
import type { Algorithm } from '../algorithms/index.js'
import { InvalidOptionError } from '../errors.js'

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
  return HASHES.hash(key)
}

/**
 * The hash `bans()`, `unban({ keyHash })` and the `rate-guard:decision` channel name a client by, from its key
 * as the key generator made it (`user:42`, `apikey:…`, an address as `normalizeIP` writes it, an app's own
 * key as its generator returns it): how an app tells which of those hashes is a client it knows.
 */
export function keyHash (key: string | number): string {
  if (typeof key === 'number' ? !Number.isFinite(key) : typeof key !== 'string') {
    const got = typeof key === 'number' ? String(key) : typeof key
    throw new InvalidOptionError('keyHash', `expected a key as the key generator makes it (a string or a finite number), got ${got}`)
  }
  return hashIdentity(String(key))
}

/**
 * Hashes of the identities seen lately, so a returning client costs a map lookup instead of SHA-256, in two
 * generations of at most `size` each: `young`, the identities hashed since the last turn, and `old`, the
 * generation before. When `young` is full, the turn: `old` is dropped, `young` becomes `old`, and a new
 * `young` starts with the identities found in `old` since the last turn (at most `size / 2` of them).
 *
 * So a working set of up to twice `size` identities, however it cycles, settles into the two and is never
 * hashed again (a cache that evicts its oldest entry misses on every request of a cyclic set one larger than
 * it); one found in `old` lives on, as in a least-recently-used cache; and a flood of fresh identities turns
 * the generations over, holding at most `2 × size` identities (the ones noted share `old`'s strings), each
 * at most `MAX_CACHED_KEY` long: a hostile 4 KB identity is hashed every time instead of held. A turn costs
 * two assignments and a new Map, whatever the size.
 */
export class HashCache {
  readonly #size: number
  readonly #make: (key: string) => string
  #young = new Map<string, string>()
  #old = new Map<string, string>()
  /** Found in `old` since the last turn: the start of the next `young`. */
  #found = new Map<string, string>()

  constructor (size: number, make: (key: string) => string) {
    this.#size = size
    this.#make = make
  }

  /** Identities held, each in one generation. */
  get size (): number {
    return this.#young.size + this.#old.size
  }

  hash (key: string): string {
    let hash = this.#young.get(key)
    if (hash !== undefined) return hash
    hash = this.#old.get(key)
    if (hash !== undefined) {
      if (this.#found.size < this.#size / 2) this.#found.set(key, hash)
      return hash
    }
    hash = this.#make(key)
    if (key.length <= MAX_CACHED_KEY) {
      if (this.#young.size >= this.#size) {
        this.#old = this.#young
        this.#young = this.#found
        this.#found = new Map()
      }
      this.#young.set(key, hash)
    }
    return hash
  }
}

/** Identities of up to this many characters are held in `HASHES`. */
const MAX_CACHED_KEY = 256
/** Twice this many identities at most (see `HashCache`). */
const HASH_GENERATION = 10_000

function digestIdentity (key: string): string {
  // UTF-8 turns every lone surrogate into U+FFFD, so '\uD800', '\uDFFF' and '\uFFFD' would share one budget:
  // a string holding one is hashed as 0xFF (a byte UTF-8 never has) and its UTF-16 code units, losing nothing.
  if (LONE_SURROGATE.test(key)) return createHash('sha256').update(ILL_FORMED).update(key, 'utf16le').digest('base64url').slice(0, 22)
  // One call, no Hash object: about a quarter of createHash's cost.
  return digest('sha256', key, 'base64url').slice(0, 22)
}

const HASHES = new HashCache(HASH_GENERATION, digestIdentity)

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
  /** Per identity and budget, under `concurrency`: the leases of its requests in flight (lua/lease.lua). */
  readonly leases: string
  /** Per identity and budget, with calendar quotas: what each counted in its period (lua/quota.lua). */
  readonly quota: string
}

/**
 * `<nameSpace>{<hash>}:log:<scope>` holds the sliding log of one budget (`fw:` / `sw:` / `tb:` the state of
 * the other algorithms) and `…:override:<scope>` its override; `…:strikes`, `…:banned` and `…:offences` are
 * per identity, so a ban holds on every route of the registration. Shadow mode's (`family: 'shadow'`) are
 * the same under `…:shadow:` (`…{<hash>}:shadow:banned`), but the override, which an operator sets for both.
 */
export function identityKeys (
  nameSpace: string, scope: string, key: string, algorithm: Algorithm = DEFAULT_ALGORITHM, family: Family = 'enforce'
): IdentityKeys {
  return keysUnder(`${nameSpace}{${hashIdentity(key)}}:`, scope, algorithm, family)
}

/** The keys of the identity whose hash is `hash` (what `bans()` lists): as `identityKeys` makes them from its key. */
export function hashedKeys (
  nameSpace: string, hash: string, scope = GLOBAL_SCOPE, algorithm: Algorithm = DEFAULT_ALGORITHM, family: Family = 'enforce'
): IdentityKeys {
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
    backoff: `${own}backoff:${scope}`,
    leases: `${own}leases:${scope}`,
    quota: `${own}quota:${scope}`
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
