// The example app's operator page (lib/operator/page.ts, `fastify-rate-guard/operator-page`) in a real browser: Debian's chromium, driven by
// playwright-core (no browser download: .ci/run installs the chromium package when it is missing). Real
// traffic on Redis makes decisions, refusals and a ban; the page charts them live, by outcome and by budget,
// names the clients refused beside their hash (masked: the app opts in with clientNames; what the page's data
// holds, off, masked or whole, is test/operator-names.test.ts), says so when it cannot reach its data, and its
// unban button lifts the ban. A screenshot is written to OPERATOR_SCREENSHOT when set, else to a fresh
// temporary directory (named in the test's output).
import { existsSync, mkdtempSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import Fastify from 'fastify'
import { chromium } from 'playwright-core'
import t from 'tap'
import rateGuard from '../lib/index.js'
import { operatorPage } from '../lib/operator/page.js'
import { BUDGETS, DecisionSeries, OTHER, RECENT, SECONDS } from '../lib/operator/series.js'
import { hashIdentity } from '../lib/stores/key-names.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const PASSWORD = 'operator-test-password'

interface Example { buildApp: (options: { redis: string, nameSpace: string, operatorPassword: string, operatorClientNames: true }) => Promise<FastifyInstance> }

t.test('the operator page: live decisions, the clients refused most, the bans, and unban', async t => {
  t.ok(existsSync(CHROMIUM), `chromium at ${CHROMIUM} (apt-get install chromium; .ci/run does)`)
  const example = 'app.js'
  const { buildApp } = await import(`../examples/${example}`) as Example
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), operatorPassword: PASSWORD, operatorClientNames: true })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  const origin = `http://127.0.0.1:${port}`

  t.equal((await fetch(`${origin}/rate-guard`)).status, 401, 'no credentials: no page')
  t.equal((await fetch(`${origin}/rate-guard/data`, { headers: { authorization: 'Basic ' + Buffer.from('operator:wrong').toString('base64') } })).status, 401, 'wrong ones neither')

  // Traffic through the loopback proxy the example trusts: an address that keeps asking is limited, then
  // banned (3 refusals in a window); another is only limited.
  const from = async (address: string, times: number): Promise<void> => {
    for (let i = 0; i < times; i++) await app.inject({ url: '/items', remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': address } })
  }
  await from('198.51.100.7', 14)
  await from('198.51.100.8', 11)
  // And a route with a budget of its own (5 per 5 s): the page breaks decisions down by budget.
  for (let i = 0; i < 7; i++) await app.inject({ url: '/search?q=tea', remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': '198.51.100.30' } })
  const banned = hashIdentity('198.51.100.7')
  t.strictSame((await app.rateGuard.bans()).map(b => b.keyHash), [banned], 'one client banned by its traffic (for 10 s)')
  // And one by the operator, for an hour: the one the button lifts (the first might end by itself first).
  await app.rateGuard.ban('198.51.100.20', '1 hour')
  const longBan = hashIdentity('198.51.100.20')

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
  t.teardown(async () => { await browser.close() })
  const context = await browser.newContext({ httpCredentials: { username: 'operator', password: PASSWORD }, viewport: { width: 1000, height: 900 } })
  const page = await context.newPage()
  const violations: string[] = []
  page.on('console', message => { if (/Content.Security.Policy/i.test(message.text())) violations.push(message.text()) })
  await page.goto(`${origin}/rate-guard`)

  const banRow = page.locator(`#bans tr[data-key-hash="${longBan}"]`)
  await banRow.waitFor({ timeout: 10_000 })
  t.match(await banRow.textContent(), /60 min/, 'the operator\'s ban, with its time left')
  t.match(await page.locator('#bans').textContent(), new RegExp(`${banned}198\\.51\\.100\\.x\\d+ s`), 'the ban the traffic earned, its client named (masked)')
  const top = page.locator('#top tr').first()
  t.match(await top.textContent(), new RegExp(`^${banned}198\\.51\\.100\\.xip\\d+$`), 'the client refused most, by hash, name (masked) and kind')
  t.strictSame(await page.locator('th.named').allTextContents(), ['known as (masked)', 'known as (masked)'], 'a column of names, said to be masked')
  t.ok(await page.locator('th.named').first().isVisible(), 'shown')
  t.match(await page.locator('#rates').textContent(), /allowed/, 'decisions by outcome')
  t.match(await page.locator('#rates').textContent(), /limited/)
  t.notOk((await page.content()).includes('198.51.100.7'), 'the page never names a client by its whole address (masked)')
  t.ok(await page.locator('#shedding').isHidden(), 'no load shedder in the app: no section of it')

  // The chart: a line per outcome the traffic had, over the last minutes, drawn once its second is whole.
  const outcomes = ['allowed', 'limited', 'ban-started', 'banned']
  await page.waitForFunction(names => names.every(name => {
    const ys = (document.querySelector(`#chart polyline[data-outcome="${name}"]`)?.getAttribute('points') ?? '').split(' ').map(point => point.split(',')[1])
    return new Set(ys).size > 1
  }), outcomes, { timeout: 10_000 })
  for (const outcome of outcomes) {
    const points = (await page.locator(`#chart polyline[data-outcome="${outcome}"]`).getAttribute('points'))?.split(' ') ?? []
    t.equal(points.length, 180, `${outcome}: a line of a point a second, three minutes`)
    t.ok(points.every(point => /^\d+(\.\d)?,\d+(\.\d)?$/.test(point)), `${outcome}: every point a number`)
    t.ok(await page.locator(`#rates tr[data-outcome="${outcome}"] line`).count() === 1, `${outcome}: in the legend, with its colour`)
  }
  t.equal(await page.locator('#chart polyline').count(), outcomes.length, 'no line for an outcome the traffic did not have')
  const scale = await page.locator('#chart text').allTextContents()
  t.ok(scale.includes('0') && scale.includes('now') && scale.includes('−1 min'), `axes with a scale: ${scale.join(' ')}`)

  // By budget: the plugin-wide one and the route's own; not the page's own polling (its budget of failed
  // logins shows only when a login is refused), though by now it has polled for seconds.
  for (const budget of ['default', 'GET /search']) {
    await page.locator(`#budgets tr[data-budget="${budget}"]`).waitFor({ timeout: 10_000 })
  }
  t.equal(await page.locator('#budgets tr[data-budget="group:rate-guard-operator"]').count(), 0, 'the page\'s polling is not charted')
  t.match(await page.locator('#budgets tr[data-budget="GET /search"]').textContent(), /^GET \/search[\d.]+[\d.]+7$/, 'a budget: its rate, its refusals, its decisions')

  // Live: more traffic shows up without reloading.
  await from('198.51.100.9', 12)
  await page.locator('#top tr', { hasText: hashIdentity('198.51.100.9') }).waitFor({ timeout: 10_000 })
  t.pass('new refusals appear on their own')

  t.strictSame(violations, [], 'its own script and style pass its Content-Security-Policy')
  t.equal(await page.locator('h1').evaluate(h1 => getComputedStyle(h1).fontSize), '22.4px', 'and the style applies (1.4rem)')

  // A page that frames it (to have the operator click unban unknowingly) gets nothing to click. The framing
  // page is on the page's own origin: frame-ancestors 'none' refuses every framer, and a cross-site frame could
  // not log in here anyway (Chrome shows its error page for one even without the header).
  const framing = await context.newPage()
  await framing.goto(`${origin}/health`)
  await framing.setContent(`<iframe src="${origin}/rate-guard" width="800" height="600"></iframe>`, { waitUntil: 'load' })
  const frame = await (await framing.waitForSelector('iframe')).contentFrame()
  t.equal(await frame?.locator('#bans').count(), 0, 'framed: the browser shows nothing of the page, so no unban button to click')
  t.match(frame?.url(), /^chrome-error:/, 'but its error page')
  await framing.close()

  // Opened with the credentials in its address (http://operator:…@host/rate-guard), it goes live as well: the
  // script asks its own origin, never the document's URL with its user info (which fetch refuses).
  const inAddress = await browser.newContext()
  t.teardown(async () => { await inAddress.close() })
  const typed = await inAddress.newPage()
  await typed.goto(`http://operator:${PASSWORD}@127.0.0.1:${port}/rate-guard`)
  await typed.locator('#status', { hasText: /^live/ }).waitFor({ timeout: 10_000 })
  t.pass('opened with credentials in the address: live')
  await inAddress.close()

  // When its data cannot be had, the page says so (and why) instead of staying "connecting…", and goes live
  // again once it can. Its requests are answered by the browser here, never reaching the app.
  const failing = await context.newPage()
  await failing.route('**/rate-guard/data', async route => { await route.abort('connectionrefused') })
  await failing.goto(`${origin}/rate-guard`)
  const status = failing.locator('#status.failed')
  await status.waitFor({ timeout: 10_000 })
  t.match(await status.textContent(), /^not live: the server could not be reached/, 'a failed fetch: said in the status line')
  await failing.unroute('**/rate-guard/data')
  await failing.route('**/rate-guard/data', async route => { await route.fulfill({ status: 503, contentType: 'application/json', body: '{}' }) })
  await failing.locator('#status', { hasText: /^not live: the server answered 503/ }).waitFor({ timeout: 10_000 })
  t.pass('an error status: said with its code')
  await failing.unroute('**/rate-guard/data')
  await failing.locator('#status', { hasText: /^live/ }).waitFor({ timeout: 10_000 })
  t.equal(await failing.locator('#status').getAttribute('class'), '', 'and live again once it answers')
  await failing.close()

  const screenshot = process.env.OPERATOR_SCREENSHOT ?? join(mkdtempSync(join(tmpdir(), 'operator-page-')), 'operator-page.png')
  await page.screenshot({ path: screenshot, fullPage: true })
  t.ok(statSync(screenshot).size > 10_000, `a screenshot: ${screenshot}`)

  await banRow.locator('button').click()
  await banRow.waitFor({ state: 'detached', timeout: 10_000 })
  t.strictSame((await app.rateGuard.bans()).map(b => b.keyHash).filter(hash => hash === longBan), [], 'unban lifted it in Redis')
  t.not((await app.rateGuard.peek('198.51.100.20', { max: 10, timeWindow: '5s' })).status, 'banned')
})

t.test('the load shedder on the page: in flight against its capacity, each class\'s share, its sheds charted; the page never shed', async t => {
  t.ok(existsSync(CHROMIUM), `chromium at ${CHROMIUM}`)
  const app = Fastify()
  t.teardown(() => app.close())
  // Two in flight, one kept for the critical class; no signal, and no sample within the test.
  const shed = { inFlight: 2, reserve: 0.5, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: '10 seconds' } as const
  await app.register(rateGuard, { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), max: 100, timeWindow: '1 minute', shed })
  const held: Array<() => void> = []
  let heldTwo: () => void = () => {}
  const both = new Promise<void>(resolve => { heldTwo = resolve })
  app.get('/hold', { config: { priority: 'critical' } }, async () => {
    await new Promise<void>(resolve => { if (held.push(resolve) === 2) heldTwo() })
    return 'done'
  })
  app.get('/items', async () => ({ items: [] }))
  await app.register(operatorPage, { credentials: { user: 'operator', password: PASSWORD } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  // Two critical requests held: the capacity full, every class but exempt is shed (the page's routes are exempt).
  const holding = [app.inject('/hold'), app.inject('/hold')]
  t.teardown(async () => {
    for (const release of held) release()
    await Promise.all(holding)
  })
  await both
  for (let i = 0; i < 3; i++) t.equal((await app.inject('/items')).statusCode, 503, 'shed')

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
  t.teardown(async () => { await browser.close() })
  const context = await browser.newContext({ httpCredentials: { username: 'operator', password: PASSWORD } })
  const page = await context.newPage()
  await page.goto(`http://127.0.0.1:${port}/rate-guard`)
  const section = page.locator('#shedding')
  await section.waitFor({ state: 'visible', timeout: 10_000 })
  t.ok(await page.locator('#status', { hasText: /^live/ }).count() === 1, 'live though the app sheds everything else')
  const value = async (key: string): Promise<string | null> => await page.locator(`#shed tr[data-shed="${key}"] td.n`).textContent()
  t.equal(await value('in-flight'), '2 / 2', 'in flight against the capacity: the two held (the page\'s own requests are exempt)')
  t.equal(await value('critical'), '100%', 'each class\'s admitted share')
  t.equal(await value('normal'), '100%')
  t.equal(await value('sheddable'), '100%')
  t.match(await value('over'), /^(none|in-flight)$/, 'the signal over its threshold (a sample may come: the in-flight count)')
  t.equal(await page.locator('#shed tr[data-shed="event-loop-delay"]').count(), 0, 'a signal not read: no row')
  t.equal(await page.locator('#rates tr[data-outcome="shed"] line').count(), 1, 'the sheds, by outcome, with their colour')
  t.match(await page.locator('#rates tr[data-outcome="shed"]').textContent(), /3$/, 'three since start')
  await page.waitForFunction(() => {
    const ys = (document.querySelector('#chart polyline[data-outcome="shed"]')?.getAttribute('points') ?? '').split(' ').map(point => point.split(',')[1])
    return new Set(ys).size > 1
  }, undefined, { timeout: 10_000 })
  t.equal(await page.locator('#chart polyline[data-outcome="shed"]').getAttribute('stroke'), '#ad1457', 'charted in its own colour')
})

t.test('the page\'s counts per second: whole seconds only, the oldest rolled out, a bounded number of budgets', async t => {
  let now = 1_000_000_000_500
  const series = new DecisionSeries(() => now)
  series.count({ outcome: 'allowed', budget: 'default' })
  series.count({ outcome: 'limited', budget: 'default' })
  t.strictSame(series.snapshot().outcomes, {}, 'the running second is not shown')
  now += 1000
  const first = series.snapshot()
  t.equal(first.end, 1_000_000_001_000, 'up to the end of the last whole second')
  t.strictSame(first.outcomes.allowed?.slice(-2), [0, 1])
  t.strictSame(first.outcomes.limited?.length, SECONDS)
  t.strictSame(first.budgets, [{ budget: 'default', perSecond: 1 / RECENT * 2, refusedPerSecond: 1 / RECENT, decisions: 2 }])

  for (let i = 0; i < BUDGETS + 5; i++) series.count({ outcome: 'allowed', budget: `GET /${i}` })
  now += 1000
  const budgets = series.snapshot().budgets.map(b => b.budget)
  t.equal(budgets.length, BUDGETS, `at most ${BUDGETS} budgets`)
  t.ok(new Set(budgets).size === budgets.length && series.snapshot().budgets.find(b => b.budget === OTHER)?.decisions === 5, 'past them, a second\'s others counted together')

  now += RECENT * 1000
  t.equal(series.snapshot().budgets.find(b => b.budget === 'default')?.perSecond, 0, 'a budget\'s rate: the last seconds only')
  now += SECONDS * 1000
  t.strictSame(series.snapshot(), { end: Math.floor(now / 1000) * 1000, seconds: SECONDS, recent: RECENT, outcomes: {}, budgets: [] }, 'older than the window: gone')
})
