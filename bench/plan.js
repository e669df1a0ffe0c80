// The scenarios: which keys each request carries (the `x-api-key` header) and on which path. Each run gets its
// own key prefix, so no run meets another's counters.

/** Allowed traffic spreads over this many clients. */
export const POOL = 10_000
/** Clients banned before the banned flood. */
export const BANNED = 1_000
/**
 * The limit of `/`: 1000 requests per client per hour, far above what one client of the pool sends in a run.
 * An hour, not a minute: a fixed window (aligned to the clock) that rolled over during a run would let the
 * hot key through again, and a token bucket refills 60 times slower. What a decision costs does not depend
 * on the window's length.
 */
export const MAX = 1_000
export const WINDOW_MS = 3_600_000

export const SCENARIOS = Object.freeze({
  allowed: { title: `allowed traffic over ${POOL.toLocaleString('en')} keys`, kind: 'pool', path: '/' },
  hot: { title: 'one hot key, denied', kind: 'hot', path: '/' },
  banned: { title: `a flood from ${BANNED.toLocaleString('en')} banned clients`, kind: 'banned', path: '/banned' },
  mixed: { title: `mixed: 90% allowed over ${POOL.toLocaleString('en')} keys, 10% one denied key`, kind: 'mixed', path: '/' }
})

export const key = {
  pool: (prefix, i) => `${prefix}k${i}`,
  hot: (prefix) => `${prefix}hot`,
  banned: (prefix, i) => `${prefix}b${i}`
}

/** The keys banned before a banned flood. */
export function bannedKeys (prefix) {
  return Array.from({ length: BANNED }, (_, i) => key.banned(prefix, i))
}

function request (path, apiKey) {
  return Buffer.from(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${apiKey}\r\n\r\n`, 'latin1')
}

/** `n` (the nth request sent) → the bytes of that request, every buffer built once. */
export function requestPicker ({ scenario, prefix }) {
  const { kind, path } = SCENARIOS[scenario]
  const pool = () => Array.from({ length: POOL }, (_, i) => request(path, key.pool(prefix, i)))
  switch (kind) {
    case 'pool': {
      const all = pool()
      return n => all[n % POOL]
    }
    case 'hot': {
      const hot = request(path, key.hot(prefix))
      return () => hot
    }
    case 'banned': {
      const all = bannedKeys(prefix).map(k => request(path, k))
      return n => all[n % BANNED]
    }
    case 'mixed': {
      const all = pool()
      const hot = request(path, key.hot(prefix))
      return n => n % 10 === 9 ? hot : all[(n - Math.floor(n / 10)) % POOL]
    }
    default:
      throw new Error(`unknown scenario kind ${kind}`)
  }
}
