// Type tests of the public API, compiled (never run) by `npm run test:types` against the BUILT package.
// Importing by the package's own name goes through package.json "exports" to dist/index.d.ts, so these
// lines prove what a user gets: the `declare module 'fastify'` augmentation, the decorator and every option.
// Each `@ts-expect-error` line must stay an error: if it ever compiles, tsc fails on the unused directive.

import Fastify from 'fastify'
import type {
  FastifyContextConfig, FastifyError, FastifyInstance, FastifyRequest, RouteOptions, RouteShorthandOptions
} from 'fastify'
import { Redis, Cluster } from 'ioredis'
import rateGuard, { rateGuard as named, fastifyRateLimit, normalizeIP, keyHash, errors } from 'fastify-rate-guard'
import type {
  RateGuardOptions, RouteRateLimitOptions, RateGuardDecorator, PeekOptions, PeekResult, BanOptions,
  ErrorResponseContext, ErrorResponseBuilder, KeyGenerator, MaxFunction, TimeWindowFunction,
  AllowListFunction, KeyCallback, HookName, FailMode, Addressless, RedisLike, LimitOptions, CalendarLimitOptions, SharedOptions, BanCallback, BanInfo,
  OverrideOptions, BanEntry, RequestRateGuard, RequestQuota, QuotaLimit, QuotaConcurrency, QuotaReason
} from 'fastify-rate-guard'

/** True only when A and B are the same type (not merely assignable either way). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
function expectType<T> (value: T): T { return value }
function assertEqual<A, B> (proof: Equal<A, B>): Equal<A, B> { return proof }

declare const redis: Redis
declare const cluster: Cluster

const app = Fastify()

// ---- The exports ---------------------------------------------------------------------------------------

assertEqual<typeof rateGuard, typeof named>(true)
assertEqual<RedisLike, Redis | Cluster>(true)
assertEqual<HookName, 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'>(true)
assertEqual<FailMode, 'open' | 'closed' | 'local'>(true)
assertEqual<Addressless, 'shared' | 'connection'>(true)
expectType<string>(normalizeIP('::1'))
expectType<string>(normalizeIP(undefined, 48))
// @ts-expect-error the subnet is a number of bits
normalizeIP('::1', '64')
expectType<string>(keyHash('user:42'))
expectType<string>(keyHash(42))

const tooMany = new errors.TooManyRequestsError('7 seconds')
assertEqual<typeof tooMany.code, 'FST_RATE_GUARD_TOO_MANY_REQUESTS'>(true)
assertEqual<InstanceType<typeof errors.BannedError>['code'], 'FST_RATE_GUARD_BANNED'>(true)
assertEqual<InstanceType<typeof errors.UnavailableError>['code'], 'FST_RATE_GUARD_UNAVAILABLE'>(true)
assertEqual<InstanceType<typeof errors.ClosedError>['code'], 'FST_RATE_GUARD_CLOSED'>(true)
assertEqual<InstanceType<typeof errors.InvalidOptionError>['code'], 'FST_RATE_GUARD_INVALID_OPTION'>(true)
assertEqual<InstanceType<typeof errors.InvalidRouteConfigError>['code'], 'FST_RATE_GUARD_INVALID_ROUTE_CONFIG'>(true)
assertEqual<InstanceType<typeof errors.CommandConflictError>['code'], 'FST_RATE_GUARD_COMMAND_CONFLICT'>(true)
assertEqual<InstanceType<typeof errors.InvalidReplyError>['code'], 'FST_RATE_GUARD_INVALID_REPLY'>(true)
assertEqual<InstanceType<typeof errors.DeadlineError>['code'], 'FST_RATE_GUARD_DEADLINE'>(true)
expectType<FastifyError>(tooMany)
expectType<Error>(new errors.BannedError('1 minute'))
// @ts-expect-error the message argument of a 429 is the wait in words
errors.TooManyRequestsError(7)
// @ts-expect-error the deadline error takes milliseconds
errors.DeadlineError('100 ms')

// ---- Registering -----------------------------------------------------------------------------------------

await app.register(rateGuard)
await app.register(rateGuard, {})
await app.register(named, { max: 100 })

// Redis: an ioredis Redis, a Cluster, or a URL the plugin connects to (and closes).
await app.register(rateGuard, { redis })
await app.register(rateGuard, { redis: cluster })
await app.register(rateGuard, { redis: 'redis://127.0.0.1:6379' })
// @ts-expect-error a port alone is not a Redis
await app.register(rateGuard, { redis: 6379 })
// @ts-expect-error nor is a plain options object
await app.register(rateGuard, { redis: { host: '127.0.0.1', port: 6379 } })

// max: a number, or a function of the request and its key, sync or async.
await app.register(rateGuard, { max: 10 })
await app.register(rateGuard, { max: (request, key) => key.startsWith('apikey:') ? 1000 : request.ip === '::1' ? 10 : 100 })
await app.register(rateGuard, { max: async (request: FastifyRequest, key: string) => key.length + request.url.length })
// @ts-expect-error max is a number, not a string
await app.register(rateGuard, { max: '10' })
// @ts-expect-error a max function answers a number
await app.register(rateGuard, { max: (_request: FastifyRequest, _key: string) => '10' })

// timeWindow: milliseconds, a human duration, or a function answering either.
await app.register(rateGuard, { timeWindow: 60_000 })
await app.register(rateGuard, { timeWindow: '1 minute' })
await app.register(rateGuard, { timeWindow: (_request, key) => key.startsWith('user:') ? '10s' : 5000 })
await app.register(rateGuard, { timeWindow: async () => '1h' })
// @ts-expect-error a window is not a boolean
await app.register(rateGuard, { timeWindow: true })

// ban
await app.register(rateGuard, { ban: { threshold: 3, duration: '10 minutes' } })
await app.register(rateGuard, { ban: { threshold: 3, duration: 600_000 } })
await app.register(rateGuard, { ban: false })
// @ts-expect-error a ban needs its duration
await app.register(rateGuard, { ban: { threshold: 3 } })
// @ts-expect-error bans are on with an object, not with true
await app.register(rateGuard, { ban: true })

// allowList: keys, or a function of the request and key.
await app.register(rateGuard, { allowList: ['ip:127.0.0.1', 'apikey:internal'] })
await app.register(rateGuard, { allowList: ['ip:127.0.0.1'] as const })
await app.register(rateGuard, { allowList: (request, key) => key === 'user:admin' || request.ip === '127.0.0.1' })
await app.register(rateGuard, { allowList: async () => false })
// @ts-expect-error an allow list holds keys (strings)
await app.register(rateGuard, { allowList: [127001] })

// hook and the rest of the plugin-wide options.
await app.register(rateGuard, { hook: 'onRequest' })
await app.register(rateGuard, { hook: 'preHandler' })
// @ts-expect-error onSend runs after the handler: too late to refuse a request
await app.register(rateGuard, { hook: 'onSend' })
await app.register(rateGuard, { failMode: 'open' })
await app.register(rateGuard, { failMode: 'closed' })
await app.register(rateGuard, { failMode: 'local' })
// @ts-expect-error failMode is one of open, closed, local
await app.register(rateGuard, { failMode: 'maybe' })
await app.register(rateGuard, { skipOnError: true })
await app.register(rateGuard, { standardHeaders: 'draft-10', legacyHeaders: false })
await app.register(rateGuard, { standardHeaders: false })
// @ts-expect-error only the IETF draft-10 fields are written
await app.register(rateGuard, { standardHeaders: 'draft-7' })
// @ts-expect-error standardHeaders is not switched on with true
await app.register(rateGuard, { standardHeaders: true })

const everything: RateGuardOptions = {
  redis,
  max: 20,
  timeWindow: '5s',
  ban: { threshold: 3, duration: '10s' },
  allowList: ['ip:10.0.0.1'],
  groupId: 'api',
  hook: 'onRequest',
  global: true,
  nameSpace: 'my-app:',
  failMode: 'local',
  timeout: 50,
  strict: false,
  breaker: { threshold: 5, coolDown: '1s' },
  cache: 5000,
  maxWaiting: 2000,
  addressless: 'shared',
  apiKeyHeader: 'x-api-key',
  verifyApiKey: async (apiKey, request) => apiKey.length === 32 && request.headers.host !== undefined,
  userId: (request) => request.headers['x-user-id'],
  ipv6Subnet: 56,
  keyGenerator: (request) => request.ip,
  onExceeded: (request, key) => { request.log.info({ key }, 'limited') },
  onBanReach: (request, key) => { request.log.warn({ key }, 'banned') },
  errorResponseBuilder: (_request, context) => ({ statusCode: context.statusCode, message: `retry in ${context.after}` }),
  legacyHeaders: true,
  standardHeaders: 'draft-10'
}
await app.register(rateGuard, everything)
await app.register(rateGuard, { redis: ['redis://10.0.0.1:7000', 'redis://10.0.0.2:7000'], breaker: false, strict: true })
// @ts-expect-error the breaker needs a threshold and a cool-down
await app.register(rateGuard, { breaker: { threshold: 5 } })
// @ts-expect-error strict is a boolean
await app.register(rateGuard, { strict: 'yes' })
await app.register(rateGuard, { algorithm: 'fixed-window' })
app.get('/approx', { config: { rateLimit: { algorithm: 'sliding-window', max: 100 } } }, async () => 'ok')
// @ts-expect-error only the algorithms that exist
await app.register(rateGuard, { algorithm: 'leaky-bucket' })
await app.register(rateGuard, { apiKeyHeader: false, keyGenerator: async (request) => `tenant:${request.hostname}` })
// @ts-expect-error a key generator answers a string
await app.register(rateGuard, { keyGenerator: (request: FastifyRequest) => request.headers })
// Requests without a client address (a Unix socket): one shared client (the default), or one per connection.
await app.register(rateGuard, { addressless: 'shared' })
await app.register(rateGuard, { addressless: 'connection' })
// @ts-expect-error refusing them is not one of the choices
await app.register(rateGuard, { addressless: 'refuse' })
// @ts-expect-error verifyApiKey answers whether the key is valid
await app.register(rateGuard, { verifyApiKey: (apiKey: string) => apiKey })
// @ts-expect-error unknown options are rejected by the types too
await app.register(rateGuard, { maxRequests: 10 })

// The named function types fit the options they are named after.
const tier: MaxFunction = async (_request, key) => key.startsWith('apikey:') ? 40 : 10
const window: TimeWindowFunction = () => '5s'
const allow: AllowListFunction = (_request, key) => key === 'ip:127.0.0.1'
const keyOf: KeyGenerator = (request) => request.ip
const log: KeyCallback = (request, key) => { request.log.info({ key }) }
const ban: BanOptions = { threshold: 5, duration: '1 hour' }
const hook: HookName = 'preValidation'
const mode: FailMode = 'closed'
await app.register(rateGuard, { max: tier, timeWindow: window, allowList: allow, keyGenerator: keyOf, onExceeded: log, ban, hook, failMode: mode })

// ---- errorResponseBuilder --------------------------------------------------------------------------------

const builder: ErrorResponseBuilder = (request, context) => {
  expectType<FastifyRequest>(request)
  assertEqual<typeof context, ErrorResponseContext>(true)
  expectType<number>(context.statusCode)
  expectType<boolean>(context.ban)
  expectType<number>(context.max)
  expectType<number>(context.ttl)
  expectType<string>(context.after)
  // @ts-expect-error the context has no retryAfter (ttl is the wait in ms, after the same in words)
  expectType<unknown>(context.retryAfter)
  return { statusCode: context.ban ? 403 : 429, error: context.ban ? 'Forbidden' : 'Too Many Requests', message: context.after }
}
await app.register(rateGuard, { errorResponseBuilder: builder })
await app.register(rateGuard, { errorResponseBuilder: (_request, context) => new errors.TooManyRequestsError(context.after) })
// @ts-expect-error the builder answers an object (it is thrown, and the error handler shapes the body)
await app.register(rateGuard, { errorResponseBuilder: () => 'slow down' })

// ---- Route config (module augmentation of FastifyContextConfig) -------------------------------------------

app.get('/search', { config: { rateLimit: { max: 10, timeWindow: '10s' } } }, async () => ({ results: [] }))
app.get('/health', { config: { rateLimit: false } }, async () => ({ ok: true }))
app.get('/plain', async () => 'no config: the plugin-wide budget')
app.route({
  method: ['GET', 'POST'],
  url: '/grouped',
  config: {
    rateLimit: {
      groupId: 'reports',
      max: async (_request, key) => key.startsWith('apikey:') ? 100 : 5,
      timeWindow: (request) => request.method === 'POST' ? '1 minute' : 10_000,
      ban: false,
      allowList: ['ip:127.0.0.1'],
      keyGenerator: (request) => request.ip,
      errorResponseBuilder: (_request, context) => ({ statusCode: context.statusCode, message: context.after }),
      onExceeded: (request, key) => { request.log.info({ key }) },
      onBanReach: (_request, _key) => {},
      legacyHeaders: false,
      standardHeaders: 'draft-10'
    }
  },
  handler: async () => 'ok'
})
app.get('/seen', {
  config: { rateLimit: { max: 1 } },
  handler: async (request) => {
    // The route's config is typed on the request too.
    const config = request.routeOptions.config.rateLimit
    expectType<RouteRateLimitOptions | false | undefined>(config)
    return config === false ? 'off' : config?.max
  }
})
const routeConfig: RouteRateLimitOptions = { max: 5, timeWindow: 1000 }
app.get('/typed', { config: { rateLimit: routeConfig } }, async () => 'ok')

// Wrong route configs. Fastify infers a route's `ContextConfig` from an inline `config` and intersects it
// with FastifyContextConfig, which lets a wrong *type* of value through unchecked (`rateLimit: true` on an
// inline `app.get(url, { config }, handler)`): TypeScript skips its weak-type check inside intersections.
// Where the config meets the augmented type as such, it is checked, as below; at run time every route
// config is checked at register anyway (FST_RATE_GUARD_INVALID_ROUTE_CONFIG).
// @ts-expect-error a route limit is switched on with an object, not true
const on: FastifyContextConfig = { rateLimit: true }
// @ts-expect-error nor with a string
const yes: RouteShorthandOptions = { config: { rateLimit: 'yes' } }
// @ts-expect-error typed route options are checked as a whole
const routeOn: RouteOptions = { method: 'GET', url: '/on', config: { rateLimit: true }, handler: async () => 'ok' }
// @ts-expect-error with route generics given, ContextConfig is not inferred, so `true` is caught inline too
app.get<{ Querystring: { q: string } }>('/on', { config: { rateLimit: true } }, async () => 'ok')
// @ts-expect-error connection options belong to the plugin, not to a route
const perRouteRedis: RouteRateLimitOptions = { redis }
// @ts-expect-error so does the in-process store's size
const perRouteCache: RouteRateLimitOptions = { cache: 100 }
// @ts-expect-error and how many requests wait in the process (maxWaiting: every budget's together)
const perRouteMaxWaiting: RouteRateLimitOptions = { maxWaiting: 100 }
// @ts-expect-error and who a request without an address is
const perRouteAddressless: RouteRateLimitOptions = { addressless: 'connection' }
// A route may choose its hook, what decides when Redis cannot, and the IPv6 subnet of its default key.
const perRouteFailMode: FastifyContextConfig = { rateLimit: { failMode: 'closed', hook: 'preHandler', ipv6Subnet: 56 } }
const perRouteSkip: FastifyContextConfig = { rateLimit: { skipOnError: false } }
// A wrong value for a known option is caught even inline.
// @ts-expect-error a route max is a number
app.get('/string-max', { config: { rateLimit: { max: '10' } } }, async () => 'ok')
// @ts-expect-error a route window is a duration
app.get('/window', { config: { rateLimit: { timeWindow: [10, 's'] } } }, async () => 'ok')
expectType<unknown[]>([on, yes, routeOn, perRouteRedis, perRouteCache, perRouteMaxWaiting, perRouteAddressless, perRouteFailMode, perRouteSkip])

// ---- fastify.rateGuard -----------------------------------------------------------------------------------

assertEqual<FastifyInstance['rateGuard'], RateGuardDecorator>(true)
assertEqual<ReturnType<typeof app.rateGuard.ban>, Promise<void>>(true)
assertEqual<ReturnType<typeof app.rateGuard.unban>, Promise<void>>(true)
assertEqual<ReturnType<typeof app.rateGuard.reset>, Promise<void>>(true)
assertEqual<ReturnType<typeof app.rateGuard.peek>, Promise<PeekResult>>(true)

await app.rateGuard.ban('ip:203.0.113.7', '10 minutes')
await app.rateGuard.ban('user:42', 600_000)
await app.rateGuard.unban('ip:203.0.113.7')
await app.rateGuard.reset('apikey:abc')
// @ts-expect-error a ban lasts for a duration
await app.rateGuard.ban('user:42')
// @ts-expect-error a duration is not a Date
await app.rateGuard.ban('user:42', new Date())
// @ts-expect-error keys are strings (`ip:…`, `user:…`, `apikey:…`)
await app.rateGuard.reset(42)

const seen = await app.rateGuard.peek('user:42')
assertEqual<typeof seen, PeekResult>(true)
assertEqual<PeekResult['status'], 'allowed' | 'limited' | 'banned'>(true)
expectType<string>(seen.key)
expectType<number>(seen.max)
expectType<number>(seen.count)
expectType<number>(seen.remaining)
expectType<number>(seen.resetMs)
expectType<number>(seen.retryMs)
if (seen.status === 'banned') expectType<'banned'>(seen.status)
// @ts-expect-error there is no such status: an unenforced request is never peeked
const unenforced: PeekResult['status'] = 'unenforced'
expectType<unknown>(unenforced)

const peekOptions: PeekOptions = { route: 'GET /search' }
await app.rateGuard.peek('ip:127.0.0.1', peekOptions)
await app.rateGuard.peek('ip:127.0.0.1', { groupId: 'reports' })
await app.rateGuard.peek('user:42', { route: 'GET /grouped', max: 5, timeWindow: '10s' })
await app.rateGuard.peek('user:42', { max: 5, timeWindow: 10_000 })
// @ts-expect-error peek answers a Promise: await it before reading the result
expectType<string>(app.rateGuard.peek('user:42').status)
// @ts-expect-error peek has no `method` option: the route is named as 'GET /search'
await app.rateGuard.peek('user:42', { method: 'GET' })
// @ts-expect-error peek cannot be given a function for max: it has no request
await app.rateGuard.peek('user:42', { max: () => 5 })

// The decorator type is exported for functions that take it.
const decorator: RateGuardDecorator = app.rateGuard
expectType<(key: string, duration: number | string) => Promise<void>>(decorator.ban)

// The augmentation reaches encapsulated instances too.
await app.register(async (child) => {
  expectType<RateGuardDecorator>(child.rateGuard)
  child.get('/child', { config: { rateLimit: { max: 3, timeWindow: '1s' } } }, async () => 'ok')
})

// ---- Several limits, the token bucket's burst, shared budgets ----------------------------------------------

await app.register(rateGuard, { limits: [{ max: 10, timeWindow: '1s', name: 'burst' }, { max: 1000, timeWindow: '1 hour' }] })
await app.register(rateGuard, { limits: [{ max: (_request, key) => key.startsWith('apikey:') ? 50 : 5, timeWindow: async () => '1s' }] })
await app.register(rateGuard, { algorithm: 'token-bucket', max: 10, timeWindow: '1 minute', burst: 30 })
await app.register(rateGuard, { algorithm: 'token-bucket', limits: [{ max: 10, timeWindow: '1 minute', burst: 30 }] })
const limit: LimitOptions = { max: 5, timeWindow: 1000 }
await app.register(rateGuard, { limits: [limit] as const })
// @ts-expect-error a limit needs its window
await app.register(rateGuard, { limits: [{ max: 5 }] })
// @ts-expect-error limits is a list
await app.register(rateGuard, { limits: { max: 5, timeWindow: 1000 } })
// @ts-expect-error a limit's name is a string
await app.register(rateGuard, { limits: [{ max: 5, timeWindow: 1000, name: 1 }] })
// @ts-expect-error burst is a number of requests
await app.register(rateGuard, { algorithm: 'token-bucket', burst: '30' })
// Calendar quotas: a day, a week or a month in a time zone, beside other limits; max may be a function (a plan's).
await app.register(rateGuard, { limits: [{ max: 5, timeWindow: '1s' }, { max: (request) => request.headers['x-plan'] === 'pro' ? 1000 : 10, per: 'month', timeZone: 'America/New_York', name: 'monthly' }] })
const quota: CalendarLimitOptions = { max: 3, per: 'day' }
await app.register(rateGuard, { limits: [quota] })
// @ts-expect-error a calendar period is a day, a week or a month
await app.register(rateGuard, { limits: [{ max: 3, per: 'year' }] })
// @ts-expect-error a calendar quota is enforced, never watched
await app.register(rateGuard, { limits: [{ max: 3, per: 'day', mode: 'shadow' }] })

app.get('/shared', { config: { rateLimit: { max: 5, shared: { max: 100, timeWindow: '1 minute' } } } }, async () => 'ok')
app.get('/shared-limits', { config: { rateLimit: { shared: { limits: [{ max: 10, timeWindow: '1s' }, { max: 100, timeWindow: '1 minute', name: 'all' }] } } } }, async () => 'ok')
app.get('/not-shared', { config: { rateLimit: { shared: false } } }, async () => 'ok')
const shared: SharedOptions = { max: 3, timeWindow: 1000, burst: 5, name: 'everyone' }
expectType<RouteRateLimitOptions>({ shared })
// @ts-expect-error a shared budget is not per request: max is a number
const sharedFn: SharedOptions = { max: () => 3, timeWindow: 1000 }
// @ts-expect-error it is switched on with an object, not true
const sharedOn: RouteRateLimitOptions = { shared: true }
expectType<unknown[]>([sharedFn, sharedOn])

// ---- Escalating bans, and what onBanReach is told -------------------------------------------------------

await app.register(rateGuard, { ban: { threshold: 3, duration: '1 minute', escalate: 2, maxDuration: '1 day', forget: '1 week' } })
await app.register(rateGuard, { ban: { threshold: 3, escalate: ['1 minute', '10 minutes', 3_600_000] } })
// @ts-expect-error escalate is a factor or a list of durations
await app.register(rateGuard, { ban: { threshold: 3, duration: '1m', escalate: 'double' } })
// @ts-expect-error maxDuration is a duration
await app.register(rateGuard, { ban: { threshold: 3, duration: '1m', escalate: 2, maxDuration: true } })
const ladder: BanOptions = { threshold: 2, escalate: ['1s', '5s'] }
expectType<BanOptions>(ladder)

const banCallback: BanCallback = (request, key, ban) => {
  expectType<FastifyRequest>(request)
  expectType<string>(key)
  assertEqual<typeof ban, BanInfo>(true)
  expectType<number>(ban.durationMs)
  expectType<number>(ban.offence)
  // @ts-expect-error the ban's length is durationMs
  expectType<unknown>(ban.duration)
}
await app.register(rateGuard, { onBanReach: banCallback })
await app.register(rateGuard, { onBanReach: (request, key, { durationMs, offence }) => { request.log.warn({ key, durationMs, offence }, 'banned') } })
// A callback that ignores the ban's details still fits.
await app.register(rateGuard, { onBanReach: (_request, key) => { expectType<string>(key) } })
// @ts-expect-error the third argument is an object, not a number of ms
await app.register(rateGuard, { onBanReach: (_request: FastifyRequest, _key: string, ms: number) => ms })

// ---- Overrides, and every limit in peek ---------------------------------------------------------------

assertEqual<ReturnType<typeof app.rateGuard.setOverride>, Promise<void>>(true)
assertEqual<ReturnType<typeof app.rateGuard.clearOverride>, Promise<void>>(true)
await app.rateGuard.setOverride('apikey:big-customer', { max: 10_000, timeWindow: '1 minute', ttl: '30 days' })
await app.rateGuard.setOverride('user:42', { limits: [{ max: 10, timeWindow: '1s' }, { max: 500, timeWindow: '1 hour' }], permanent: true })
await app.rateGuard.setOverride('user:42', { route: 'GET /search', max: 100, timeWindow: 60_000, burst: 20, ttl: 3_600_000 })
await app.rateGuard.setOverride('user:42', { groupId: 'reports', max: 100, timeWindow: '1 minute', permanent: true })
await app.rateGuard.clearOverride('user:42')
await app.rateGuard.clearOverride('user:42', { route: 'GET /search' })
await app.rateGuard.clearOverride('user:42', { groupId: 'reports' })
const override: OverrideOptions = { max: 5, timeWindow: '1s', ttl: 1000 }
expectType<OverrideOptions>(override)
// @ts-expect-error an override needs its options
await app.rateGuard.setOverride('user:42')
// @ts-expect-error permanent is true or left out
await app.rateGuard.setOverride('user:42', { max: 5, timeWindow: '1s', permanent: false })
// @ts-expect-error an override's max is a number: it applies without a request
await app.rateGuard.setOverride('user:42', { max: () => 5, timeWindow: '1s', ttl: '1h' })
// @ts-expect-error clearOverride names the budget, nothing else
await app.rateGuard.clearOverride('user:42', { ttl: '1h' })

// Every limit, the binding one first among equals (an override's, when one is set).
const limitsSeen = (await app.rateGuard.peek('user:42')).limits
assertEqual<typeof limitsSeen, PeekResult['limits']>(true)
expectType<number>(limitsSeen[0]!.remaining)
assertEqual<PeekResult['limits'][number], { max: number, windowMs: number, count: number, remaining: number, resetMs: number }>(true)

// ---- @fastify/rate-limit's spellings (issue 6) --------------------------------------------------------

assertEqual<typeof fastifyRateLimit, typeof rateGuard>(true)
await Fastify().register(fastifyRateLimit, {
  max: 100,
  timeWindow: '1 minute',
  ban: 3,
  enableDraftSpec: true,
  addHeaders: { 'ratelimit-reset': false, 'retry-after': true },
  addHeadersOnExceeding: { 'ratelimit-remaining': false },
  onExceeding: (request: FastifyRequest, key: string) => { expectType<string>(key) },
  continueExceeding: false,
  exponentialBackoff: false
})
app.get('/compat', { config: { rateLimit: { ban: 0, addHeaders: { 'x-ratelimit-limit': false } } } }, async () => 'ok')
await Fastify().register(rateGuard, { continueExceeding: true, exponentialBackoff: true })
// @ts-expect-error a header switch is a boolean
await Fastify().register(rateGuard, { addHeaders: { 'retry-after': 'no' } })

// A request's cost in units: a number, or a function of the request (sync or async).
app.get('/bulk', { config: { rateLimit: { cost: 5 } } }, async () => 'ok')
app.get('/tokens', { config: { rateLimit: { cost: async (request: FastifyRequest, key: string) => { expectType<string>(key); return Number(request.headers['x-units']) } } } }, async () => 'ok')
// @ts-expect-error a cost is a number of units
app.get('/bad', { config: { rateLimit: { cost: '5' } } }, async () => 'ok')
// Settling: from the handler, or after the response.
app.get('/llm', { config: { rateLimit: { cost: 500, refundAborted: true } } }, async (request) => {
  expectType<number>(request.rateGuard.charged)
  expectType<boolean>(request.rateGuard.settled)
  await request.rateGuard.settle(1234)
  return 'ok'
})
app.post('/login', { config: { rateLimit: { skipSuccessfulRequests: true, settle: async (_request, reply) => reply.statusCode } } }, async () => 'ok')
// Holding a request's concurrency slots for work after its response: hold() gives the function that ends the hold.
app.get('/report', { config: { rateLimit: { concurrency: { max: 2 } } } }, async (request) => {
  const done = request.rateGuard.hold()
  expectType<() => void>(done)
  setImmediate(done)
  // @ts-expect-error hold takes no argument
  request.rateGuard.hold(1000)
  return 'ok'
})
// The decision that let the request in (express-rate-limit's req.rateLimit): the binding limit's numbers, every limit, slots.
app.get('/quota', { config: { rateLimit: { limits: [{ max: 10, timeWindow: '1s' }, { max: 1000, per: 'day' }], concurrency: { max: 2 } } } }, async (request) => {
  const quota = request.rateGuard
  expectType<RequestRateGuard>(quota)
  expectType<boolean>(quota.limited)
  assertEqual<typeof quota.reason, QuotaReason | undefined>(true)
  assertEqual<typeof quota.key, string | number | undefined>(true)
  assertEqual<typeof quota.keyHash, string | undefined>(true)
  assertEqual<typeof quota.remaining, number | undefined>(true)
  assertEqual<typeof quota.limit, number | undefined>(true)
  assertEqual<typeof quota.used, number | undefined>(true)
  assertEqual<typeof quota.resetMs, number | undefined>(true)
  assertEqual<typeof quota.resetTime, Date | undefined>(true)
  const first: QuotaLimit | undefined = quota.limits[0]
  if (first !== undefined) {
    expectType<string>(first.name)
    expectType<number>(first.remaining)
    expectType<Date>(first.resetTime)
    assertEqual<typeof first.per, 'day' | 'week' | 'month' | undefined>(true)
  }
  assertEqual<typeof quota.concurrency, QuotaConcurrency | null>(true)
  expectType<number | undefined>(quota.concurrency?.inFlight)
  const quotaOnly: RequestQuota = quota
  // @ts-expect-error the quota is read, never written
  quota.remaining = 5
  // peek with a request of the client: the budget's max / timeWindow functions are called with it
  await app.rateGuard.peek('user:42', { route: 'GET /quota', request })
  return { remaining: quotaOnly.remaining ?? 0 }
})
app.get('/count', { config: { rateLimit: { countWhen: (_request, reply) => reply.statusCode !== 304 } } }, async () => 'ok')
// @ts-expect-error countWhen answers a boolean
app.get('/count-bad', { config: { rateLimit: { countWhen: () => 'yes' } } }, async () => 'ok')
// Modes, per route and per limit.
app.get('/trial', { config: { rateLimit: { mode: 'shadow', shadow: { ban: true }, onExceeded: (_request, _key, { shadow }) => { expectType<boolean>(shadow) } } } }, async () => 'ok')
app.get('/watched', { config: { rateLimit: { limits: [{ max: 10, timeWindow: '1s' }, { max: 5, timeWindow: '1s', mode: 'shadow' }] } } }, async () => 'ok')
// @ts-expect-error a mode is enforce, shadow or report
app.get('/mode-bad', { config: { rateLimit: { mode: 'dry-run' } } }, async () => 'ok')
// The operator's calls.
assertEqual<Awaited<ReturnType<typeof app.rateGuard.bans>>, BanEntry[]>(true)
assertEqual<BanEntry, { keyHash: string, retryMs: number, shadow: boolean }>(true)
// A ban shadow mode recorded, told apart: never enforced.
const [listed] = await app.rateGuard.bans({ limit: 10 })
if (listed?.shadow === true) expectType<number>(listed.retryMs)
const trialPeek = await app.rateGuard.peek('user:42', { route: 'GET /trial' })
expectType<boolean>(trialPeek.shadow)
expectType<number>(trialPeek.shadowBanMs)
expectType<Promise<void>>(app.rateGuard.unban({ keyHash: 'x'.repeat(22) }))
expectType<number>(app.rateGuard.stats().decisions['shadow-limited'])

// The decorators @fastify/rate-limit has: a hook to place, and a check to call by hand.
app.setNotFoundHandler({ preHandler: app.rateLimit({ max: 4, timeWindow: 500 }) }, async () => 'gone')
app.get('/checked', { onRequest: app.rateLimit() }, async (request) => {
  const answer = await app.createRateLimit({ max: 10, timeWindow: '1 minute' })(request, { increment: false })
  if (answer.isAllowed) return expectType<string>(answer.key)
  expectType<number>(answer.remaining)
  expectType<boolean>(answer.isExceeded)
  return answer.ttlInSeconds
})
// @ts-expect-error the check takes the request
await app.createRateLimit()()
// @ts-expect-error a limiter's max is a number or a function of the request
app.rateLimit({ max: '4' })
