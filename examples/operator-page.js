// The operator's view of fastify-rate-guard, as a Fastify plugin: GET /rate-guard, one page of plain HTML and
// a little script (no build step), live from what the plugin tells this instance:
//   - decisions per second by outcome (fastify.rateGuard.stats(), polled each second);
//   - the clients refused most, by hash and kind of key (the rate-guard:decision channel: never a key);
//   - the active bans (fastify.rateGuard.bans(), from Redis), each with an unban button.
// Guarded by HTTP Basic authentication (`credentials`): an example; put your own operators' check there. Its
// data only ever names clients by hash. Hardened as a page that can lift bans should be:
//   - failed logins are limited by the plugin itself, per client address, before the password is checked:
//     5 per 15 minutes, then a ban of an hour from this page (a banned client is refused even with the right
//     password, or guessing would go on through the ban). Only a wrong Authorization counts: a browser's
//     first visit without one, a good login and a refused origin cost nothing. Counted in process when Redis
//     fails (`failMode: 'local'`), so an outage never opens it to guessing;
//   - every response says no-store, may not be framed (the unban button cannot be clickjacked), and has a CSP
//     that runs only the page's own script and style, named by their SHA-256;
//   - a state-changing request (anything but GET and HEAD) from another origin is refused with 403: its
//     Origin must be the page's, and Sec-Fetch-Site `same-origin`, when they are sent. A browser sends Origin
//     with every POST, so a request with neither comes from no browser (curl, a script holding the
//     password) and is let through.

import diagnostics from 'node:diagnostics_channel'
import { createHash, timingSafeEqual } from 'node:crypto'
import { CHANNELS, normalizeIP } from 'fastify-rate-guard'

/** How many clients the refusal counts keep at most (past it, they start over: an example's bound). */
const TRACKED = 10_000
const REFUSED = new Set(['limited', 'banned', 'ban-started', 'too-costly'])

/** Failed logins per client address, and the ban past them (the first refusal starts it). */
export const LOGIN_LIMIT = Object.freeze({ max: 5, timeWindow: '15 minutes', ban: Object.freeze({ threshold: 1, duration: '1 hour' }) })

/**
 * The page's routes share one budget of failed logins per client address (its own identity, so a ban here
 * leaves the address's API budget alone). Charged when a request arrives and given back after its response
 * unless it was a 401 to credentials that were given: only a guess counts, and a burst gets no more tries.
 * Whatever the app's plugin-wide options, it is enforced, on onRequest (before the password is checked), for
 * every address.
 */
const LOGIN = Object.freeze({
  rateLimit: {
    ...LOGIN_LIMIT,
    hook: 'onRequest',
    mode: 'enforce',
    allowList: [],
    groupId: 'rate-guard-operator',
    keyGenerator: (request) => `operator-login:${normalizeIP(request.ip)}`,
    countWhen: (request, reply) => reply.statusCode === 401 && request.headers.authorization !== undefined,
    failMode: 'local'
  }
})

/**
 * @param {import('fastify').FastifyInstance} app
 * @param {{ credentials: { user: string, password: string } }} options
 */
export async function operatorPage (app, { credentials }) {
  const expected = Buffer.from(`Basic ${Buffer.from(`${credentials.user}:${credentials.password}`).toString('base64')}`)
  const refused = new Map()
  const onDecision = ({ outcome, keyHash, keyKind }) => {
    if (!REFUSED.has(outcome) || keyHash === undefined) return
    if (refused.size >= TRACKED && !refused.has(keyHash)) refused.clear()
    const seen = refused.get(keyHash) ?? { keyHash, keyKind, refused: 0 }
    seen.refused++
    refused.set(keyHash, seen)
  }
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  app.addHook('onClose', async () => { diagnostics.unsubscribe(CHANNELS.decision, onDecision) })

  // Every response of the page's routes (this plugin is encapsulated): the page, its JSON, 401, 403, 429.
  app.addHook('onSend', async (_request, reply) => { reply.headers(SECURITY_HEADERS) })

  // The rate guard's hook is the route's onRequest; these run after it (and before the body is parsed).
  const authenticate = async (request, reply) => {
    const given = Buffer.from(request.headers.authorization ?? '')
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return await reply.code(401).header('www-authenticate', 'Basic realm="rate-guard"').send({ error: 'operators only' })
    }
  }
  const preParsing = [sameOrigin, authenticate]

  app.get('/rate-guard', { config: LOGIN, preParsing }, async (_request, reply) => reply.type('text/html; charset=utf-8').send(PAGE))

  app.get('/rate-guard/data', { config: LOGIN, preParsing }, async () => ({
    at: Date.now(),
    stats: app.rateGuard.stats(),
    top: [...refused.values()].sort((a, b) => b.refused - a.refused).slice(0, 10),
    bans: await app.rateGuard.bans({ limit: 50 })
  }))

  app.post('/rate-guard/unban', { config: LOGIN, preParsing }, async (request) => {
    const keyHash = request.body?.keyHash
    await app.rateGuard.unban({ keyHash })
    refused.delete(keyHash)
    return { unbanned: keyHash }
  })
}

/**
 * A state-changing request comes from the page's own origin, or from no browser: Origin, when sent, is the
 * page's (scheme, host and port, as the request reached the app), and Sec-Fetch-Site, when sent, says so.
 */
async function sameOrigin (request, reply) {
  if (request.method === 'GET' || request.method === 'HEAD') return
  const { origin, 'sec-fetch-site': site } = request.headers
  if ((origin !== undefined && origin !== `${request.protocol}://${request.host}`) || (site !== undefined && site !== 'same-origin')) {
    return await reply.code(403).send({ error: 'only from the operator page itself' })
  }
}

// The page's one style sheet and one script, inline, and allowed by their hashes alone.
const STYLE = `
  body { font: 15px/1.4 system-ui, sans-serif; margin: 2rem; color: #1d2430; background: #f7f8fa; }
  h1 { font-size: 1.4rem; margin: 0 0 1rem; }
  h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; }
  table { border-collapse: collapse; background: white; min-width: 28rem; box-shadow: 0 1px 2px #0002; }
  th, td { text-align: left; padding: .35rem .8rem; border-bottom: 1px solid #e4e7ec; }
  th { background: #eef1f5; font-weight: 600; }
  td.n { text-align: right; font-variant-numeric: tabular-nums; }
  code { font-size: .9em; }
  button { font: inherit; padding: .15rem .6rem; cursor: pointer; }
  .empty { color: #7a8594; font-style: italic; }
  #status { color: #7a8594; font-size: .85rem; }
`

const SCRIPT = `
  // Its own origin, not the document's URL: opened as http://user:password@host/rate-guard, that URL holds
  // the credentials, and fetch refuses a URL with credentials in it (the browser sends the ones it holds).
  const here = location.origin
  let last = null
  const cell = (text, className) => { const td = document.createElement('td'); td.textContent = text; if (className) td.className = className; return td }
  const fill = (id, rows, columns) => {
    const body = document.getElementById(id)
    body.replaceChildren()
    if (rows.length === 0) { const tr = body.insertRow(); const td = cell('none', 'empty'); td.colSpan = columns; tr.append(td) }
    for (const row of rows) body.append(row)
  }
  const row = (...cells) => { const tr = document.createElement('tr'); tr.append(...cells); return tr }
  const left = ms => ms >= 3600000 ? Math.round(ms / 3600000) + ' h' : ms >= 60000 ? Math.round(ms / 60000) + ' min' : Math.ceil(ms / 1000) + ' s'
  async function unban (keyHash) {
    await fetch(here + '/rate-guard/unban', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ keyHash }) })
    await refresh()
  }
  async function refresh () {
    const response = await fetch(here + '/rate-guard/data')
    if (!response.ok) throw new Error('the server answered ' + response.status)
    const data = await response.json()
    const outcomes = Object.entries(data.stats.decisions).filter(([, n]) => n > 0)
    fill('rates', outcomes.map(([outcome, n]) => {
      const before = last?.stats.decisions[outcome] ?? n
      const seconds = last ? (data.at - last.at) / 1000 : 1
      return row(cell(outcome), cell(((n - before) / seconds).toFixed(1), 'n'), cell(String(n), 'n'))
    }), 3)
    fill('top', data.top.map(t => row(cell(t.keyHash), cell(t.keyKind), cell(String(t.refused), 'n'))), 3)
    fill('bans', data.bans.map(b => {
      const button = document.createElement('button')
      button.textContent = 'unban'
      button.dataset.keyHash = b.keyHash
      button.onclick = () => unban(b.keyHash)
      const td = document.createElement('td'); td.append(button)
      const tr = row(cell(b.keyHash), cell(left(b.retryMs), 'n'), td)
      tr.dataset.keyHash = b.keyHash
      return tr
    }), 3)
    document.getElementById('status').textContent = 'live, ' + new Date(data.at).toLocaleTimeString()
    last = data
  }
  // The next poll a second after the last answer, never on top of it: a client's requests in flight hold its
  // budget of failed logins until they are answered (the page has two at most: a poll and an unban).
  const poll = () => refresh().catch(err => { document.getElementById('status').textContent = 'not live: ' + err.message }).then(() => setTimeout(poll, 1000))
  poll()
`

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rate-guard</title>
<style>${STYLE}</style>
</head>
<body>
<h1>rate-guard <span id="status">connecting…</span></h1>
<h2>Decisions per second</h2>
<table><thead><tr><th>outcome</th><th>per second</th><th>since start</th></tr></thead><tbody id="rates"></tbody></table>
<h2>Clients refused most</h2>
<table><thead><tr><th>client (hash)</th><th>kind</th><th>refusals</th></tr></thead><tbody id="top"></tbody></table>
<h2>Active bans</h2>
<table><thead><tr><th>client (hash)</th><th>time left</th><th></th></tr></thead><tbody id="bans"></tbody></table>
<script>${SCRIPT}</script>
</body>
</html>
`

const sha256 = (source) => `'sha256-${createHash('sha256').update(source).digest('base64')}'`

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
