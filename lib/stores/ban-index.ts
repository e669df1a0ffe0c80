import type { Cluster, Redis } from 'ioredis'
import { SLOTS, slotOf, slotTags } from '../slots.js'

// The ban index in Redis: a sorted set of banned keys' names, each scored by its ban's end on Redis's clock
// (ms), written by the scripts where a ban starts (lua/ban-index.lua) and by the operator's unban. bans() reads
// it, longest first, instead of scanning the key space: on a standalone Redis one index per nameSpace,
// `<nameSpace>bans`; on a Cluster one per hash slot, `<nameSpace>{<tag>}:bans` (lib/slots.ts), since a script
// may only touch keys of one slot. An index lives as long as its longest ban; ended bans are trimmed when a
// new one is entered, and skipped when read.

/** A ban as a store lists it: its banned key's name, and the ms it has left. */
export interface Ban {
  readonly key: string
  readonly retryMs: number
}

/** The index that holds `banned` (`<nameSpace>{<hash>}:…banned`): its nameSpace's, on a Cluster its hash's slot's. */
export function indexOf (banned: string, cluster: boolean): string {
  // A nameSpace has no braces (lib/options/stores.ts): the first one opens the hash tag.
  const open = banned.indexOf('{')
  const nameSpace = banned.slice(0, open)
  return cluster ? slotIndex(nameSpace, slotOf(banned.slice(open + 1, banned.indexOf('}', open)))) : `${nameSpace}bans`
}

function slotIndex (nameSpace: string, slot: number): string {
  return `${nameSpace}{${slotTags()[slot]!}}:bans`
}

/** Replies of one pipeline, or its first error. */
function replies (results: Array<[Error | null, unknown]> | null): unknown[] {
  // Only a MULTI under WATCH gives null.
  return results!.map(([err, reply]) => {
    if (err !== null) throw err
    return reply
  })
}

/**
 * The bans of `TIME` and the `ZREVRANGE … WITHSCORES` replies after it, ended ones left out (and any entry
 * whose score is not a time: `inf`): flat pairs (RESP2, RESP3 by default) or [member, score] pairs (RESP3
 * with `replyMapping: 'resp3'`).
 */
function read ([time, ...indexes]: unknown[]): Ban[] {
  const [seconds, micros] = time as [string, string]
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
  const bans: Ban[] = []
  for (const index of indexes) {
    const flat = (index as unknown[]).flat()
    for (let i = 0; i < flat.length; i += 2) {
      const retryMs = Number(flat[i + 1]) - now
      if (Number.isSafeInteger(retryMs) && retryMs > 0) bans.push({ key: String(flat[i]), retryMs })
    }
  }
  return bans
}

/** The `limit` longest of `bans`. */
function longest (bans: Ban[], limit: number): Ban[] {
  return bans.sort((a, b) => b.retryMs - a.retryMs).slice(0, limit)
}

/** Up to `limit` bans of `nameSpace` on a standalone Redis: TIME and one ZREVRANGE, in one round trip. */
export async function standaloneBans (client: Redis, nameSpace: string, limit: number): Promise<Ban[]> {
  return longest(read(replies(await client.pipeline().time().zrevrange(`${nameSpace}bans`, 0, limit - 1, 'WITHSCORES').exec())), limit)
}

/** Slots read in one pipeline: a round trip per this many, and the deadline looked at between them. */
const CHUNK = 1024

/**
 * Up to `limit` bans of `nameSpace` on a Cluster: each master's slots (as the client's slot table has them)
 * read in pipelines of `CHUNK`, the masters at once, then merged, longest first. `go` throws to stop before
 * the next pipeline is sent (the deadline, a close).
 */
export async function clusterBans (cluster: Cluster, nameSpace: string, limit: number, go: () => void): Promise<Ban[]> {
  let found: Ban[] = []
  await Promise.all(cluster.nodes('master').map(async node => {
    const name = `${node.options.host!}:${node.options.port!}`
    const slots: number[] = []
    for (let slot = 0; slot < SLOTS; slot++) if (cluster.slots[slot]?.[0] === name) slots.push(slot)
    for (let from = 0; from < slots.length; from += CHUNK) {
      go()
      const pipeline = node.pipeline().time()
      for (const slot of slots.slice(from, from + CHUNK)) pipeline.zrevrange(slotIndex(nameSpace, slot), 0, limit - 1, 'WITHSCORES')
      const got = read(replies(await pipeline.exec()))
      found = longest([...found, ...got], limit)
    }
  }))
  return found
}
