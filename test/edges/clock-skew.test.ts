// The edge matrix (test/helpers/edge-harness.ts): two instances on one Redis whose clocks are apart by ±2 s
// and ±10 minutes, both moved next to a calendar midnight (of the whole-hour zone whose midnight is nearest
// the real time), so the instances' periods part during the run while Redis's TIME, real, stays in one day:
// once with the instances ahead of Redis (the midnight still to come for Redis), once behind it (passed). Every
// kind of limit, its 1 s windows crossed many times. The handlers' records are held to each limit: a quota's
// period admits at most its max across both instances, a window at most what its algorithm allows, whatever
// clock each instance keeps. (In process there is nothing two instances share: these cells are Redis's.)
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { Observer } from '../helpers/edge-check.js'
import { KINDS, drive, judge, nearestMidnight, pair, seeds, selected } from '../helpers/edge-harness.js'
import type { Cell } from '../helpers/edge-harness.js'
import { getRedis } from '../helpers/redis.js'

t.setTimeout(150_000)

/** The second instance's clock against the first's. */
const SKEWS: ReadonlyArray<{ name: string, ms: number }> = [
  { name: 'clock +2 s', ms: 2000 },
  { name: 'clock -2 s', ms: -2000 },
  { name: 'clock +10 min', ms: 600_000 },
  { name: 'clock -10 min', ms: -600_000 }
]
/** When, into the run, the first instance's clock passes midnight. */
const CROSS_MS = 1200

for (const seed of seeds(t, 4141)) {
  for (const side of ['ahead', 'behind'] as const) {
    t.test(`two instances, clocks apart, ${side} of Redis, seed ${seed}`, async t => {
      const { url } = await getRedis(t)
      const { zone, midnight } = nearestMidnight(side)
      t.comment(`the instances' midnight: ${new Date(midnight).toISOString()} (${zone}); Redis's clock is ${Math.round((midnight - Date.now()) / 1000)} s from it`)
      const observer = new Observer()
      const runs: Array<{ cells: Cell[], bases: string[] }> = []
      const built = performance.now()
      for (const skew of SKEWS) {
        const cells = KINDS.map(kind => ({ name: `${kind.name}/${skew.name}, ${side} of Redis/redis`, kind, client: `${kind.name}/${skew.name}#${seed}` }))
          .filter(cell => selected(cell.name))
        if (cells.length === 0) continue
        // The first instance reaches midnight CROSS_MS after the traffic starts (built + a second, about).
        const first = midnight - Date.now() - CROSS_MS - 1000 + (performance.now() - built)
        const bases = await pair(t, { redis: url, zone, observer }, [first, first + skew.ms])
        runs.push({ cells, bases })
      }
      await Promise.all(runs.flatMap(({ cells, bases }) => cells.map(async cell => { await drive(cell, seed, { ms: 3000, bases }, observer) })))
      judge(t, observer, runs.flatMap(run => run.cells), seed)
    })
  }
}
