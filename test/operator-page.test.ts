// The example app's operator page (examples/operator-page.js) in a real browser: Debian's chromium, driven by
// playwright-core (no browser download: .ci/run installs the chromium package when it is missing). Real
// traffic on Redis makes decisions, refusals and a ban; the page shows them live, and its unban button lifts
// the ban. A screenshot is written to OPERATOR_SCREENSHOT when set.
import { existsSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { chromium } from 'playwright-core'
import t from 'tap'
import { hashIdentity } from '../lib/stores/key-names.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const PASSWORD = 'operator-test-password'

interface Example { buildApp: (options: { redis: string, nameSpace: string, operatorPassword: string }) => Promise<FastifyInstance> }

t.test('the operator page: live decisions, the clients refused most, the bans, and unban', async t => {
  t.ok(existsSync(CHROMIUM), `chromium at ${CHROMIUM} (apt-get install chromium; .ci/run does)`)
  const example = 'app.js'
  const { buildApp } = await import(`../examples/${example}`) as Example
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), operatorPassword: PASSWORD })
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
  t.match(await page.locator('#bans').textContent(), new RegExp(`${banned}\\s*\\d+ s`), 'the ban the traffic earned')
  const top = page.locator('#top tr').first()
  t.match(await top.textContent(), new RegExp(`${banned}\\s*ip\\s*\\d+`), 'the client refused most, by hash and kind')
  t.match(await page.locator('#rates').textContent(), /allowed/, 'decisions by outcome')
  t.match(await page.locator('#rates').textContent(), /limited/)
  t.notOk((await page.content()).includes('198.51.100.7'), 'the page never names a client by its address')

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

  if (process.env.OPERATOR_SCREENSHOT !== undefined) await page.screenshot({ path: process.env.OPERATOR_SCREENSHOT, fullPage: true })

  await banRow.locator('button').click()
  await banRow.waitFor({ state: 'detached', timeout: 10_000 })
  t.strictSame((await app.rateGuard.bans()).map(b => b.keyHash).filter(hash => hash === longBan), [], 'unban lifted it in Redis')
  t.not((await app.rateGuard.peek('198.51.100.20', { max: 10, timeWindow: '5s' })).status, 'banned')
})
