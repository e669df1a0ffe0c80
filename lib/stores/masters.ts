import type { Cluster } from 'ioredis'
import { keySlot } from '../slots.js'
import type { DecideInput } from './store.js'

// On a Redis Cluster, which master serves each request of a batch (the client's slot table), and whether the
// masters run the scripts' cross-slot variants (lua/cross-slot.lua, Redis 7.0 and later), so that
// RedisStore.decideMany sends one call per master.

/**
 * Whether the cross-slot variants can run: unknown until the masters' versions are read (`INFO server`, once
 * per store), then yes (every master 7.0 or later) or no. Until it is known, and when not, each request of a
 * batch is a call of its own.
 */
type CrossSlot = 'unknown' | 'asking' | 'yes' | 'no'

/**
 * A whole call's error that says a key of it is not served where the call went: a redirection of its first key
 * (MOVED, ASK, TRYAGAIN as ioredis gives them up), CROSSSLOT, or the one Redis raises inside a cross-slot
 * script (lua/cross-slot.lua checks every key before writing anything).
 */
const ELSEWHERE = /^(MOVED|ASK|TRYAGAIN|CROSSSLOT)\b|Script attempted to access a non local key/
/** A cross-slot script refused as a script (a master older than 7.0 that the version check did not see). */
const UNSUPPORTED = /Error compiling script|shebang|Unexpected flag/i
/** After a failed read of the versions (a master unreachable, INFO refused), how long until the next try. */
const RETRY_MS = 1000

export class Masters {
  readonly #cluster: Cluster
  #crossSlot: CrossSlot = 'unknown'
  /** Not before this (Date.now()) is the next read of the versions. */
  #notBefore = 0

  constructor (cluster: Cluster) {
    this.#cluster = cluster
  }

  /**
   * The positions of `inputs` by the master that serves their keys' slot; each alone while the cross-slot
   * scripts cannot run, or when the table names no master for its slot.
   */
  groups (inputs: readonly DecideInput[]): number[][] {
    if (this.#crossSlot !== 'yes') {
      if (this.#crossSlot === 'unknown' && Date.now() >= this.#notBefore) this.#askVersions()
      return inputs.map((_, i) => [i])
    }
    const slots = this.#cluster.slots
    const groups = new Map<string, number[]>()
    const alone: number[][] = []
    inputs.forEach((input, i) => {
      const master = slots[keySlot(input.keys.log)]?.[0]
      if (master === undefined) alone.push([i])
      else if (groups.has(master)) groups.get(master)!.push(i)
      else groups.set(master, [i])
    })
    return [...groups.values(), ...alone]
  }

  /**
   * Whether a cross-slot call's error says to decide its requests one by one: a key of it served elsewhere
   * (the call wrote nothing: lua/cross-slot.lua checks every key first), or the script refused by a master
   * too old for it, which then stops the cross-slot calls.
   */
  elsewhere (err: unknown): boolean {
    const message = err instanceof Error ? err.message : ''
    if (!UNSUPPORTED.test(message)) return ELSEWHERE.test(message)
    this.#crossSlot = 'no'
    return true
  }

  /**
   * Reads every master's version, once, or again a second after a failure (so an INFO an ACL refuses is asked
   * once a second, not once a batch): the cross-slot scripts need Redis 7.0.
   */
  #askVersions (): void {
    if (this.#cluster.status !== 'ready') return
    this.#crossSlot = 'asking'
    Promise.all(this.#cluster.nodes('master').map(async node => await node.info('server'))).then(infos => {
      const majors = infos.map(info => Number(/^redis_version:(\d+)\./m.exec(info)?.[1]))
      this.#crossSlot = majors.length > 0 && majors.every(major => major >= 7) ? 'yes' : 'no'
    }, () => {
      this.#crossSlot = 'unknown'
      this.#notBefore = Date.now() + RETRY_MS
    })
  }
}
