import { isIP } from 'node:net'
import type { FastifyRequest } from 'fastify'
import type { Awaitable, KeyGenerator } from './types.js'
import { andThen } from './awaitable.js'
import type { Callbacks } from './callbacks.js'
import { proxyKey } from './forwarded.js'
import { clientIP } from './ip.js'
import { warn } from './warnings.js'

// Who a request is: a verified API key, then the authenticated user, then the client's address.

export interface KeyHierarchyOptions {
  /** The API-key tier's header; false when the tier is off (always, unless the app verifies keys). */
  apiKeyHeader: string | false
  verifyApiKey: ((apiKey: string, request: FastifyRequest) => Awaitable<boolean>) | undefined
  userId: ((request: FastifyRequest) => unknown) | undefined
  ipv6Subnet: number
  callbacks: Callbacks
  /** The key of a request without an address (see lib/addressless.ts): made once per registration, so it warns once. */
  addressless: (request: FastifyRequest) => string
  /** The mistakes only requests show, each said once per registration (see `mistakes`). */
  said: Mistakes
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
 * (`normalizeIP`: IPv6 masked to its subnet, a port or brackets a proxy wrote taken off); a `request.ip` that is
 * no address even so is the proxy's (lib/forwarded.ts); none at all, the `addressless` option's key. So an API
 * key, a user id and an address never name each other's budget. Without `verifyApiKey` there is no API-key tier:
 * a key nobody checked is free to mint, a fresh budget per request.
 * A `verifyApiKey` or `userId` that throws (or a `verifyApiKey` that misses the deadline) gives the next tier.
 */
export function defaultKeyGenerator (opts: KeyHierarchyOptions): KeyGenerator {
  const { apiKeyHeader, verifyApiKey, userId, ipv6Subnet, callbacks, addressless, said } = opts
  const byAddress = (request: FastifyRequest): string => {
    said.proxy(request)
    if (request.ip !== undefined && request.ip !== '') {
      // What is no address (an entry a proxy wrote oddly, or a forged one under a trustProxy that trusts it)
      // is the connection's: never a fresh client, and never another tier's (`user:victim`).
      const address = clientIP(request.ip, ipv6Subnet)
      return isIP(address) !== 0 ? address : proxyKey(request, ipv6Subnet, addressless)
    }
    return addressless(request)
  }
  const byUserOrIp = (request: FastifyRequest): string => {
    const user = asId(userId === undefined
      ? defaultUserId(request)
      : callbacks.run('userId', () => userId(request), () => undefined, request.log))
    return user !== undefined ? `user:${user}` : byAddress(request)
  }
  if (apiKeyHeader === false || verifyApiKey === undefined) {
    return request => {
      said.apiKey(request)
      return byUserOrIp(request)
    }
  }
  return (request) => {
    const apiKey = asId(request.headers[apiKeyHeader])
    if (apiKey === undefined) return byUserOrIp(request)
    const verified = callbacks.run('verifyApiKey', () => verifyApiKey(apiKey, request), () => false, request.log)
    return andThen(verified, valid => valid === true ? `apikey:${apiKey}` : byUserOrIp(request)) as Awaitable<string>
  }
}

/**
 * Two mistakes only requests show, each said once, at the first request that shows it, naming the fix:
 * `X-Forwarded-For` while Fastify's `trustProxy` is off (every client behind a proxy would share its one
 * budget), and an API key header sent while the API-key tier is off (`unverified`: its header,
 * when no `verifyApiKey` checks it). Once settled, each costs a boolean per request.
 */
export interface Mistakes {
  readonly proxy: (request: FastifyRequest) => void
  readonly apiKey: (request: FastifyRequest) => void
}

export function mistakes (unverified: string | false): Mistakes {
  // The server's trustProxy is known from the first request with X-Forwarded-For: then nothing more is read.
  let proxyKnown = false
  let apiKeySaid = unverified === false
  return {
    proxy (request) {
      if (proxyKnown || request.headers['x-forwarded-for'] === undefined) return
      proxyKnown = true
      // `request.ips` is there only when trustProxy is on (a getter that reads the chain: asked once here).
      if (request.ips !== undefined) return
      warn(request.log, 'UNTRUSTED_FORWARDED_FOR', 'rate-guard: a request came with X-Forwarded-For, but Fastify\'s trustProxy is ' +
        'off, so it does not trust its sender and request.ip is the address of the connection: if a proxy sent it, every client ' +
        'behind that proxy shares one budget. Give trustProxy the proxy\'s addresses, e.g. Fastify({ trustProxy: [\'10.0.0.0/8\'] })',
      { from: request.ip })
    },
    apiKey (request) {
      if (apiKeySaid || request.headers[unverified as string] === undefined) return
      apiKeySaid = true
      warn(request.log, 'UNVERIFIED_API_KEY', `rate-guard: a request came with ${String(unverified)}, but without verifyApiKey the ` +
        'API-key tier is off: clients are told apart by user or address, never by a key anyone can mint. Give verifyApiKey to key ' +
        'them by their verified API key, or apiKeyHeader: false to say the header is not for this', { header: unverified })
    }
  }
}
