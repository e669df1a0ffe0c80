// Who the operator page (lib/operator/page.ts) says a refused client is, beside its hash, when the app
// opts in (its `clientNames` option): the client as the operator knows it. The plugin names clients by hash
// alone, on its decision channel and in bans(), and hands no one a key. The page learns a name from the
// requests it sees refused (429 or 403): it hashes the identities such a request could have been limited by,
// as the plugin's default key generator writes them (its API key, its user id, its address; and the page's
// own failed-login key), with the plugin's `keyHash`, and keeps a name for a hash it counts only when one of
// them hashes to it. So a name is never a guess; a client keyed by an app's own key generator, another API-key
// header or another IPv6 subnet than the defaults stays a hash.
//
// What is shown: masked by default, since an operator's screen is often shared (a call, a wall screen, a
// screenshot in a ticket) and an address or a user id is personal data; whole with `clientNames: 'full'`.
//   address   masked: IPv4 without its last octet (203.0.113.x), IPv6 its /48 (2001:db8:1::/48)
//             full: the IPv4 address, the IPv6 /64 the plugin counts (2001:db8:1:2::/64)
//   user      masked: its first and last characters (a…e; its first for 2 or 3: 4…; `…` for 1); full: the id
//   API key   its owner as the app's `apiKeyOwner(apiKey)` names it, masked like a user id unless 'full';
//             never the key itself: without an owner, the key is masked, with 'full' too
// Masked, clients of one IPv4 /24 or one IPv6 /48 look alike: their hashes tell them apart. A name is cut at
// NAME_LENGTH characters, so the names the page holds (one per client it counts) are bounded.

import { isIPv4, isIPv6 } from 'node:net'
import type { FastifyRequest } from 'fastify'
import { normalizeIP } from '../ip.js'

/** The plugin's default API-key header (its `apiKeyHeader`), the one the page reads. */
export const API_KEY_HEADER = 'x-api-key'
/** The longest name shown, in characters. */
export const NAME_LENGTH = 64

/** How the page names clients. */
export interface Naming {
  /** names shown whole (`clientNames: 'full'`), else masked */
  full: boolean
  /** who an API key belongs to, as the app knows */
  apiKeyOwner?: ((apiKey: string) => string | undefined) | undefined
  /** keys of the app's own that name a client by its address (the page's failed-login key) */
  addressKeys?: ReadonlyArray<(request: FastifyRequest) => string>
}

/** An identity a request may have been limited by: its key, and how the page shows it. */
export interface Identity { key: string, name: () => string }

/**
 * The identities a request may have been limited by, each its key (as the key generator writes it) and how the
 * page shows it: called only for a key whose hash the page counts.
 */
export function identitiesOf ({ full, apiKeyOwner, addressKeys = [] }: Naming): (request: FastifyRequest) => Identity[] {
  const shown = full ? cut : maskId
  return (request) => {
    const found: Identity[] = []
    const apiKey = request.headers[API_KEY_HEADER]
    if (typeof apiKey === 'string' && apiKey !== '') {
      const name = (): string => {
        const owner = apiKeyOwner?.(apiKey)
        return owner === undefined ? maskId(apiKey) : shown(owner)
      }
      found.push({ key: `apikey:${apiKey}`, name })
    }
    const user = (request as { user?: { id?: unknown } | null }).user?.id
    if ((typeof user === 'string' && user !== '') || (typeof user === 'number' && Number.isFinite(user))) {
      found.push({ key: `user:${user}`, name: () => shown(String(user)) })
    }
    const address = normalizeIP(request.ip)
    const name = (): string => full ? cut(fullAddress(address)) : maskAddress(address)
    for (const key of [address, ...addressKeys.map(keyOf => keyOf(request))]) found.push({ key, name })
    return found
  }
}

/**
 * An address as the masked page shows it: IPv4 without its last octet, IPv6 its /48; anything else like an id.
 */
export function maskAddress (address: string): string {
  if (isIPv4(address)) return address.replace(/\.\d+$/, '.x')
  if (isIPv6(address)) return `${normalizeIP(address, 48)}/48`
  return maskId(address)
}

/**
 * An address as the plugin counts it: IPv4 as is, IPv6 its /64 (the default key's subnet).
 */
function fullAddress (address: string): string {
  return isIPv6(address) ? `${address}/64` : address
}

/**
 * An id with its first and last characters only (`a…e`); one of two or three characters, its first (`4…`: a
 * short user id such as `42` showed as a bare `…`, telling the operator nothing); one character, none (`…`).
 */
export function maskId (id: string): string {
  const characters = [...id]
  if (characters.length <= 1) return '…'
  return characters.length <= 3 ? `${characters[0]}…` : `${characters[0]}…${characters.at(-1)}`
}

/**
 * A name cut at NAME_LENGTH characters.
 */
function cut (name: string): string {
  const characters = [...name]
  return characters.length <= NAME_LENGTH ? name : `${characters.slice(0, NAME_LENGTH - 1).join('')}…`
}
