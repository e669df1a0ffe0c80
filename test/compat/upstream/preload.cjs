'use strict'
// Preloaded into every @fastify/rate-limit test file run against this package (see ../upstream.test.ts).
// It changes the environment their tests run in, never a test:
// - their Redis tests connect to 127.0.0.1 with ioredis's default port and FLUSHALL it: the default port
//   becomes the port of a redis-server started for them alone;
// - node:test's mock timers are global: a test that fails before its `clock.reset()` would leave them on
//   for every later test of the file, so they are reset before each test.
const { beforeEach, mock } = require('node:test')

const port = Number(process.env.UPSTREAM_REDIS_PORT)
if (!Number.isInteger(port) || port <= 0) throw new Error('UPSTREAM_REDIS_PORT must name the port of the Redis the suite may flush')
require('ioredis/built/redis/RedisOptions').DEFAULT_REDIS_OPTIONS.port = port

beforeEach(() => mock.timers.reset())
