import type { Cluster } from 'ioredis'
import { keySlot } from '../slots.js'
import type { DecideInput } from './store.js'

// On a Redis Cluster, which master serves each request of a batch (the client's slot table), and whether the
// masters run the scripts' cross-slot variants (lua/cross-slot.lua, Redis 7.0 and later), so that
// RedisStore.decideMany sends one call per master.

/**
 * A whole call's error that says a key of it is not served where the call went: a redirection of its first key
 * (MOVED, ASK, TRYAGAIN as ioredis gives them up, or ioredis's own error once it has followed as many as it may,
 * the last a redirection: an ASK to a node that had not loaded the script, whose EVAL ioredis re-sends without
 * ASKING, goes round), CROSSSLOT, or the one Redis raises inside a cross-slot script (lua/cross-slot.lua checks
 * every key before writing anything). None of them ran the script to its first write.
 */
const ELSEWHERE = new RegExp([
  String.raw`^(MOVED|ASK|TRYAGAIN|CROSSSLOT)\b`,
  String.raw`^Too many Cluster redirections\. Last error: ReplyError: (MOVED|ASK|TRYAGAIN)\b`,
  'Script attempted to access a non local key'
].join('|'))
/**
 * A cross-slot script refused as a script: a server that does not know script flags (Redis below 7.0 reads the
 * shebang as Lua, "unexpected symbol near '#'") or this one.
 */
const UNSUPPORTED = /Error compiling script|shebang|Unexpected flag/i

export class Masters {
  readonly #cluster: Cluster
  /**
   * Whether the cross-slot variants run: assumed until a master refuses one (its first call fails, having run
   * nothing, and its requests are decided one by one), then never again for this store. No version is read:
   * an ACL may refuse INFO, and a server's version says less than whether it runs the script.
   */
  #crossSlot = true

  constructor (cluster: Cluster) {
    this.#cluster = cluster
  }

  /**
   * The positions of `inputs` by the master that serves their keys' slot; each alone once the cross-slot
   * scripts are known not to run, or when the table names no master for its slot (before the client is ready,
   * or while a slot is unassigned).
   */
  groups (inputs: readonly DecideInput[]): number[][] {
    if (!this.#crossSlot) return inputs.map((_, i) => [i])
    const groups = new Map<string, number[]>()
    const alone: number[][] = []
    inputs.forEach((input, i) => {
      const master = this.masterOf(input)
      if (master === undefined) alone.push([i])
      else if (groups.has(master)) groups.get(master)!.push(i)
      else groups.set(master, [i])
    })
    return [...groups.values(), ...alone]
  }

  /** The master that serves `input`'s keys by the client's slot table (`host:port`), or undefined when it names none. */
  masterOf (input: DecideInput): string | undefined {
    return this.#cluster.slots[keySlot(input.keys.log)]?.[0]
  }

  /**
   * Whether a cross-slot call's error says to decide its requests one by one: a key of it served elsewhere
   * (the call wrote nothing: lua/cross-slot.lua checks every key first), or the script refused by a master
   * that cannot run it, which ends the cross-slot calls.
   */
  elsewhere (err: unknown): boolean {
    const message = err instanceof Error ? err.message : ''
    if (!UNSUPPORTED.test(message)) return ELSEWHERE.test(message)
    this.#crossSlot = false
    return true
  }
}
