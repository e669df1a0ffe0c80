// @fastify/rate-limit 11.2's own type test (its types/index.tst.ts), as an app written against its types:
// compiled by `npm run test:types` against this package with the import changed, to prove such an app
// compiles unchanged. Beyond the import, the only edits are marked `// here:`: ioredis 6 (this project's)
// exports its client by name, and tstyche's matchers are declarations.

import fastify, {
  FastifyInstance,
  FastifyRequest,
  preHandlerAsyncHookHandler,
  RequestGenericInterface,
  RouteOptions
} from 'fastify'
import * as http2 from 'node:http2'
import { Redis as IORedis } from 'ioredis' // here: ioredis 6 has no default export
import pino from 'pino'
import fastifyRateLimit, {
  CreateRateLimitOptions,
  errorResponseBuilderContext,
  FastifyRateLimitOptions,
  FastifyRateLimitStore,
  normalizeIP,
  RateLimitPluginOptions
} from 'fastify-rate-guard'
import { expect } from './expect.js' // here: tstyche's matchers, as declarations

class CustomStore implements FastifyRateLimitStore {
  options: FastifyRateLimitOptions

  constructor (options: FastifyRateLimitOptions) {
    this.options = options
  }

  incr (
    _key: string,
    _callback: (
      error: Error | null,
      result?: { current: number; ttl: number }
    ) => void,
    _timeWindow: number,
    _max: number
  ) {}

  child (_routeOptions: RouteOptions & { path: string; prefix: string }) {
    return <CustomStore>(<FastifyRateLimitOptions>{})
  }
}

const appWithImplicitHttp = fastify()
const options1: RateLimitPluginOptions = {
  global: true,
  max: 3,
  timeWindow: 5000,
  cache: 10000,
  allowList: ['127.0.0.1'],
  redis: new IORedis({ host: '127.0.0.1' }),
  skipOnError: true,
  ban: 10,
  continueExceeding: false,
  keyGenerator: (req: FastifyRequest<RequestGenericInterface>) => req.ip,
  ipv6Subnet: 64,
  groupId: '42',
  errorResponseBuilder: (
    req: FastifyRequest<RequestGenericInterface>,
    context: errorResponseBuilderContext
  ) => {
    if (context.ban) {
      return {
        statusCode: 403,
        error: 'Forbidden',
        message: `You can not access this service as you have sent too many requests that exceed your rate limit. Your IP: ${req.ip} and Limit: ${context.max}`,
      }
    } else {
      return {
        statusCode: 429,
        error: 'Too Many Requests',
        message: `You hit the rate limit, please slow down! You can retry in ${context.after}`,
      }
    }
  },
  addHeadersOnExceeding: {
    'x-ratelimit-limit': false,
    'x-ratelimit-remaining': false,
    'x-ratelimit-reset': false
  },
  addHeaders: {
    'x-ratelimit-limit': false,
    'x-ratelimit-remaining': false,
    'x-ratelimit-reset': false,
    'retry-after': false
  },
  onExceeding: (
    _req: FastifyRequest<RequestGenericInterface>,
    _key: string
  ) => ({}),
  onExceeded: (
    _req: FastifyRequest<RequestGenericInterface>,
    _key: string
  ) => ({}),
  onBanReach: (
    _req: FastifyRequest<RequestGenericInterface>,
    _key: string
  ) => ({})
}

const options2: RateLimitPluginOptions = {
  global: true,
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) => 42,
  allowList: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    false,
  timeWindow: 5000,
  hook: 'preParsing'
}

const options3: RateLimitPluginOptions = {
  global: true,
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) => 42,
  timeWindow: 5000,
  store: CustomStore,
  hook: 'preValidation'
}

const options4: RateLimitPluginOptions = {
  global: true,
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    Promise.resolve(42),
  timeWindow: 5000,
  store: CustomStore,
  hook: 'preHandler'
}

const options5: RateLimitPluginOptions = {
  max: 3,
  timeWindow: 5000,
  cache: 10000,
  redis: new IORedis({ host: '127.0.0.1' }),
  nameSpace: 'my-namespace'
}

const options6: RateLimitPluginOptions = {
  global: true,
  allowList: async (_req, _key) => true,
  keyGenerator: async (_req) => '',
  timeWindow: 5000,
  store: CustomStore,
  hook: 'preHandler'
}

const options7: RateLimitPluginOptions = {
  global: true,
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) => 42,
  timeWindow: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    5000,
  store: CustomStore,
  hook: 'preValidation'
}

const options8: RateLimitPluginOptions = {
  global: true,
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) => 42,
  timeWindow: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    Promise.resolve(5000),
  store: CustomStore,
  hook: 'preValidation'
}

const options9: RateLimitPluginOptions = {
  global: true,
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    Promise.resolve(42),
  timeWindow: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    5000,
  store: CustomStore,
  hook: 'preValidation',
  exponentialBackoff: true
}

appWithImplicitHttp.register(fastifyRateLimit, options1)
appWithImplicitHttp.register(fastifyRateLimit, options2)
appWithImplicitHttp.register(fastifyRateLimit, options5)
appWithImplicitHttp.register(fastifyRateLimit, options9)

appWithImplicitHttp.register(fastifyRateLimit, options3).then(() => {
  expect(
    appWithImplicitHttp.rateLimit()
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options1)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options2)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options3)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options4)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options5)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options6)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options7)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options8)
  ).type.toBe<preHandlerAsyncHookHandler>()
  expect(
    appWithImplicitHttp.rateLimit(options9)
  ).type.toBe<preHandlerAsyncHookHandler>()
})
// The following test is dependent on https://github.com/fastify/fastify/pull/2929
// appWithImplicitHttp.setNotFoundHandler({
//   preHandler: appWithImplicitHttp.rateLimit()
// }, function (request:FastifyRequest<RequestGenericInterface>, reply: FastifyReply<ReplyGenericInterface>) {
//   reply.status(404).send(new Error('Not found'))
// })

appWithImplicitHttp.get(
  '/',
  { config: { rateLimit: { max: 10, timeWindow: '60s' } } },
  () => {
    return 'limited'
  }
)

const appWithHttp2: FastifyInstance<
  http2.Http2Server,
  http2.Http2ServerRequest,
  http2.Http2ServerResponse
> = fastify({ http2: true })

appWithHttp2.register(fastifyRateLimit, options1)
appWithHttp2.register(fastifyRateLimit, options2)
appWithHttp2.register(fastifyRateLimit, options3)
appWithHttp2.register(fastifyRateLimit, options5)
appWithHttp2.register(fastifyRateLimit, options6)
appWithHttp2.register(fastifyRateLimit, options7)
appWithHttp2.register(fastifyRateLimit, options8)
appWithHttp2.register(fastifyRateLimit, options9)

appWithHttp2.get(
  '/public',
  {
    config: {
      rateLimit: false
    }
  },
  (_request, reply) => {
    reply.send({ hello: 'from ... public' })
  }
)

expect<errorResponseBuilderContext>().type.toBeAssignableFrom({
  statusCode: 429,
  ban: true,
  after: '123',
  max: 1000,
  ttl: 123
})
expect(normalizeIP).type.toBeCallableWith('2001:db8::1', 64)
expect(normalizeIP('2001:db8::1')).type.toBe<string>()

const appWithCustomLogger = fastify({
  loggerInstance: pino()
}).withTypeProvider()

appWithCustomLogger.register(fastifyRateLimit, options1)

appWithCustomLogger.route({
  method: 'GET',
  url: '/',
  preHandler: appWithCustomLogger.rateLimit({}),
  handler: () => {}
})

const options10: CreateRateLimitOptions = {
  store: CustomStore,
  skipOnError: true,
  max: 0,
  timeWindow: 5000,
  allowList: ['127.0.0.1'],
  keyGenerator: (req: FastifyRequest<RequestGenericInterface>) => req.ip,
  ipv6Subnet: 56,
  ban: 10
}

appWithImplicitHttp.register(fastifyRateLimit, { global: false })
const checkRateLimit = appWithImplicitHttp.createRateLimit(options10)

appWithImplicitHttp.route({
  method: 'GET',
  url: '/',
  handler: async (req, _reply) => {
    const limit = await checkRateLimit(req)
    expect(limit).type.toBe<
      | {
        isAllowed: true;
        key: string;
      }
      | {
        isAllowed: false;
        key: string;
        max: number;
        timeWindow: number;
        remaining: number;
        ttl: number;
        ttlInSeconds: number;
        isExceeded: boolean;
        isBanned: boolean;
      }
    >()

    // The limiter function accepts an optional second argument
    expect(checkRateLimit).type.toBeCallableWith(req, { increment: false })
  }
})

const options11: CreateRateLimitOptions = {
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) => 42,
  timeWindow: '10s',
  allowList: (_req: FastifyRequest<RequestGenericInterface>) => true,
  keyGenerator: (_req: FastifyRequest<RequestGenericInterface>) => 42
}

const options12: CreateRateLimitOptions = {
  max: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    Promise.resolve(42),
  timeWindow: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    5000,
  allowList: (_req: FastifyRequest<RequestGenericInterface>) =>
    Promise.resolve(true),
  keyGenerator: (_req: FastifyRequest<RequestGenericInterface>) =>
    Promise.resolve(42)
}

const options13: CreateRateLimitOptions = {
  timeWindow: (_req: FastifyRequest<RequestGenericInterface>, _key: string) =>
    Promise.resolve(5000),
  keyGenerator: (_req: FastifyRequest<RequestGenericInterface>) =>
    Promise.resolve('key')
}

expect(
  appWithImplicitHttp.rateLimit(options11)
).type.toBe<preHandlerAsyncHookHandler>()
expect(
  appWithImplicitHttp.rateLimit(options12)
).type.toBe<preHandlerAsyncHookHandler>()
expect(
  appWithImplicitHttp.rateLimit(options13)
).type.toBe<preHandlerAsyncHookHandler>()
