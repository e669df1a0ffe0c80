import { isIP } from 'node:net'
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import { clientIP } from './ip.js'
import { warn } from './warnings.js'

// Who a request is when `request.ip`, the `X-Forwarded-For` entry Fastify's `trustProxy` picked, is no address
// even as proxies also write one (lib/ip.ts's `plainAddress`): the proxy that sent it, by the address of the
// connection it came on. Never the entry itself: a proxy that writes a form nobody reads would otherwise make
// each of its entries a client with a fresh budget, and a client whose entry is trusted would mint one per
// request. Said once per process, to the app's log, or as a process warning when the app has no logger.

const FIX = 'make the proxy write plain addresses into X-Forwarded-For (no port, no brackets), or give Fastify\'s trustProxy ' +
  'only your proxies\' addresses, so that request.ip is the entry the nearest of them appended'

let said = false

/**
 * The key of a request whose `request.ip` is no address: its connection's address as the default key writes
 * it, or the `addressless` key when the connection has none (a Unix socket).
 */
export function proxyKey (request: FastifyRequest, ipv6Subnet: number, addressless: (request: FastifyRequest) => string): string {
  const remote = request.socket.remoteAddress
  const address = remote === undefined ? undefined : clientIP(remote, ipv6Subnet)
  const key = address !== undefined && isIP(address) !== 0 ? address : addressless(request)
  if (!said) {
    said = true
    sayUnreadable(request.log, request.ip, key)
  }
  return key
}

function sayUnreadable (log: FastifyBaseLogger, ip: string, key: string): void {
  // The entry is the client's (or a proxy's) text: shown cut short, quoted, never as it came.
  const entry = JSON.stringify(ip.slice(0, 64))
  const message = `rate-guard: request.ip is an X-Forwarded-For entry that is no address, ${entry}: requests with such an entry ` +
    `are counted as the proxy that sent them (its connection's address, ${key}), so every client behind that proxy shares one ` +
    `budget. To count each client apart, ${FIX}`
  warn(log, 'UNREADABLE_FORWARDED_FOR', message, { entry: ip.slice(0, 64), key })
}
