// Every algorithm's scripts on each Redis-compatible server (test/helpers/servers.ts): the seeded differentials
// of the conformance suites, shorter, on a server of that binary. The Lua (time injected) and the in-process
// twin decide the same random traffic step by step alike: the lean path and the general one, bans and their
// ladders, overrides, several limits, costs, settling, and calendar quotas. The full runs (12 × 2,000 steps
// and more) stay on the redis-server on PATH (test/conformance-*.test.ts).
import t from 'tap'
import { ALGORITHMS } from '../../lib/algorithms/index.js'
import { LEAN_ALGORITHMS } from '../../lib/stores/scripts.js'
import { costsDifferential } from '../helpers/costs-differential.js'
import { differential } from '../helpers/differential.js'
import { client } from '../helpers/redis.js'
import { eachServer, startServer } from '../helpers/servers.js'

// CPU-bound, as the conformance files are (.taprc); a hang still fails within two minutes.
t.setTimeout(120_000)

/** Seeds whose short runs reach every kind of answer each differential checks for. */
const SEED = 1
const COSTS_SEED = 4
const QUOTA_SEED = 2
const STEPS = 300
const COSTS_STEPS = 400
const QUOTA_STEPS = 300

eachServer(t, 'every algorithm\'s scripts decide random traffic as the in-process twin does', async (t, server) => {
  const redis = client(t, (await startServer(t, server)).url)
  for (const algorithm of ALGORITHMS) {
    for (const lean of LEAN_ALGORITHMS.includes(algorithm) ? [true, false] : [true]) {
      const path = lean ? 'lean path first' : 'general path only'
      await t.test(`${algorithm}, ${path}: bans, peeks, operator calls (seed ${SEED}, ${STEPS} steps)`, async t => {
        await differential(t, algorithm, SEED, true, { lean, steps: STEPS, redis })
      })
    }
    // One run: the lean path takes its requests of one limit at a cost of 1, decide.lua the rest (the general
    // path alone is the run above's).
    await t.test(`${algorithm}: several limits, costs, overrides and settling (seed ${COSTS_SEED}, ${COSTS_STEPS} steps)`, async t => {
      await costsDifferential(t, algorithm, COSTS_SEED, true, { steps: COSTS_STEPS, redis })
    })
    await t.test(`${algorithm}: calendar quotas (seed ${QUOTA_SEED}, ${QUOTA_STEPS} steps)`, async t => {
      await differential(t, algorithm, QUOTA_SEED, true, { quotas: true, steps: QUOTA_STEPS, redis })
    })
  }
})
