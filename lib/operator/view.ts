// What the operator page's browser gets (lib/operator/page.ts serves it): one HTML document with one
// style sheet and one script, inline, no build step and no library. The page's Content-Security-Policy allows
// these two by their SHA-256 alone, so nothing here may add another script, a style attribute in markup, or
// a resource from elsewhere: the chart is SVG drawn by the script with presentation attributes (stroke, fill),
// which a CSP does not govern, and every request goes to the page's own origin (connect-src 'self').
//
// Each second the script asks GET /rate-guard/data and draws:
//   - a chart of decisions per second by outcome over the last few minutes (one line per outcome, the table
//     under it as the legend: its colour, the rate now and the count since start, from stats());
//   - the decisions per second by budget over the last seconds, and how many of them were refused;
//   - the clients refused most, and the active bans with their unban buttons; with `clientNames`, a column
//     "known as" beside the hash (masked, or whole), blank where the page knows no name for it;
//   - with the load shedder (`shed`, when stats() has its section): the requests in flight against the
//     capacity, each class's admitted share, the signal over its threshold, and the signals as last read.
// A request that fails says so in the status line at the top (in red), and the last data stays on the page.

import { RECENT, SECONDS } from './series.js'

/** The page's one style sheet. */
export const STYLE: string = `
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
  #status.failed { color: #b3261e; font-weight: 600; }
  #chart { display: block; width: 100%; max-width: 760px; background: white; box-shadow: 0 1px 2px #0002; margin-bottom: .8rem; }
  #chart text { font: 11px system-ui, sans-serif; fill: #5b6675; }
`

/** The page's one script. */
export const SCRIPT: string = `
  // Its own origin, not the document's URL: opened as http://user:password@host/rate-guard, that URL holds
  // the credentials, and fetch refuses a URL with credentials in it (the browser sends the ones it holds).
  const here = location.origin
  const url = path => new URL(path, here).href
  let last = null
  let notice = ''
  const COLORS = {
    allowed: '#2e7d32', limited: '#e08a00', banned: '#c62828', 'ban-started': '#7b1fa2', 'too-costly': '#6d4c41',
    'in-flight': '#00838f', 'waiting-full': '#00695c', unenforced: '#0277bd', unavailable: '#37474f',
    'shadow-limited': '#d4b106', 'shadow-banned': '#ef8a80', 'shadow-ban-started': '#b39ddb',
    shed: '#ad1457', 'shadow-shed': '#f48fb1'
  }
  const colorOf = outcome => COLORS[outcome] ?? '#888'
  const SVG = 'http://www.w3.org/2000/svg'
  const svg = (name, attributes, text) => {
    const node = document.createElementNS(SVG, name)
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value))
    if (text !== undefined) node.textContent = text
    return node
  }
  const cell = (text, className) => {
    const td = document.createElement('td')
    td.textContent = text
    if (className) td.className = className
    return td
  }
  const fill = (id, rows, columns) => {
    const body = document.getElementById(id)
    body.replaceChildren()
    if (rows.length === 0) { const tr = body.insertRow(); const td = cell('none', 'empty'); td.colSpan = columns; tr.append(td) }
    for (const row of rows) body.append(row)
  }
  const row = (...cells) => { const tr = document.createElement('tr'); tr.append(...cells); return tr }
  const left = ms =>
    ms >= 3600000 ? Math.round(ms / 3600000) + ' h' : ms >= 60000 ? Math.round(ms / 60000) + ' min' : Math.ceil(ms / 1000) + ' s'
  const rate = n => n >= 10 ? n.toFixed(0) : n.toFixed(1)
  const status = (text, failed) => {
    const line = document.getElementById('status')
    line.textContent = text
    line.className = failed ? 'failed' : ''
  }
  const swatch = outcome => {
    const icon = svg('svg', { width: 18, height: 10, 'aria-hidden': 'true' })
    icon.append(svg('line', { x1: 0, y1: 5, x2: 18, y2: 5, stroke: colorOf(outcome), 'stroke-width': 3 }))
    const td = document.createElement('td'); td.append(icon); return td
  }

  // A scale that reads: steps of 1, 2 or 5 times a power of ten, about four of them, never below 1 a second.
  const scale = max => {
    const rough = Math.max(max, 1) / 4
    const power = 10 ** Math.floor(Math.log10(rough))
    const step = Math.max(1, [1, 2, 5, 10].map(m => m * power).find(s => s >= rough))
    return { step, top: Math.max(step, Math.ceil(max / step) * step) }
  }

  // Decisions per second by outcome, one line each, over the series' seconds (the last point: the last whole second).
  function chart (series, outcomes) {
    const W = 760, H = 240, L = 48, R = 14, T = 22, B = 26
    const plotW = W - L - R, plotH = H - T - B
    const node = document.getElementById('chart')
    node.replaceChildren()
    const lines = outcomes.map(outcome => [outcome, series.outcomes[outcome] ?? new Array(series.seconds).fill(0)])
    const { step, top } = scale(Math.max(0, ...lines.flatMap(([, values]) => values)))
    const x = i => L + (series.seconds === 1 ? plotW : i * plotW / (series.seconds - 1))
    const y = v => T + plotH - v * plotH / top
    node.append(svg('text', { x: 4, y: 14 }, 'decisions per second'))
    for (let v = 0; v <= top + step / 2; v += step) {
      node.append(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: v === 0 ? '#9aa3af' : '#e4e7ec' }))
      node.append(svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, String(Math.round(v * 10) / 10)))
    }
    for (let s = 0; s < series.seconds; s += 60) {
      const at = x(series.seconds - 1 - s)
      node.append(svg('line', { x1: at, x2: at, y1: T + plotH, y2: T + plotH + 4, stroke: '#9aa3af' }))
      node.append(svg('text', { x: at, y: H - 8, 'text-anchor': s === 0 ? 'end' : 'middle' }, s === 0 ? 'now' : '−' + s / 60 + ' min'))
    }
    for (const [outcome, values] of lines) {
      const points = values.map((v, i) => x(i).toFixed(1) + ',' + y(v).toFixed(1)).join(' ')
      const line = svg('polyline', {
        points, fill: 'none', stroke: colorOf(outcome), 'stroke-width': 1.6, 'stroke-linejoin': 'round', 'data-outcome': outcome
      })
      line.append(svg('title', {}, outcome))
      node.append(line)
    }
  }

  // The load shedder's state, when the app has one: one row each, named by data-shed.
  function shedder (shed) {
    document.getElementById('shedding').hidden = !shed
    if (!shed) return
    const share = n => Math.round(n * 100) + '%'
    const { eventLoopDelayMs: delay, eventLoopUtilization: elu, redisTimeMs: redis, pressure } = shed.readings
    const rows = [
      ['in-flight', 'in flight', shed.limit === null ? String(shed.inFlight) : shed.inFlight + ' / ' + shed.limit],
      ['critical', 'admitted: critical', share(shed.admitted.critical)],
      ['normal', 'admitted: normal', share(shed.admitted.normal)],
      ['sheddable', 'admitted: sheddable', share(shed.admitted.sheddable)],
      ['over', 'signal over its threshold', shed.over ?? 'none'],
      ['no-load-latency', 'no-load latency', shed.minRttMs === null ? null : shed.minRttMs.toFixed(1) + ' ms'],
      ['event-loop-delay', 'event-loop delay (p99)', delay === null ? null : delay.toFixed(1) + ' ms'],
      ['event-loop-utilization', 'event-loop utilization', elu === null ? null : share(elu)],
      ['redis-time', 'Redis reply time (p99)', redis === null ? null : redis.toFixed(1) + ' ms'],
      ['pressure', "the app's pressure", pressure === null ? null : pressure ? 'yes' : 'no']
    ]
    fill('shed', rows.filter(([, , value]) => value !== null).map(([key, name, value]) => {
      const tr = row(cell(name), cell(value, 'n'))
      tr.dataset.shed = key
      return tr
    }), 2)
  }

  async function ask (path, init) {
    let response
    try {
      response = await fetch(url(path), init)
    } catch (err) {
      throw new Error('the server could not be reached (' + err.message + ')')
    }
    if (!response.ok) {
      const why = response.status === 401
        ? ': log in again (reload the page)'
        : response.status === 403
          ? ': refused (too many failed logins from here, or another origin)'
          : response.status === 429 ? ': too many requests' : ''
      throw new Error('the server answered ' + response.status + why)
    }
    return await response.json()
  }
  async function unban (keyHash) {
    try {
      await ask('/rate-guard/unban', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ keyHash }) })
      notice = ''
    } catch (err) {
      notice = 'unban failed: ' + err.message
      status(notice, true)
    }
  }
  async function refresh () {
    const data = await ask('/rate-guard/data')
    const outcomes = Object.keys(data.stats.decisions)
      .filter(outcome => data.stats.decisions[outcome] > 0 || outcome in data.series.outcomes)
    chart(data.series, outcomes)
    fill('rates', outcomes.map(outcome => {
      const n = data.stats.decisions[outcome]
      const before = last?.stats.decisions[outcome] ?? n
      const seconds = last ? (data.at - last.at) / 1000 : 1
      const tr = row(swatch(outcome), cell(outcome), cell(((n - before) / seconds).toFixed(1), 'n'), cell(String(n), 'n'))
      tr.dataset.outcome = outcome
      return tr
    }), 4)
    fill('budgets', data.series.budgets.map(b => {
      const tr = row(cell(b.budget), cell(rate(b.perSecond), 'n'), cell(rate(b.refusedPerSecond), 'n'), cell(String(b.decisions), 'n'))
      tr.dataset.budget = b.budget
      return tr
    }), 4)
    // The names column only when the page names clients (data.clientNames: 'masked' or 'full').
    const named = data.clientNames !== undefined
    for (const th of document.querySelectorAll('th.named')) {
      th.hidden = !named
      th.textContent = data.clientNames === 'full' ? 'known as' : 'known as (masked)'
    }
    const name = client => named ? [cell(client ?? '')] : []
    fill('top', data.top.map(t => row(cell(t.keyHash), ...name(t.client), cell(t.keyKind), cell(String(t.refused), 'n'))), named ? 4 : 3)
    fill('bans', data.bans.map(b => {
      const button = document.createElement('button')
      button.textContent = 'unban'
      button.dataset.keyHash = b.keyHash
      button.onclick = () => unban(b.keyHash).then(refresh).catch(failed)
      const td = document.createElement('td'); td.append(button)
      const tr = row(cell(b.keyHash), ...name(b.client), cell(left(b.retryMs), 'n'), td)
      tr.dataset.keyHash = b.keyHash
      return tr
    }), named ? 4 : 3)
    shedder(data.stats.shed)
    last = data
    status('live, ' + new Date(data.at).toLocaleTimeString() + (notice === '' ? '' : '; ' + notice), notice !== '')
  }
  // What failed, and since when the page shows old data (it stays, marked by this line), until a poll works.
  const failed = err => {
    const showing = last ? '; showing ' + new Date(last.at).toLocaleTimeString() : ''
    status('not live: ' + err.message + showing + '; retrying each second', true)
  }
  // The next poll a second after the last answer, never on top of it: a client's requests in flight hold its
  // budget of failed logins until they are answered (the page has two at most: a poll and an unban).
  const poll = () => refresh().catch(failed).then(() => setTimeout(poll, 1000))
  poll()
`

/** The page's HTML document, with STYLE and SCRIPT inline. */
export const PAGE: string = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rate-guard</title>
<style>${STYLE}</style>
</head>
<body>
<h1>rate-guard <span id="status" role="status">connecting…</span></h1>
<h2>Decisions per second</h2>
<svg id="chart" viewBox="0 0 760 240" role="img" aria-label="decisions per second by outcome, the last ${SECONDS / 60} minutes"></svg>
<table><thead><tr><th></th><th>outcome</th><th>per second</th><th>since start</th></tr></thead><tbody id="rates"></tbody></table>
<h2>By budget (the last ${RECENT} seconds)</h2>
<table><thead><tr><th>budget</th><th>per second</th><th>refused per second</th><th>decisions, last ${SECONDS / 60} min</th></tr></thead>
<tbody id="budgets"></tbody></table>
<h2>Clients refused most</h2>
<table><thead><tr><th>client (hash)</th><th class="named" hidden>known as</th><th>kind</th><th>refusals</th></tr></thead>
<tbody id="top"></tbody></table>
<h2>Active bans</h2>
<table><thead><tr><th>client (hash)</th><th class="named" hidden>known as</th><th>time left</th><th></th></tr></thead>
<tbody id="bans"></tbody></table>
<section id="shedding" hidden>
<h2>Load shedder</h2>
<table><tbody id="shed"></tbody></table>
</section>
<script>${SCRIPT}</script>
</body>
</html>
`
