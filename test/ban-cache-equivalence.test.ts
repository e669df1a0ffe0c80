// Holding answers in process (`banCache`) saves Redis round trips and changes nothing a client sees. This is an
// equivalence test of the plugin against itself (not a differential test against an independent model: the
// Lua scripts are held to hand-worked tables and reference models elsewhere): one random sequence of requests
// (a group of two routes, a route with GET, POST and its HEAD, several limits, fixed windows, bans) and
// operator calls (bans short and longer than any hold, unban, reset, overrides), with random steps of real
// time between them, is played against two apps on one Redis, `banCache: true` and `false`. Every answer must
// carry the same status and counts; the waits (Retry-After, the resets) may differ by the one second a
// rounding can move them.
//
// Two sequences per run: a fixed seed, known to reach bans and held answers, and a fresh one, printed, to
// explore further. BAN_CACHE_SEED=<n> plays that one seed alone.
//
// Redis's clock cannot be stepped, so time passes for real, and the two apps are asked one right after the
// other. A moment where an answer changes by itself (a window ends, a ban or an override runs out, an entry
// leaves a log) falling between the two would make them differ for a reason that is not holding, so each
// tick of actions is placed where no such moment can fall within it: away from every earlier tick plus any
// duration in play, and from the fixed windows' edges. How long a tick may take is measured in the same run
// (the longest so far, with room to spare), and a tick that starts late, as a timer does on a loaded
// machine, is placed again from where it starts.
//
// BAN_CACHE_SEED=<n> replays a sequence; BAN_CACHE_TICKS=<n> plays at least that many ticks (24 by default; a
// fresh seed a quarter of them, unless FULL=1), and the sequence goes on, up to three times TICKS, until it has
// reached bans.
import Fastify from 'fastify'
import type { FastifyInstance, HTTPMethods, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'
import { prng } from './helpers/random.js'
import { stepsFor } from './helpers/thorough.js'

/** Every duration the apps run on (windows, bans, override TTLs), and the fixed windows' lengths (their edges are the epoch's). */
const DURATIONS = [1000, 2000, 3000]
const FIXED_EDGE = 1000
/** Least a tick of actions is planned to take, and how far from a moment of change it must stay. */
const TICK_MS = 80
const MARGIN_MS = 40
const TICKS = Number(process.env.BAN_CACHE_TICKS ?? 24)
const CLIENTS = ['10.0.0.1', '10.0.0.2']
const REQUESTS: ReadonlyArray<[HTTPMethods, string]> = [
  ['GET', '/'], ['GET', '/'], ['GET', '/g1'], ['POST', '/g2'], ['GET', '/m'], ['HEAD', '/m'], ['POST', '/m'],
  ['GET', '/multi'], ['GET', '/fixed'], ['GET', '/fixed-ban']
]
const COMPARED = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'ratelimit-policy']
const WAITS = ['x-ratelimit-reset', 'retry-after']

async function build (url: string, banCache: boolean): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), banCache, timeout: 3000, standardHeaders: 'draft-10', max: 3, timeWindow: 1000, ban: { threshold: 2, duration: 2000 } })
  const ok = async (): Promise<string> => 'ok'
  app.get('/', ok)
  app.get('/g1', { config: { rateLimit: { groupId: 'g', max: 2, timeWindow: 2000 } } }, ok)
  app.post('/g2', { config: { rateLimit: { groupId: 'g', max: 2, timeWindow: 2000 } } }, ok)
  app.route({ method: ['GET', 'POST'], url: '/m', config: { rateLimit: { max: 2, timeWindow: 1000 } }, handler: ok })
  app.get('/multi', { config: { rateLimit: { limits: [{ max: 2, timeWindow: 1000 }, { max: 3, timeWindow: 3000 }] } } }, ok)
  app.get('/fixed', { config: { rateLimit: { algorithm: 'fixed-window', max: 2, timeWindow: 2000 } } }, ok)
  app.get('/fixed-ban', { config: { rateLimit: { algorithm: 'fixed-window', max: 1, timeWindow: 1000, ban: { threshold: 1, duration: 3000 } } } }, ok)
  await app.ready()
  return app
}

/** What a client sees of an answer: status and counts exactly, waits as numbers (compared within 1 s). */
function seen (res: LightMyRequestResponse): { exact: string, waits: number[] } {
  const header = (name: string): string => String(res.headers[name] ?? '-')
  const fields = header('ratelimit')
  return {
    exact: [res.statusCode, ...COMPARED.map(header), fields.replace(/;t=\d+/g, '')].join(' | '),
    waits: [...WAITS.map(name => Number(res.headers[name] ?? -1)), ...[...fields.matchAll(/;t=(\d+)/g)].map(([, t]) => Number(t))]
  }
}

/** A seed whose sequence reaches bans answered from the hold (checked below), played in every run. */
const FIXED_SEED = 1
const pinned = process.env.BAN_CACHE_SEED
const seeds = pinned !== undefined && pinned !== '' ? [Number(pinned)] : [FIXED_SEED, Math.floor(Math.random() * 2 ** 31)]

// The sequences side by side: each spends its time waiting for its next tick, not computing.
t.test('banCache true and false answer random sequences alike', { jobs: seeds.length }, async t => {
  for (const seed of seeds) {
    t.test(`seed ${seed}${seed === FIXED_SEED ? ' (the fixed one)' : ' (fresh)'}`, async t => {
      t.comment(`seed ${seed} (replay with BAN_CACHE_SEED=${seed})`)
      await play(t, seed, stepsFor(TICKS, seed === FIXED_SEED || seeds.length === 1))
    })
  }
})

/** Plays `seed` for at least `least` ticks (a fresh seed a quarter of TICKS, unless FULL=1: ./helpers/thorough.ts). */
async function play (t: Test, seed: number, least: number): Promise<void> {
  const { url } = await getRedis(t)
  const held = await build(url, true)
  const asked = await build(url, false)
  t.teardown(async () => { await held.close(); await asked.close() })
  const random = prng(seed)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!
  const ops: Array<[string, (app: FastifyInstance, key: string) => Promise<void>]> = [
    ['ban', async (app, key) => { await app.rateGuard.ban(key, 2000) }],
    // Longer than an answer is ever held (MAX_HELD): what a held 403 reports must still be the whole ban.
    ['long ban', async (app, key) => { await app.rateGuard.ban(key, '2 minutes') }],
    ['unban', async (app, key) => { await app.rateGuard.unban(key) }],
    ['reset', async (app, key) => { await app.rateGuard.reset(key) }],
    ['setOverride', async (app, key) => { await app.rateGuard.setOverride(key, { route: 'GET,POST /m', max: 1, timeWindow: 1000, ttl: 3000 }) }],
    ['clearOverride', async (app, key) => { await app.rateGuard.clearOverride(key, { route: 'GET,POST /m' }) }]
  ]

  const ticks: Array<[number, number]> = []
  /** How long a tick is planned to take: half as long again as the longest so far, and at least TICK_MS. */
  let tickMs = TICK_MS
  /** The first moment from `from` at which a tick can run with no moment of change inside it. */
  const clear = (from: number): number => {
    let start = from
    for (let moved = true; moved;) {
      moved = false
      const changes = ticks.flatMap(([begun, ended]) => DURATIONS.map(d => [begun + d, ended + d]))
      const edge = Math.floor(start / FIXED_EDGE) * FIXED_EDGE
      changes.push([edge, edge], [edge + FIXED_EDGE, edge + FIXED_EDGE])
      for (const [a, b] of changes) {
        if (start < b! + MARGIN_MS && start + tickMs > a! - MARGIN_MS) {
          start = b! + MARGIN_MS
          moved = true
        }
      }
    }
    return start
  }

  const differences: string[] = []
  let held403 = 0
  let compared = 0
  const t0 = Date.now()
  const history: string[] = []
  for (let tick = 0; tick < least || (held403 === 0 && tick < 3 * TICKS); tick++) {
    let start = clear(Date.now() + Math.floor(random() * 600))
    let begun: number
    // A timer fires late on a loaded machine: the tick runs once it is clear where it really starts.
    for (;;) {
      await new Promise(resolve => setTimeout(resolve, Math.max(0, start - Date.now())))
      begun = Date.now()
      if (clear(begun) === begun) break
      start = clear(begun)
    }
    const actions = 1 + Math.floor(random() * 4)
    for (let i = 0; i < actions; i++) {
      const client = pick(CLIENTS)
      if (random() < 0.15) {
        const [name, op] = pick(ops)
        await op(held, client)
        await op(asked, client)
        history.push(`${name} ${client}`)
        continue
      }
      const [method, path] = pick(REQUESTS)
      const one = seen(await held.inject({ method, url: path, remoteAddress: client }))
      const other = seen(await asked.inject({ method, url: path, remoteAddress: client }))
      compared++
      if (one.exact.startsWith('403')) held403++
      const what = `tick ${tick} (${begun - t0} ms), ${client} ${method} ${path} after ${history.slice(-5).join(', ')}`
      history.push(`${client} ${method} ${path}: ${one.exact.slice(0, 3)}`)
      if (one.exact !== other.exact) differences.push(`${what}: held ${one.exact}; asked ${other.exact}`)
      else if (one.waits.some((w, j) => Math.abs(w - other.waits[j]!) > 1)) differences.push(`${what}: waits held ${one.waits}; asked ${other.waits}`)
    }
    ticks.push([begun, Date.now()])
    tickMs = Math.max(tickMs, 1.5 * (Date.now() - begun))
  }
  t.same(differences, [], `seed ${seed} (replay with BAN_CACHE_SEED=${seed}): ${compared} requests answered alike`)
  t.ok(held403 > 0, `the sequence reached bans (${held403} answers 403), so something was held`)
}
