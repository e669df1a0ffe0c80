// `npm start`: the example API on PORT (default 3000), rate limited in Redis when one is there.
//
//   curl -i localhost:3000/items                                   # by IP: 10 per 5 s
//   curl -i -H 'Authorization: Bearer user-42' localhost:3000/items  # as user 42: 20 per 5 s
//   curl -i -H 'x-api-key: key-acme-0001' localhost:3000/items       # by API key: 40 per 5 s

import { buildApp } from './app.js'
import { chooseRedis } from './redis.js'

const { redis, where, notice } = await chooseRedis().catch((err) => {
  console.error(`server: ${err.message}`)
  process.exit(1)
})
const app = await buildApp({ redis, logger: true })
if (notice) app.log.warn(notice)

const port = Number(process.env.PORT ?? 3000)
const host = process.env.HOST ?? '127.0.0.1'
await app.listen({ port, host })
const url = `http://${host}:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`
app.log.info({ store: where, url }, `rate-guard example on ${url}, limits kept ${where.startsWith('Redis') ? 'in ' : ''}${where}`)

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    app.log.info({ signal }, 'closing')
    app.close().then(() => process.exit(0), (err) => {
      app.log.error({ err }, 'close failed')
      process.exit(1)
    })
  })
}
