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

/**
 * A realistic limit, where a client's log fills: 100 requests per second on `/realistic`, over 200 clients.
 * At this bench's 20,000 to 30,000 req/s a client sends 100 to 150 per window, so up to a third are denied
 * and each log holds about 100 entries: what 100 per minute does over 10,000 clients sending about 2 req/s
 * each, in windows short enough for the measured 2 s to span several (a client's denials come in phases
 * of its window) and for a warm-up of one window and a half to reach that steady state.
 */
export const REALISTIC = Object.freeze({ clients: 200, max: 100, windowMs: 1_000 })

export const SCENARIOS = Object.freeze({
  allowed: { title: `allowed traffic over ${POOL.toLocaleString('en')} keys`, kind: 'pool', path: '/' },
  hot: { title: 'one hot key, denied', kind: 'hot', path: '/' },
  banned: { title: `a flood from ${BANNED.toLocaleString('en')} banned clients`, kind: 'banned', path: '/banned' },
  mixed: { title: `mixed: 90% allowed over ${POOL.toLocaleString('en')} keys, 10% one denied key`, kind: 'mixed', path: '/' },
  realistic: {
    title: `a realistic limit: ${REALISTIC.max} per ${REALISTIC.windowMs / 1000} s per client, ${REALISTIC.clients.toLocaleString('en')} clients`,
    kind: 'realistic',
    path: '/realistic',
    warmupS: 1.5 * REALISTIC.windowMs / 1000
  }
})

export const key = {
  pool: (prefix, i) => `${prefix}k${i}`,
  realistic: (prefix, i) => `${prefix}r${i}`,
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
    case 'realistic': {
      const all = Array.from({ length: REALISTIC.clients }, (_, i) => request(path, key.realistic(prefix, i)))
      return n => all[n % REALISTIC.clients]
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
