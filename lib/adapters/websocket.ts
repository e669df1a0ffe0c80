import { randomBytes } from 'node:crypto'
import type { EventEmitter } from 'node:events'
import type { IncomingMessage } from 'node:http'
import { finished } from 'node:stream'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import fp from 'fastify-plugin'
import { InvalidOptionError } from '../errors.js'
import { isBan } from '../channels.js'
import type { HeldSlots } from '../request/spend.js'
import type { RateGuardBudget } from '../limiters.js'
import type { RouteRateLimitOptions } from '../types.js'
import { Gate } from './websocket-gate.js'
import type { GatedSocket, MessageRules, OnRefused } from './websocket-gate.js'

// WebSocket on @fastify/websocket (`fastify-rate-guard/websocket`): messages per client (across instances), per
// connection and in bytes, and connections open per client, on every `{ websocket: true }` route, each a budget
// of fastify.rateGuard.budget() made once at register. The connection's slot is taken at the upgrade, before
// the socket opens (refused: 429, no socket), and given back when its socket closes; its messages are gated
// by ./websocket-gate.ts. A route changes the plugin's options with `config: { websocketRateLimit: {...} }`
// (budgets of its own), or goes unlimited with `false`. docs/websocket.md says why each choice is so.

export type { GatedSocket, OnRefused, Refusal } from './websocket-gate.js'

/** A budget's options: a route's `config.rateLimit` (max and timeWindow, limits, algorithm, ban, …). */
type BudgetOptions = Omit<RouteRateLimitOptions, 'cost' | 'concurrency' | 'groupId'>

export interface WebsocketRateGuardOptions extends BudgetOptions {
  /** Messages per client, across connections and instances. */
  messages?: BudgetOptions | false
  /** Messages per connection. */
  connectionMessages?: BudgetOptions | false
  /** Bytes per client: a message costs its byte length. */
  bytes?: BudgetOptions | false
  /** A message's cost on `messages` (default 1; 0 is free). */
  cost?: (data: unknown, isBinary: boolean) => number
  /** Connections open per client (`concurrency`'s in-flight limit): taken at the upgrade, released on close. */
  connections?: { max: number, lease?: string | number } | false
  /** A refused message: drop it and send a notice (default), close the socket, or the app's function. */
  onRefused?: OnRefused
  /** The close code of a limit under `onRefused: 'close'` (1008, the default; 1013; or 4000–4999). */
  closeCode?: number
  /** Decisions in flight per connection past which its socket is paused (default 64). */
  maxPending?: number
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This WebSocket route's options over fastify-rate-guard/websocket's, or `false` to leave it unlimited. */
    websocketRateLimit?: WebsocketRateGuardOptions | false
  }
}

/** A route's rules: its message budgets, and its connections' budget. */
interface Rules extends MessageRules {
  readonly connections: RateGuardBudget | null
  readonly gated: boolean
}

const OWN = ['messages', 'connectionMessages', 'bytes', 'cost', 'connections', 'onRefused', 'closeCode', 'maxPending'] as const

/** The options checked (a coded error for a bad one), apart from what the budgets check themselves. */
function checkOptions (options: WebsocketRateGuardOptions): void {
  for (const name of ['messages', 'connectionMessages', 'bytes', 'connections'] as const) {
    const value = options[name]
    if (value !== undefined && value !== false && (typeof value !== 'object' || value === null || Array.isArray(value))) {
      throw new InvalidOptionError(name, `expected options ({ max, … }) or false, got ${String(value)}`)
    }
  }
  if (OWN.slice(0, 3).every(name => !options[name]) && !options.connections) {
    throw new InvalidOptionError('messages', 'nothing to limit: give messages, connectionMessages, bytes or connections')
  }
  const { cost, onRefused = 'notify', closeCode = 1008, maxPending = 64 } = options
  if (cost !== undefined && typeof cost !== 'function') {
    throw new InvalidOptionError('cost', 'expected a function (data, isBinary) => units')
  }
  if (onRefused !== 'close' && onRefused !== 'notify' && typeof onRefused !== 'function') {
    throw new InvalidOptionError('onRefused', `expected 'close', 'notify' or a function (socket, refusal), got ${String(onRefused)}`)
  }
  if (closeCode !== 1008 && closeCode !== 1013 && !(Number.isInteger(closeCode) && closeCode >= 4000 && closeCode <= 4999)) {
    throw new InvalidOptionError('closeCode', `expected 1008, 1013 or an application code 4000-4999, got ${String(closeCode)}`)
  }
  if (!Number.isSafeInteger(maxPending) || maxPending < 1) {
    throw new InvalidOptionError('maxPending', `expected a positive whole number, got ${String(maxPending)}`)
  }
}

/**
 * The rules of `options`, their budgets made now, each in a group named after `name` (the same on every instance
 * registered alike, so instances count together).
 */
function rulesOf (fastify: FastifyInstance, options: WebsocketRateGuardOptions, name: string): Rules {
  checkOptions(options)
  const { messages, connectionMessages, bytes, cost, connections, onRefused, closeCode, maxPending, ...common } = options
  const made = (own: object | false | undefined, group: string, extra: object = {}): RateGuardBudget | null =>
    own === undefined || own === false ? null : fastify.rateGuard.budget({ ...common, ...own, ...extra, groupId: `${name} ${group}` })
  const rules = {
    messages: made(messages, 'messages'),
    connectionMessages: made(connectionMessages, 'connection messages'),
    bytes: made(bytes, 'bytes'),
    connections: made(connections === undefined || connections === false ? connections : {}, 'connections', { concurrency: connections }),
    cost,
    onRefused: onRefused ?? 'notify',
    closeCode: closeCode ?? 1008,
    maxPending: maxPending ?? 64
  }
  return { ...rules, gated: rules.messages !== null || rules.connectionMessages !== null || rules.bytes !== null }
}

/** A route @fastify/websocket upgrades (a HEAD route is never upgraded). */
function upgraded (route: RouteOptions): boolean {
  const { websocket, wsHandler } = route as { websocket?: boolean, wsHandler?: unknown }
  return (websocket === true || typeof wsHandler === 'function') && [route.method].flat().some(method => method !== 'HEAD')
}

/** An upgrade let through: its request, its route's rules, and its connection's key (never client input). */
interface Upgrade {
  readonly request: FastifyRequest
  readonly rules: Rules
  readonly key: string
}

/** The answers to an upgrade refused its slot, by what refused it (no socket is opened). */
function refuseUpgrade (reply: FastifyReply, held: HeldSlots): FastifyReply {
  if (isBan(held.outcome)) return reply.code(403).send({ error: 'banned' })
  const status = held.outcome === 'unavailable' ? 503 : 429
  const error = status === 429 ? 'too_many_connections' : 'unavailable'
  return reply.code(status).header('retry-after', '1').send({ error, retryAfter: 1 })
}

async function websocketRateGuardPlugin (fastify: FastifyInstance, options: WebsocketRateGuardOptions): Promise<void> {
  const plugin = rulesOf(fastify, options, 'websocket')
  const upgrades = new WeakMap<IncomingMessage, Upgrade>()
  // Connection keys: `<random per registration><counter>`, unique across instances.
  const prefix = randomBytes(6).toString('base64url')
  let connections = 0

  const upgrade = (rules: Rules) => async function websocketUpgrade (request: FastifyRequest, reply: FastifyReply) {
    if ((request as { ws?: boolean }).ws !== true) return
    if (rules.connections !== null) {
      const held = await rules.connections.hold(request)
      if (!held.ok) return refuseUpgrade(reply, held)
      // The slot is given back when the connection's socket is done: after the WebSocket's close, or when the
      // upgrade failed or was refused later (@fastify/websocket destroys the socket of a request answered in HTTP),
      // or at once when the client left while the slot was asked for (`finished` tells a socket already done).
      finished(reply.raw.socket!, () => { held.release() })
    }
    if (rules.gated) upgrades.set(request.raw, { request, rules, key: `ws:${prefix}${(connections++).toString(36)}` })
  }

  fastify.addHook('onRoute', route => {
    if (!upgraded(route)) return
    const config = route.config?.websocketRateLimit
    if (config === false) return
    const rules = config === undefined ? plugin : rulesOf(fastify, { ...options, ...config }, `websocket ${route.url}`)
    const existing = route.preHandler as unknown
    route.preHandler = [existing ?? [], upgrade(rules)].flat() as never
  })

  // @fastify/websocket tells the upgraded socket here before it calls the route's handler: the gate is in place
  // before the app adds a listener.
  const server = (fastify as unknown as { websocketServer: EventEmitter }).websocketServer
  server.on('connection', (socket: GatedSocket, raw: IncomingMessage) => {
    const upgraded = upgrades.get(raw)
    if (upgraded === undefined) return
    upgrades.delete(raw)
    // eslint-disable-next-line no-new
    new Gate(socket, upgraded.rules, upgraded.request, upgraded.key)
  })
}

/** fastify-rate-guard/websocket: registered after fastify-rate-guard and @fastify/websocket. */
export const websocketRateGuard: FastifyPluginAsync<WebsocketRateGuardOptions> = fp(websocketRateGuardPlugin, {
  fastify: '5.x',
  name: 'fastify-rate-guard-websocket',
  dependencies: ['fastify-rate-guard', '@fastify/websocket']
})

export default websocketRateGuard
