// `npm run demo`: the example API under load from three clients over real HTTP for 15 seconds.
//
//   API key   a partner's integration, steady and well within its 40 per 5 s
//   user 42   a logged-in user browsing, with a search now and then (searches have their own, smaller budget)
//   abuser    one IP (X-Forwarded-For, believed because the proxy is loopback) hammering from second 2
//
// Every second prints what each client got (200 / 429 / 403); the summary says when the abuser was refused,
// banned and let back in, and what Retry-After it was told. Store: see examples/redis.js (Redis when one
// answers, DEMO_IN_PROCESS=1 for the in-process twin). Keys live under a fresh nameSpace per run.

import { setTimeout as sleep } from 'node:timers/promises'
import { BAN, SEARCH_LIMIT, TIERS, WINDOW, buildApp } from './app.js'
import { chooseRedis } from './redis.js'

const SECONDS = Number.parseInt(process.env.DEMO_SECONDS ?? '', 10) > 0 ? Number.parseInt(process.env.DEMO_SECONDS ?? '', 10) : 15
const ABUSER_IP = '203.0.113.7'
const STATUSES = [200, 429, 403]

/**
 * @typedef {Record<string, number>} Tally responses by status: 200, 429, 403, other
 * @typedef {{ at: number, status: number | 'error', path: string, retryAfter: string | null }} Answer
 * @typedef {{ name: string, limit: number, plan: string, every: number, from: number,
 *   next: (i: number) => { path: string, headers: Record<string, string> },
 *   log: Answer[], perSecond: Tally[], lastHeaders: Headers | undefined }} Client
 */

/** @type {Array<Omit<Client, 'log' | 'perSecond' | 'lastHeaders'>>} */
const plans = [
  {
    name: 'API key',
    limit: TIERS.apikey,
    plan: 'GET /items every 150 ms, with x-api-key: key-acme-0001',
    every: 150,
    from: 0,
    next: () => ({ path: '/items', headers: { 'x-api-key': 'key-acme-0001' } })
  },
  {
    name: 'user 42',
    limit: TIERS.user,
    plan: 'every 200 ms, logged in as user 42: GET /items, every third one GET /search',
    every: 200,
    from: 0,
    next: (i) => ({ path: i % 3 === 2 ? '/search?q=tea' : '/items', headers: { authorization: 'Bearer user-42' } })
  },
  {
    name: 'abuser',
    limit: TIERS.ip,
    plan: `GET /items every 25 ms from 2 s on, from ${ABUSER_IP} (X-Forwarded-For)`,
    every: 25,
    from: 2000,
    next: () => ({ path: '/items', headers: { 'x-forwarded-for': ABUSER_IP } })
  }
]
/** @type {Client[]} */
const clients = plans.map(plan => ({
  ...plan,
  log: [], // { at, status, path, retryAfter } per response, in order
  perSecond: Array.from({ length: SECONDS }, () => ({ 200: 0, 429: 0, 403: 0, other: 0 })),
  lastHeaders: undefined
}))

const { redis, where, notice } = await chooseRedis().catch((err) => {
  console.error(`demo: ${err.message}`)
  process.exit(1)
})
const nameSpace = `demo-${Date.now()}:`
const app = await buildApp({ redis, nameSpace })
await app.listen({ port: 0, host: '127.0.0.1' })
const base = `http://127.0.0.1:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`

console.log('fastify-rate-guard demo')
console.log(`  store     ${where}${redis === undefined ? '' : `, keys under ${nameSpace}`}`)
if (notice) console.log(`  NOTICE    ${notice}`)
console.log(`  app       ${base}`)
console.log(`  limits    per ${spaced(WINDOW)} sliding window: API key ${TIERS.apikey}, user ${TIERS.user}, IP ${TIERS.ip};` +
  ` GET /search ${SEARCH_LIMIT.max} per ${spaced(SEARCH_LIMIT.timeWindow)} (never bans)`)
console.log(`            ${BAN.threshold} refusals within a window ban the client for ${spaced(BAN.duration)}`)
console.log('  clients')
for (const client of clients) console.log(`    ${client.name.padEnd(10)}${client.plan}`)
console.log(`\nRunning for ${SECONDS} s; counts are by the second each answer arrived.\n`)

const start = Date.now()
const end = start + SECONDS * 1000
try {
  printHeader()
  const drivers = Promise.all(clients.map(client => drive(client)))
  for (let second = 1; second < SECONDS; second++) {
    await sleep(Math.max(0, start + second * 1000 - Date.now()))
    printRow(second)
  }
  await drivers
  printRow(SECONDS)
  await summarize()
} finally {
  await app.close() // also quits the Redis client the plugin opened for the URL
}

/**
 * Sends the client's requests on its schedule, one at a time; a slot missed while waiting is skipped.
 * @param {Client} client
 */
async function drive (client) {
  for (let i = 0; ; i++) {
    const due = start + client.from + i * client.every
    if (due >= end) return
    const wait = due - Date.now()
    if (wait > 0) await sleep(wait)
    else if (wait < -client.every) continue
    const { path, headers } = client.next(i)
    /** @type {number | 'error'} */
    let status = 'error'
    /** @type {string | null} */
    let retryAfter = null
    try {
      const response = await fetch(base + path, { headers, signal: AbortSignal.timeout(2000) })
      await response.arrayBuffer()
      status = response.status
      retryAfter = response.headers.get('retry-after')
      client.lastHeaders = response.headers
    } catch {}
    const at = Date.now() - start
    client.log.push({ at, status, path, retryAfter })
    const bucket = client.perSecond[Math.min(Math.floor(at / 1000), SECONDS - 1)]
    bucket[typeof status === 'number' && STATUSES.includes(status) ? status : 'other']++
  }
}

// Columns: ' sec |' then, per client, 15 characters of counts and ' |'.
function printHeader () {
  const title = (/** @type {Client} */ c) => `${c.name} ${c.limit}/${WINDOW}`
  console.log(' sec |' + clients.map(c => ` ${title(c).padEnd(14)} |`).join(''))
  console.log('     |' + clients.map(() => '  200  429  403 |').join(''))
  console.log('-----+' + clients.map(() => '----------------+').join(''))
}

/**
 * One second's counts; a dash is none. Failed requests (never expected) show in the totals.
 * @param {number} second
 */
function printRow (second) {
  const cells = clients.map(client => {
    const counts = client.perSecond[second - 1]
    return STATUSES.map(s => String(counts[s] || '-').padStart(5)).join('') + ' |'
  })
  console.log(`${String(second).padStart(4)} |${cells.join('')}`)
}

/**
 * '5s' -> '5 s'
 * @param {string | number} duration
 */
function spaced (duration) {
  return String(duration).replace(/^(\d+)\s*/, '$1 ')
}

/** @param {Client} client */
function totals (client) {
  /** @type {Tally} */
  const sum = { 200: 0, 429: 0, 403: 0, other: 0 }
  for (const { status } of client.log) sum[typeof status === 'number' && STATUSES.includes(status) ? status : 'other']++
  return sum
}

async function summarize () {
  const seconds = (/** @type {number} */ ms) => `${(ms / 1000).toFixed(1)} s`
  console.log('\nTotals')
  for (const client of clients) {
    const sum = totals(client)
    const parts = STATUSES.map(s => `${String(sum[s]).padStart(4)} x ${s}`)
    if (sum.other > 0) parts.push(`${sum.other} failed or other`)
    const limitedOn = [...new Set(client.log.filter(r => r.status === 429).map(r => r.path.split('?')[0]))]
    const note = limitedOn.length === 1 && limitedOn[0] === '/search'
      ? `   (all on GET /search: its own budget, ${SEARCH_LIMIT.max} per ${spaced(SEARCH_LIMIT.timeWindow)})`
      : ''
    console.log(`  ${client.name.padEnd(9)}${parts.join('  ')}${note}`)
  }

  const abuser = clients[2]
  console.log(`\nThe abuser (${ABUSER_IP})`)
  console.log(`  ${seconds(abuser.from).padStart(7)}  starts sending every ${abuser.every} ms`)
  let previous
  for (const { at, status, retryAfter } of abuser.log) {
    if (status === 429 && previous !== 429) {
      console.log(`  ${seconds(at).padStart(7)}  refused: 429 Too Many Requests, Retry-After: ${retryAfter} s`)
    } else if (status === 403 && previous !== 403) {
      console.log(`  ${seconds(at).padStart(7)}  banned: 403 Forbidden, Retry-After: ${retryAfter} s`)
    } else if (previous === 403 && status !== 403) {
      console.log(`  ${seconds(at).padStart(7)}  ban over: ${status} again`)
    }
    previous = status
  }

  // The operator's view, without counting a request: peek needs max and timeWindow here because the
  // plugin-wide max is a function of the request.
  const seen = await app.rateGuard.peek(ABUSER_IP, { max: TIERS.ip, timeWindow: WINDOW })
  console.log(`\nAt the end\n  fastify.rateGuard.peek('${ABUSER_IP}'): ${seen.status}` +
    (seen.status === 'banned' ? `, ${seconds(seen.retryMs)} of the ban left` : `, ${seen.count} of ${seen.max} used`))
  const health = await fetch(`${base}/health`, { headers: { 'x-forwarded-for': ABUSER_IP } })
  await health.arrayBuffer()
  console.log(`  GET /health from the abuser: ${health.status} (config.rateLimit: false: never limited)`)

  const headers = clients[0].lastHeaders
  if (headers !== undefined) {
    console.log('\nThe API key\'s last answer carried')
    for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'ratelimit-policy', 'ratelimit']) {
      if (headers.has(name)) console.log(`  ${name}: ${headers.get(name)}`)
    }
  }
}
