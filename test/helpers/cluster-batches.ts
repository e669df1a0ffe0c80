// What the Cluster tests (test/cluster.test.ts, test/servers/cluster.test.ts) ask of a batch: requests of
// identities on a chosen master, each request's input, the script calls a batch took and what each identity
// was allowed.
import diagnostics from 'node:diagnostics_channel'
import type { Test } from 'tap'
import type { Algorithm } from '../../lib/algorithms/index.js'
import { CHANNELS } from '../../lib/channels.js'
import type { RedisCallContext } from '../../lib/channels.js'
import { GLOBAL_SCOPE, identityKeys } from '../../lib/stores/key-names.js'
import type { Decision, DecideInput } from '../../lib/stores/store.js'
import type { ClusterNode, TestCluster } from './cluster.js'

/** An identity whose keys live on `owner` now, found by asking the cluster where each candidate's keys go. */
export async function identityOn (cluster: TestCluster, owner: ClusterNode, nameSpace: string, label: string): Promise<string> {
  for (let i = 0; i < 200; i++) {
    const identity = `${label}-${i}`
    if (await cluster.ownerOf(await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, identity).log)) === owner) return identity
  }
  throw new Error(`no identity on ${owner.port} among 200 candidates`)
}

/** The script calls of `nameSpace` (the TracingChannel around each, lib/channels.ts) while `t` runs: each one's batch size. */
export function callsOf (t: Test, nameSpace: string): number[] {
  const sizes: number[] = []
  const start = (context: unknown): void => {
    const call = context as RedisCallContext
    if (call.nameSpace === nameSpace) sizes.push(call.batchSize)
  }
  const channel = diagnostics.tracingChannel(CHANNELS.redis)
  const handlers = { start, end () {}, asyncStart () {}, asyncEnd () {}, error () {} }
  channel.subscribe(handlers)
  t.teardown(() => { channel.unsubscribe(handlers) })
  return sizes
}

/** A store-level decision of `identity`'s request under `nameSpace`, max `max` a minute. */
export function inputOf (nameSpace: string, identity: string, max: number, algorithm: Algorithm = 'sliding-log', cost = 1): DecideInput {
  return { keys: identityKeys(nameSpace, GLOBAL_SCOPE, identity, algorithm), limits: [{ max, windowMs: 60_000, burst: max }], ban: null, peek: false, algorithm, cost }
}

/** Each identity's allowed count in `decisions` (inputs in the same order). */
export function allowedBy (inputs: readonly DecideInput[], decisions: ReadonlyArray<Decision | Error>): Map<string, number> {
  const allowed = new Map<string, number>()
  decisions.forEach((decision, i) => {
    const log = inputs[i]!.keys.log
    allowed.set(log, (allowed.get(log) ?? 0) + (!(decision instanceof Error) && decision.status === 'allowed' ? 1 : 0))
  })
  return allowed
}
