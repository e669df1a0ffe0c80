import type { FastifyRequest } from 'fastify'
import type { Addressless } from './types.js'
import { warn } from './warnings.js'

// Who a request without a client address is: a server on a Unix socket, where Fastify's `trustProxy` gives no
// `request.ip` (false, a list of CIDRs, 'loopback'). Nothing in such a request tells its clients apart, and its
// connection does not either: a proxy that opens one upstream connection per request (nginx without upstream
// keepalive) would make each request a client with a fresh budget, and a banned client would escape its ban
// on its next connection. So by default they are one client, never more generous than one; per-connection
// keys only when the app says each connection is one client. (Refusing them, as `@fastify/rate-limit` does
// with a 500, would turn a proxy's misconfiguration into an outage of the whole app.) The option is
// lib/options/clients.ts's.

/**
 * The identity of every request without an address. No other tier of the default key gives it (an address is
 * an address, then `apikey:` and `user:`); a `request.ip` that is no address is the proxy's, and on a Unix
 * socket that is this key too (lib/forwarded.ts): a client reaches it only as the proxy's other requests do.
 */
const NO_ADDRESS_KEY = 'noaddr:'

const FIX = 'Trust the proxy on the socket, and only it: trustProxy: (address, hop) => hop === 0 makes request.ip the address it ' +
  'appended to X-Forwarded-For'
const NO_ADDRESS = 'rate-guard: a request came with no client address (the server listens on a Unix socket, and Fastify\'s trustProxy ' +
  'does not give request.ip)'
const SHARED = `${NO_ADDRESS}: every request without an address is counted as one client (${NO_ADDRESS_KEY}), so all clients ` +
  `behind the proxy share one budget and one ban. ${FIX}. Only where each connection is one client (no proxy in front), ` +
  "addressless: 'connection' counts each connection apart"
const PER_CONNECTION = `${NO_ADDRESS}: each connection is counted as a client of its own (addressless: 'connection'), so a proxy ` +
  `that opens a connection per request gives each request a fresh budget, and its pooled connections mix its clients. ${FIX}`

/** The key of a request without an address under `mode`: the one shared key, or its connection's. Said once, loudly, at the first. */
export function addresslessKey (mode: Addressless): (request: FastifyRequest) => string {
  let warned = false
  return request => {
    const key = mode === 'shared' ? NO_ADDRESS_KEY : `conn:${connectionId(request.raw.socket)}`
    if (!warned) {
      warned = true
      warn(request.log, 'ADDRESSLESS', mode === 'shared' ? SHARED : PER_CONNECTION, { key, addressless: mode })
    }
    return key
  }
}

const connections = new WeakMap<object, number>()
let lastConnection = 0
function connectionId (socket: object): number {
  let id = connections.get(socket)
  if (id === undefined) connections.set(socket, id = ++lastConnection)
  return id
}
