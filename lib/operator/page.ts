// The operator's view of fastify-rate-guard, as a Fastify plugin: GET /rate-guard, one page of plain HTML and
// a little script (no build step), live from what the plugin tells this instance:
//   - decisions per second by outcome, charted over the last three minutes (the rate-guard:decision channel,
//     counted per second here: series.ts), with each outcome's rate now and count since
//     start (fastify.rateGuard.stats(), polled each second);
//   - decisions per second by budget (the same channel: each decision names its budget);
//   - the clients refused most, by hash and kind of key (the rate-guard:decision channel: never a key);
//   - the active bans (fastify.rateGuard.bans(), from Redis), each with an unban button;
//   - with the load shedder (`shed`), its state (stats().shed); the page's routes are exempt: never shed.
// What the browser gets, and how it draws, is view.ts.
// Guarded by HTTP Basic authentication (`credentials`).
//
// Its data names clients by hash alone, unless the app opts in with `clientNames`: `true` (or 'masked') shows
// beside a hash, in both tables, the client as the operator knows it, masked (203.0.113.x, 2001:db8:1::/48,
// a user id's first and last characters: an operator's screen is often shared); 'full' shows it whole. An
// API key is never shown: its owner is, as `apiKeyOwner(apiKey)` names it, else the key masked. The page
// learns a name from the refused requests it sees, by hashing their identities with the plugin's `keyHash`,
// so a name it shows is always the hash's (how, and what is shown: names.ts). Names are
// kept with the refusal counts and forgotten with them (TRACKED clients at most); they go nowhere but to this
// page. Off, no hook is added; on, every response of the app costs a status check, a refused one a few hashes.
//
// Hardened as a page that can lift bans should be:
//   - failed logins are limited by the plugin itself, before the password is checked: 5 per 15 minutes, then a
//     ban of an hour from this page (a banned client is refused even with the right password, or guessing
//     would go on through the ban: a 200 to the right one would tell it from the others). Only a wrong
//     Authorization counts: a browser's first visit without one, a good login and a refused origin cost
//     nothing. Counted in process when Redis fails (`failMode: 'local'`), so an outage never opens it to
//     guessing;
//   - so that a neighbour cannot lock the operator out (anyone behind the same NAT, office network or proxy
//     shares an address), a browser that has logged in once is given a device cookie (OWASP's "device
//     cookies"): HttpOnly, SameSite=Strict, signed with a key made from the credentials (so every instance
//     reads it, and changing the password revokes every device). A request with a valid one counts its failed
//     logins on that device alone, never on its address: five wrong passwords from the address lock out the
//     address's other browsers, not the operator's. A cookie that does not verify is ignored (the address
//     counts), so a made-up one buys no fresh budget. A browser that never logged in is still refused with
//     its address: nothing then tells the operator from the guesser;
//   - every response says no-store, may not be framed (the unban button cannot be clickjacked), and has a CSP
//     that runs only the page's own script and style, named by their SHA-256;
//   - a state-changing request (anything but GET and HEAD) from another origin is refused with 403: its
//     Origin must be the page's, and Sec-Fetch-Site `same-origin`, when they are sent. A browser sends Origin
//     with every POST, so a request with neither comes from no browser (curl, a script holding the
//     password) and is let through.

import diagnostics from 'node:diagnostics_channel'
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, preParsingAsyncHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { CHANNELS } from '../channels.js'
import type { DecisionMessage } from '../channels.js'
import { normalizeIP } from '../ip.js'
import { keyHash as hashOf } from '../stores/key-names.js'
import type { RouteRateLimitOptions } from '../types.js'
import { identitiesOf } from './names.js'
import { DecisionSeries, REFUSED } from './series.js'
import { PAGE, SCRIPT, STYLE } from './view.js'

/** How many clients the refusal counts keep at most (past it, they start over). */
const TRACKED = 10_000

/** Failed logins per client (a device that logged in before, else an address), and the ban past them (the first refusal starts it). */
export const LOGIN_LIMIT = Object.freeze({
  max: 5,
  timeWindow: '15 minutes',
  ban: Object.freeze({ threshold: 1, duration: '1 hour' })
})

/** The device cookie's name, and how long a browser keeps it (a year). */
export const DEVICE_COOKIE = 'rate-guard-device'
const DEVICE_MAX_AGE_S = 365 * 24 * 3600

/** Who may see the page: HTTP Basic credentials. */
export interface Credentials { user: string, password: string }

interface Devices { issue: () => string, deviceOf: (request: FastifyRequest) => string | undefined }

/** The page's own budget of failed logins: its group, and the budget's name on the decision channel. */
const PAGE_GROUP = 'rate-guard-operator'
const PAGE_BUDGET = `group:${PAGE_GROUP}`

/**
 * Device cookies, signed with a key made from the credentials: `<id>.<mac>`, the id random, the mac its
 * HMAC-SHA256. `issue` makes one; `deviceOf` gives the id of the request's valid one, else undefined.
 */
function devices (credentials: Credentials): Devices {
  const key = createHash('sha256')
    .update(`rate-guard operator device\0${credentials.user}\0${credentials.password}`).digest()
  const mac = (id: string): string => createHmac('sha256', key).update(id).digest('base64url')
  return {
    issue: () => {
      const id = randomBytes(16).toString('base64url')
      return `${id}.${mac(id)}`
    },
    deviceOf (request) {
      const value = cookie(request.headers.cookie, DEVICE_COOKIE)
      const dot = value?.indexOf('.') ?? -1
      if (value === undefined || dot < 1) return undefined
      const id = value.slice(0, dot)
      const given = Buffer.from(value.slice(dot + 1))
      const expected = Buffer.from(mac(id))
      return given.length === expected.length && timingSafeEqual(given, expected) ? id : undefined
    }
  }
}

/**
 * One cookie's value from a Cookie header (the first of that name), or undefined; a header past 8 KiB is
 * not read (no cookie of this page is that long).
 */
function cookie (header: string | undefined, name: string): string | undefined {
  if (header === undefined || header.length > 8192) return undefined
  for (const pair of header.split(';')) {
    const eq = pair.indexOf('=')
    if (eq !== -1 && pair.slice(0, eq).trim() === name) return pair.slice(eq + 1).trim()
  }
  return undefined
}

/**
 * The client whose failed logins a request counts on: its device, when it carries a valid device cookie, else
 * its address.
 */
const loginKeyOf = (deviceOf: Devices['deviceOf']) => (request: FastifyRequest): string => {
  const device = deviceOf(request)
  return device === undefined ? `operator-login:${normalizeIP(request.ip)}` : `operator-device:${device}`
}

/**
 * The page's routes share one budget of failed logins per client, a device or an address (its own identity,
 * so a ban here leaves the address's API budget alone). Charged when a request arrives and given back after
 * its response unless it was a 401 to credentials that were given: only a guess counts, and a burst gets no
 * more tries. Whatever the app's plugin-wide options, it is enforced, on onRequest (before the password is
 * checked), for every address. Exempt from the load shedder: the page is wanted most when the app is overloaded.
 */
const loginConfig = (loginKey: LoginKey): Readonly<LoginConfig> => Object.freeze<LoginConfig>({
  priority: 'exempt',
  rateLimit: {
    ...LOGIN_LIMIT,
    hook: 'onRequest',
    mode: 'enforce',
    allowList: [],
    groupId: PAGE_GROUP,
    keyGenerator: loginKey,
    countWhen: (request, reply) => reply.statusCode === 401 && request.headers.authorization !== undefined,
    failMode: 'local'
  }
})

interface LoginConfig { priority: 'exempt', rateLimit: RouteRateLimitOptions }

type LoginKey = (request: FastifyRequest) => string

/** The operator page's options. */
export interface OperatorPageOptions {
  /** the operator's HTTP Basic user and password */
  credentials: Credentials
  /** show clients as the operator knows them: `true` or 'masked' masked, 'full' whole (default false: hashes) */
  clientNames?: boolean | 'masked' | 'full'
  /** who an API key belongs to, shown in its place */
  apiKeyOwner?: (apiKey: string) => string | undefined
}

/** The clients refused, by hash: how often, and (with clientNames) who, once the page has seen it. */
type Refused = Map<string, { keyHash: string, keyKind: string, refused: number, client?: string | undefined }>

const CLIENT_NAMES: ReadonlyArray<unknown> = [false, true, 'masked', 'full']

/**
 * The page (its routes encapsulated, their hooks theirs alone) and, with `clientNames`, the app-wide hook that
 * names the clients it sees refused: fastify-plugin lets that one hook reach every route of the app.
 */
async function pageAndNames (app: FastifyInstance, options: OperatorPageOptions): Promise<void> {
  const { credentials, clientNames = false, apiKeyOwner } = options
  if (!CLIENT_NAMES.includes(clientNames)) {
    throw new TypeError(`operatorPage: clientNames is false, true, 'masked' or 'full', got ${JSON.stringify(clientNames)}`)
  }
  const refused: Refused = new Map()
  const device = devices(credentials)
  const loginKey = loginKeyOf(device.deviceOf)
  if (clientNames !== false) {
    const identities = identitiesOf({ full: clientNames === 'full', apiKeyOwner, addressKeys: [loginKey] })
    // After the response: the refusal's decision was published (and counted) before it.
    app.addHook('onResponse', async (request, reply) => {
      if (reply.statusCode !== 429 && reply.statusCode !== 403) return
      for (const { key, name } of identities(request)) {
        const seen = refused.get(hashOf(key))
        if (seen !== undefined) seen.client ??= name()
      }
    })
  }
  const shown = clientNames === 'full' ? 'full' : clientNames === false ? undefined : 'masked'
  await app.register(page, { credentials, device, loginKey, refused, clientNames: shown })
}

/**
 * The operator page, a Fastify plugin: GET /rate-guard (the page), GET /rate-guard/data (its JSON), POST
 * /rate-guard/unban. Register it after the rate guard.
 */
export const operatorPage: FastifyPluginAsync<OperatorPageOptions> = fp(pageAndNames, { fastify: '5.x' })

interface PageOptions {
  credentials: Credentials
  device: Devices
  loginKey: LoginKey
  refused: Refused
  clientNames: 'masked' | 'full' | undefined
}

async function page (app: FastifyInstance, { credentials, device, loginKey, refused, clientNames }: PageOptions): Promise<void> {
  const login = loginConfig(loginKey)
  const series = new DecisionSeries()
  countDecisions(app, series, refused)

  // Every response of the page's routes (this plugin is encapsulated): the page, its JSON, 401, 403, 429.
  app.addHook('onSend', async (_request, reply) => { reply.headers(SECURITY_HEADERS) })

  // The rate guard's hook is the route's onRequest; these run after it (and before the body is parsed).
  const preParsing = [sameOrigin, authenticator(credentials, device)]

  app.get('/rate-guard', { config: login, preParsing },
    async (_request, reply) => await reply.type('text/html; charset=utf-8').send(PAGE))

  app.get('/rate-guard/data', { config: login, preParsing }, async () => {
    const bans = await app.rateGuard.bans({ limit: 50 })
    return {
      at: Date.now(),
      stats: app.rateGuard.stats(),
      series: series.snapshot(),
      top: [...refused.values()].sort((a, b) => b.refused - a.refused).slice(0, 10),
      // With clientNames only: how names are shown, and each ban's client when the page knows it.
      ...(clientNames === undefined
        ? { bans }
        : { clientNames, bans: bans.map(ban => ({ ...ban, client: refused.get(ban.keyHash)?.client })) })
    }
  })

  app.post('/rate-guard/unban', { config: login, preParsing }, async (request) => {
    // Checked by unban itself: anything but a key hash is refused with a coded error (400).
    const keyHash = (request.body as { keyHash?: unknown } | undefined)?.keyHash as string
    await app.rateGuard.unban({ keyHash })
    refused.delete(keyHash)
    return { unbanned: keyHash }
  })
}

/**
 * Counts this instance's decisions, from the decision channel until the app closes: each in `series` (but the
 * page's own allowed polling), and each refused client in `refused` (TRACKED at most, then they start over).
 */
function countDecisions (app: FastifyInstance, series: DecisionSeries, refused: Refused): void {
  const onDecision = (message: unknown): void => {
    const decision = message as DecisionMessage
    const { outcome, keyHash, keyKind } = decision
    // The page's own polling is no traffic of the app's: only its refused logins are charted.
    if (decision.budget !== PAGE_BUDGET || REFUSED.has(outcome)) series.count(decision)
    if (!REFUSED.has(outcome) || keyHash === undefined) return
    if (refused.size >= TRACKED && !refused.has(keyHash)) refused.clear()
    const seen = refused.get(keyHash) ?? { keyHash, keyKind, refused: 0 }
    seen.refused++
    refused.set(keyHash, seen)
  }
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  app.addHook('onClose', async () => { diagnostics.unsubscribe(CHANNELS.decision, onDecision) })
}

/**
 * The login check: a request without the operator's credentials gets a 401 asking for them; a browser that
 * gives them and carries no valid device cookie is given one.
 */
function authenticator (credentials: Credentials, device: Devices): preParsingAsyncHookHandler {
  const basic = Buffer.from(`${credentials.user}:${credentials.password}`).toString('base64')
  const expected = Buffer.from(`Basic ${basic}`)
  return async (request, reply) => {
    const given = Buffer.from(request.headers.authorization ?? '')
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return await reply.code(401).header('www-authenticate', 'Basic realm="rate-guard"')
        .send({ error: 'operators only' })
    }
    // Logged in: this browser is the operator's from now on (its failed logins its own, see the top).
    if (device.deviceOf(request) === undefined) {
      const secure = request.protocol === 'https' ? '; Secure' : ''
      const attributes = `Path=/rate-guard; Max-Age=${DEVICE_MAX_AGE_S}; HttpOnly; SameSite=Strict${secure}`
      reply.header('set-cookie', `${DEVICE_COOKIE}=${device.issue()}; ${attributes}`)
    }
  }
}

/**
 * A state-changing request comes from the page's own origin, or from no browser: Origin, when sent, is the
 * page's (scheme, host and port, as the request reached the app), and Sec-Fetch-Site, when sent, says so.
 */
async function sameOrigin (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
  if (request.method === 'GET' || request.method === 'HEAD') return
  const { origin, 'sec-fetch-site': site } = request.headers
  const foreign = origin !== undefined && origin !== `${request.protocol}://${request.host}`
  if (foreign || (site !== undefined && site !== 'same-origin')) {
    return await reply.code(403).send({ error: 'only from the operator page itself' })
  }
}

// The page's one style sheet and one script (view.ts), inline, allowed by their hashes alone.
const sha256 = (source: string): string => `'sha256-${createHash('sha256').update(source).digest('base64')}'`

/** What every response of the page says (see the top of this file). */
const SECURITY_HEADERS = Object.freeze({
  'cache-control': 'no-store',
  'content-security-policy': [
    "default-src 'none'",
    `script-src ${sha256(SCRIPT)}`,
    `style-src ${sha256(STYLE)}`,
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'"
  ].join('; '),
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin'
})
