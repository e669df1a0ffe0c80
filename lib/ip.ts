import { isIP, isIPv4, isIPv6 } from 'node:net'
import { compile } from '@fastify/proxy-addr'

// Client addresses as keys: IPv4 as is, IPv6 masked to its subnet, IPv4 carried in IPv6 as the IPv4, an
// address as proxies also write it (a port, brackets, a zone, zero padding) as the plain address, and whether
// a `trustProxy` setting trusts every address.

/**
 * An IP in a canonical form: IPv4 as is (also when IPv4-mapped in IPv6), IPv6 masked to `subnet` bits and
 * written in its one RFC 5952 form (`2001:db8::`), so every address of one /64 is one client. The same
 * string as `@fastify/rate-limit`'s `normalizeIP`, but for an address as a proxy may write it into
 * `X-Forwarded-For` (`1.2.3.4:5678`, `[2001:db8::1]:443`, `001.002.003.004`, `1.2.3.4%eth0`: see
 * `plainAddress`), which is that address where theirs gives it back as a string of its own, a fresh client
 * per port. Anything else that is not an address is given back in lower case, as theirs does (`undefined`,
 * on which theirs throws, is `'unknown'`).
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
  if (!isIPv6(address)) {
    // The slow path, for what is not a plain address: `plain` is one, so this recurses once at most.
    const plain = plainAddress(ip)
    return plain === undefined ? ip.toLowerCase() : canonicalIP(plain, subnet, carries)
  }
  const groups = expandIPv6(address)
  if (carries(groups)) return lastIPv4(groups)
  const masked = groups.map((group, i) => {
    const bits = Math.min(16, Math.max(0, subnet - i * 16))
    return group & ((0xffff << (16 - bits)) & 0xffff)
  })
  return rfc5952(masked)
}

/**
 * Longest entry read: `[`, an IPv6 address with an IPv4 tail (45), a zone (an interface name is at most 15),
 * `]:65535`, with room for zero padding. A longer one is none a proxy writes, and is not read at all.
 */
const MAX_ENTRY = 100

/**
 * The plain address an `X-Forwarded-For` entry spells in a form proxies write beside the plain one (Azure's
 * load balancers write `ip:port`): with a port (`1.2.3.4:5678`, `[2001:db8::1]:443`), in brackets
 * (`[::ffff:1.2.3.4]`), with a zone (`1.2.3.4%eth0`, `fe80::1%25eth0`) or zero-padded (`001.002.003.004`,
 * `::ffff:010.000.000.001`: read in decimal, as a writer that pads means them, never as octal). `undefined`
 * for anything else, the forms of `inet_aton` included (`0x7f.1`, `1.2.3`, `2130706433`, which no proxy
 * writes and readers disagree on): read literally, they would let one address be written in endless ways.
 */
export function plainAddress (entry: string): string | undefined {
  if (entry.length > MAX_ENTRY) return undefined
  let host = entry
  if (host.startsWith('[')) {
    const close = host.indexOf(']')
    if (close === -1 || (close + 1 < host.length && !isPort(host, close + 1))) return undefined
    host = host.slice(1, close)
  } else {
    const colon = host.indexOf(':')
    if (colon !== -1 && colon === host.lastIndexOf(':')) {
      if (!isPort(host, colon)) return undefined
      host = host.slice(0, colon)
    }
  }
  const zone = host.indexOf('%')
  if (zone !== -1) host = host.slice(0, zone)
  if (isIP(host) !== 0) return host
  // Zero-padded IPv4, alone or as an IPv6 address's tail.
  const tail = host.lastIndexOf(':') + 1
  const ipv4 = unpadded(host.slice(tail))
  if (ipv4 === undefined) return undefined
  const address = host.slice(0, tail) + ipv4
  return isIP(address) !== 0 ? address : undefined
}

/** Whether `text` from `colon` on is `:` and a port, 0 to 65535. */
function isPort (text: string, colon: number): boolean {
  const digits = text.length - colon - 1
  if (text[colon] !== ':' || digits < 1 || digits > 5) return false
  for (let i = colon + 1; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x30 || c > 0x39) return false
  }
  return Number(text.slice(colon + 1)) <= 65535
}

/** Four decimal numbers (`\d` and `.` never overlap, so it cannot backtrack). */
const DOTTED = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/

/** Dotted decimal IPv4 with leading zeros as the plain address (`001.002.003.004` is `1.2.3.4`). */
function unpadded (text: string): string | undefined {
  const parts = DOTTED.exec(text)
  if (parts === null) return undefined
  const octets = parts.slice(1).map(Number)
  return octets.every(octet => octet <= 255) ? octets.join('.') : undefined
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
