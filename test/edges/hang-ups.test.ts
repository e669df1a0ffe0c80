// The edge matrix (test/helpers/edge-harness.ts): every kind of limit, on both stores, with clients that hang
// up before their handler runs (the body never sent whole) or while it runs, beside a calm run of the same
// traffic. The handlers' own records are held to each limit: no more started in any window or period than it
// allows, no more running at once than `concurrency.max`, nothing started inside a ban the client was told
// of. On Redis two instances share the client; in process one instance (two would share nothing).
import t from 'tap'
import { Observer } from '../helpers/edge-check.js'
import { KINDS, drive, instance, judge, nearestMidnight, pair, seeds, selected } from '../helpers/edge-harness.js'
import type { Cell, HangUp } from '../helpers/edge-harness.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

t.setTimeout(120_000)

const EDGES: ReadonlyArray<{ name: string, hangUp?: HangUp }> = [
  { name: 'calm' },
  { name: 'hang-up before the handler', hangUp: 'before' },
  { name: 'hang-up while the handler runs', hangUp: 'while' }
]
const STORES = ['memory', 'redis'] as const

for (const seed of seeds(t, 41)) {
  t.test(`hang-ups, seed ${seed}`, async t => {
    const { url } = await getRedis(t)
    const { zone } = nearestMidnight()
    const observer = new Observer()
    const bases = {
      memory: [(await instance(t, { nameSpace: uniquePrefix(), zone, observer })).base],
      redis: await pair(t, { redis: url, zone, observer })
    }
    const cells: Array<Cell & { edge: typeof EDGES[number], store: typeof STORES[number] }> = []
    for (const kind of KINDS) {
      for (const edge of EDGES) {
        for (const store of STORES) {
          const name = `${kind.name}/${edge.name}/${store}`
          if (selected(name)) cells.push({ name, kind, client: `${name}#${seed}`, edge, store })
        }
      }
    }
    await Promise.all(cells.map(async cell => {
      await drive(cell, seed, { ms: 2500, ...(cell.edge.hangUp === undefined ? {} : { hangUp: cell.edge.hangUp }), bases: bases[cell.store] }, observer)
    }))
    judge(t, observer, cells, seed)
  })
}
