import type { Cluster, Redis } from 'ioredis'
import { ALGORITHMS, DEFAULT_ALGORITHM } from '../algorithms/index.js'
import type { Algorithm } from '../algorithms/index.js'
import { ClosedError } from '../errors.js'
import { traced } from '../channels.js'
import { isBanKey } from './key-names.js'
import { clusterBans, indexOf, standaloneBans } from './ban-index.js'
import type { Ban } from './ban-index.js'
import {
  BAN_SCRIPT, CROSS_SLOT_LEAN_SCRIPTS, CROSS_SLOT_SCRIPTS, LEAN_SCRIPTS, LIBRARY, SCRIPTS, crossSlotArgs, defineScript, defineScripts,
  isLean, leanArgs, located, scriptArgs
} from './scripts.js'
import { loadLibrary } from './functions.js'
import { memberBases, members } from './member-ids.js'
import type { Clock, Locking, Script, ScriptCommand } from './scripts.js'
import { Masters } from './masters.js'
import { isCluster } from './client.js'
import { RedisLeases } from './redis-leases.js'
import { HANDED_BACK, toDecisions, toLeanDecisions } from './replies.js'
import type { DecideInput, Decision, RemoteStore, SettleInput } from './store.js'
import type { RedisLike } from '../types.js'

// The Redis store: one script call per batch of decisions (the scripts, and their calls' arguments, in
// lib/stores/scripts.ts). An error a script raises names the line of its lua/ file. On a Redis Cluster, one
// call per master the batch's identities live on, with the scripts' cross-slot variants (Redis 7.0 and later);
// a call that meets a slot on the move falls back to one call per request, which Redis redirects.

export class RedisStore implements RemoteStore {
  readonly client: RedisLike
  readonly #owned: boolean
  readonly #cluster: boolean
  readonly #commands: Readonly<Record<Algorithm, ScriptCommand>>
  readonly #ban: ScriptCommand
  /** The lean scripts (`LEAN_SCRIPTS`), or null when every request goes to its algorithm's script (`lean: false`). */
  readonly #lean: Readonly<Partial<Record<Algorithm, ScriptCommand>>> | null
  /** The ban index of a banned key: the nameSpace's one, or on a Cluster its slot's. */
  readonly #index: (banned: string) => string
  /** On a Cluster, the cross-slot variants of the algorithms' scripts and of the lean ones (null without it). */
  readonly #across: Readonly<Record<Algorithm, ScriptCommand>> | null
  readonly #acrossLean: Readonly<Partial<Record<Algorithm, ScriptCommand>>> | null
  /** On a Cluster, which master serves each request, and whether the cross-slot variants run (null without it). */
  readonly #masters: Masters | null
  /** Set by close: an operator call still under way stops, with a coded error. */
  #closed = false
  /** Log members are `<base><request>`, integers unique across calls and instances (`memberBases`), never client input. */
  readonly #base = memberBases()

  readonly #nameSpace: string
  readonly leases: RedisLeases
  readonly #functions: boolean

  /**
   * `nameSpace`: the registration's, named in the traces of its script calls (lib/channels.ts). `lean: false`
   * sends every request to its algorithm's script (the tests run both paths). `functions`: its scripts called
   * as the FUNCTION library's functions (lib/stores/functions.ts) where the server holds them, EVALSHA
   * otherwise; `false` sends every call with EVALSHA. `clock` and `locking`: what the server takes
   * (lib/connect.ts finds out at start); the cross-slot variants, a Cluster's, lock as Redis does.
   */
  constructor (
    client: RedisLike, owned: boolean, nameSpace = '',
    { lean = true, clock = 'redis' as Clock, locking = 'global' as Locking, functions = true } = {}
  ) {
    this.client = client
    this.#owned = owned
    this.#nameSpace = nameSpace
    this.#cluster = isCluster(client)
    this.#commands = Object.fromEntries(ALGORITHMS.map(algorithm =>
      [algorithm, defineScript(client, algorithm, clock, locking, functions)])) as Record<Algorithm, ScriptCommand>
    this.#ban = defineScript(client, BAN_SCRIPT, clock, locking, functions)
    this.#lean = lean ? defineScripts(client, LEAN_SCRIPTS, clock, locking, functions) : null
    this.#across = this.#cluster
      ? Object.fromEntries(ALGORITHMS.map(algorithm =>
        [algorithm, defineScript(client, CROSS_SLOT_SCRIPTS[algorithm], clock, 'global', functions)])) as Record<Algorithm, ScriptCommand>
      : null
    this.#acrossLean = this.#cluster && lean ? defineScripts(client, CROSS_SLOT_LEAN_SCRIPTS, clock, 'global', functions) : null
    this.#masters = this.#cluster ? new Masters(client as Cluster) : null
    const cluster = this.#cluster
    this.#index = (banned) => indexOf(banned, cluster)
    this.leases = new RedisLeases(client, nameSpace, this.#index, clock, locking, functions)
    this.#functions = functions
  }

  /**
   * Loads the FUNCTION library on every server the client reaches (each master of a Cluster) unless it is
   * there, so decisions go FCALL from the first; resolves when done, or when a server refused functions
   * (EVALSHA for good). Without it, the first call starts the load.
   */
  async loadFunctions (): Promise<void> {
    if (this.#functions) await loadLibrary(this.client, LIBRARY)
  }

  /** Decides (or, with `peek`, reports) one request. */
  async decide (input: DecideInput): Promise<Decision> {
    const [decision] = await this.#decide([input], input.peek ? 'peek' : 'decide', input.algorithm ?? DEFAULT_ALGORITHM)
    if (decision instanceof Error) throw decision
    return decision!
  }

  /** On a Cluster, the master that serves `input`'s keys (`''` when the slot table names none); `''` on one Redis. */
  shardOf (input: DecideInput): string {
    return this.#masters?.masterOf(input) ?? ''
  }

  /**
   * Decides requests of one algorithm in one script call, in order, atomically; a request Redis could not
   * decide (a foreign value at its key) gets its error, and the others their decisions. On a Redis Cluster,
   * whose scripts' keys must be of one slot, one call per master (`Masters`) with the cross-slot scripts; a
   * request alone on its master, or every request when they cannot run, is a call of its own. A call that
   * fails gives its error to each of its requests, unless all fail (the batch as a whole failed then: Redis
   * did not answer).
   */
  async decideMany (inputs: readonly DecideInput[], algorithm: Algorithm): Promise<Array<Decision | Error>> {
    if (!this.#cluster) return await this.#decide(inputs, 'decide', algorithm)
    const results: Array<Decision | Error> = new Array(inputs.length)
    await Promise.all(this.#masters!.groups(inputs).map(async indexes => {
      const group = pick(inputs, indexes)
      const answers = await this.#decide(group, 'decide', algorithm, group.length > 1)
        .catch((err: unknown) => group.map(() => err as Error))
      scatter(results, indexes, answers)
    }))
    const [first] = results
    if (first instanceof Error && results.every(result => result instanceof Error)) throw first
    return results
  }

  /**
   * Decides `inputs` with the fewest calls: the requests the lean script takes (`isLean`) in one call, the
   * others in one call of their algorithm's script beside it, and those the lean script handed back in one more.
   * Each call is given the indexes of its requests and writes their answers there. `across`: with the
   * cross-slot scripts (inputs of several slots of one master).
   */
  async #decide (
    inputs: readonly DecideInput[], mode: 'decide' | 'peek', algorithm: Algorithm, across = false
  ): Promise<Array<Decision | Error>> {
    if (this.#lean === null || mode === 'peek') return await this.#general(inputs, mode, algorithm, across)
    const lean: number[] = []
    const others: number[] = []
    inputs.forEach((input, i) => (isLean(input, algorithm) ? lean : others).push(i))
    if (lean.length === 0) return await this.#general(inputs, mode, algorithm, across)
    const results: Array<Decision | Error | typeof HANDED_BACK> = new Array(inputs.length)
    await Promise.all([
      this.#leanCall(pick(inputs, lean), algorithm, across).then(answers => { scatter(results, lean, answers) }),
      others.length === 0
        ? undefined
        : this.#general(pick(inputs, others), mode, algorithm, across).then(answers => { scatter(results, others, answers) })
    ])
    const handedBack = lean.filter(i => results[i] === HANDED_BACK)
    if (handedBack.length > 0) scatter(results, handedBack, await this.#general(pick(inputs, handedBack), mode, algorithm, across))
    return results as Array<Decision | Error>
  }

  /** Decides `inputs` (each `isLean`) in one call of their algorithm's lean script; some may be handed back. */
  async #leanCall (
    inputs: readonly DecideInput[], algorithm: Algorithm, across: boolean
  ): Promise<Array<Decision | Error | typeof HANDED_BACK>> {
    const base = this.#base()
    const call = (across ? this.#acrossLean! : this.#lean!)[algorithm]!
    const args = leanArgs(inputs, base, this.#index)
    try {
      const reply = await traced(() => ({ nameSpace: this.#nameSpace, mode: 'decide', algorithm, batchSize: inputs.length }),
        () => call(...(across ? crossSlotArgs(args) : args)))
      return toLeanDecisions(reply, members(base, inputs.length), inputs)
    } catch (err) {
      if (across && this.#masters!.elsewhere(err)) return await this.#oneByOne(inputs, 'decide', algorithm)
      throw located((across ? CROSS_SLOT_LEAN_SCRIPTS : LEAN_SCRIPTS)[algorithm]!, err)
    }
  }

  /** Decides `inputs` in one call of their algorithm's script (its cross-slot variant when `across`). */
  async #general (
    inputs: readonly DecideInput[], mode: 'decide' | 'peek', algorithm: Algorithm, across = false
  ): Promise<Array<Decision | Error>> {
    const base = this.#base()
    const call = across ? this.#across![algorithm] : this.#commands[algorithm]
    const script: Script = across ? CROSS_SLOT_SCRIPTS[algorithm] : SCRIPTS[algorithm]
    const args = scriptArgs(inputs, mode, base, this.#index)
    let reply: unknown
    try {
      reply = await traced(() => ({ nameSpace: this.#nameSpace, mode, algorithm, batchSize: inputs.length }),
        () => call(...(across ? crossSlotArgs(args) : args)))
    } catch (err) {
      if (across && this.#masters!.elsewhere(err)) return await this.#oneByOne(inputs, mode, algorithm)
      throw located(script, err)
    }
    const decisions = toDecisions(reply, members(base, inputs.length), inputs)
    // A request's own error names where the script raised it, too.
    for (const decision of decisions) if (decision instanceof Error) located(script, decision)
    return decisions
  }

  /** Each of `inputs` in a call of its own, as the store decides on a Cluster without the cross-slot scripts. */
  async #oneByOne (inputs: readonly DecideInput[], mode: 'decide' | 'peek', algorithm: Algorithm): Promise<Array<Decision | Error>> {
    return await Promise.all(inputs.map(async input =>
      await this.#decide([input], mode, algorithm).then(([one]) => one!, (err: unknown) => err as Error)))
  }

  async settle (input: SettleInput): Promise<void> {
    const call = this.#commands[input.algorithm]
    try {
      await traced(() => ({ nameSpace: this.#nameSpace, mode: 'settle', algorithm: input.algorithm, batchSize: 1 }),
        () => call(...scriptArgs([input], 'settle', '')))
    } catch (err) {
      throw located(SCRIPTS[input.algorithm], err)
    }
  }

  async setBan (bannedKey: string, ms: number): Promise<void> {
    try {
      await this.#ban(2, bannedKey, this.#index(bannedKey), ms)
    } catch (err) {
      throw located(BAN_SCRIPT, err)
    }
  }

  async setValue (key: string, value: string, ms: number | null): Promise<void> {
    await (ms === null ? this.client.set(key, value) : this.client.set(key, value, 'PX', ms))
  }

  async delete (keys: readonly string[]): Promise<void> {
    await this.client.del(...keys)
  }

  async unban (keys: readonly string[]): Promise<void> {
    const bans = keys.filter(isBanKey)
    await this.client.multi().del(...keys).zrem(this.#index(bans[0]!), ...bans).exec()
  }

  /**
   * Up to `limit` bans from the ban index (`lib/stores/ban-index.ts`): a few commands on a standalone Redis,
   * one per slot (pipelined, by master) on a Cluster, never a scan of the key space. Stops sending once
   * `signal` aborts (the operator call's deadline) or the store closes: a close rejects with a coded error.
   */
  async bans (nameSpace: string, limit: number, signal: AbortSignal): Promise<Ban[]> {
    const go = (): void => {
      if (this.#closed) throw new ClosedError('bans')
      signal.throwIfAborted()
    }
    go()
    try {
      return this.#cluster
        ? await clusterBans(this.client as Cluster, nameSpace, limit, go)
        : await standaloneBans(this.client as Redis, nameSpace, limit)
    } catch (err) {
      // The client's own error ('Connection is closed') when the close came first.
      go()
      throw err
    }
  }

  /** Closes the client only when the plugin created it: a lent client is the lender's to close. */
  async close (): Promise<void> {
    this.#closed = true
    if (!this.#owned) return
    try {
      await this.client.quit()
    } catch {
      this.client.disconnect()
    }
  }
}

/** Writes each of `answers` at its request's place in `results`: `answers[j]` is the answer of `inputs[indexes[j]]`. */
function scatter<T> (results: T[], indexes: readonly number[], answers: readonly T[]): void {
  indexes.forEach((i, j) => { results[i] = answers[j]! })
}

/** The requests at `indexes`, in that order: what one call of a batch is given. */
function pick (inputs: readonly DecideInput[], indexes: readonly number[]): DecideInput[] {
  return indexes.map(i => inputs[i]!)
}
