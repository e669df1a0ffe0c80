// The servers compared. Each runs in its own process (bench/server.js) with the same routes:
//   GET /        { hello: 'world' }, limited to MAX requests per client per hour (bench/plan.js)
//   GET /banned  the same, for the banned flood (see `banned` below for how each variant bans)
// Clients are told apart by the `x-api-key` header in every variant.

/** `@fastify/rate-limit`'s Redis store: the peer every ratio is also taken against. */
export const REFERENCE = '@fastify/rate-limit redis'
export const BARE = 'bare'
/** No limiter, and every banned-flood request refused by Fastify itself: the floor under any limiter's refusal. */
export const BARE_REFUSAL = 'bare refusal'

/**
 * Every variant, in the order of each round. `algorithms` is this plugin's ALGORITHMS (from dist/), or null
 * when dist/ is not built: the plugin's variants are then left out.
 */
export function allVariants (algorithms) {
  const ours = algorithms === null
    ? []
    : algorithms.flatMap(algorithm => algorithm === 'sliding-log'
      ? [
          // `extra`: run when BENCH_ONLY names them, not by default (what they show moves little between runs).
          { id: `rate-guard ${algorithm} autopipelining`, kind: 'rate-guard', redis: true, algorithm, autopipelining: true, extra: true },
          { id: `rate-guard ${algorithm}`, kind: 'rate-guard', redis: true, algorithm, autopipelining: false },
          // The same, with a subscriber on every diagnostics channel (doing nothing): what listening costs; the
          // variant above, nobody listening, is what the channels cost when nobody does.
          { id: `rate-guard ${algorithm} subscribed`, kind: 'rate-guard', redis: true, algorithm, autopipelining: false, subscribed: true, extra: true }
        ]
      : [{ id: `rate-guard ${algorithm}`, kind: 'rate-guard', redis: true, algorithm, autopipelining: false }])
  return [
    { id: BARE, kind: 'bare', redis: false },
    // Only where it is a floor: the banned flood.
    { id: BARE_REFUSAL, kind: 'bare-refusal', redis: false, scenarios: ['banned'] },
    ...ours,
    { id: REFERENCE, kind: 'frl-redis', redis: true },
    { id: '@fastify/rate-limit memory', kind: 'frl-memory', redis: false },
    { id: 'rate-limiter-flexible redis', kind: 'rlf-redis', redis: true }
  ]
}

/** How each kind bans, for the notes under the table. */
export const BANS = Object.freeze({
  bare: 'no limiter: every request is answered 200',
  'bare-refusal': 'no limiter: `/banned` is answered 403 from an onRequest hook, with the four headers a ban sends and an error without a stack trace through Fastify\'s error handler, as this plugin refuses (run in the banned flood only)',
  'rate-guard': 'each client banned first with `fastify.rateGuard.ban(key, \'10 minutes\')`; a banned request is answered 403',
  'frl-redis': '`/banned` has `max: 1, timeWindow: 10 min, ban: 0`, and each client sends 2 requests first: every later request is 403 (the store still counts it in Redis)',
  'frl-memory': 'as the Redis store, in the in-memory store (`cache: 100000`)',
  'rlf-redis': '`/banned` has its own `RateLimiterRedis` with `points: 1, duration: 600, blockDuration: 600` (no `inMemoryBlockOnConsumed`), and each client sends 2 requests first; blocked requests are answered 429 after a Redis call'
})

/** Select by `BENCH_ONLY`: comma-separated substrings of the ids; empty selects all but the `extra` ones. */
export function selectVariants (variants, only) {
  const wanted = (only ?? '').split(',').map(s => s.trim()).filter(s => s !== '')
  return wanted.length === 0 ? variants.filter(v => !v.extra) : variants.filter(v => wanted.some(w => v.id.includes(w)))
}
