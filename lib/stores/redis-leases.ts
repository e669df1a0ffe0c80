import { traced } from '../channels.js'
import type { RedisLike } from '../types.js'
import { toLeaseDecision } from './leases.js'
import type { Decision, Held, LeaseInput, LeaseStore } from './store.js'
import { LEASE_SCRIPT, defineScript, located } from './scripts.js'
import type { Clock, Locking } from './scripts.js'

// `concurrency`'s leases in Redis: one call of lua/lease.lua per request taken or given back, and one per key
// renewed (its keys are one identity's, so one slot: a call goes to its master on a Cluster as it is).

export class RedisLeases implements LeaseStore {
  readonly #call: (...keysAndArgv: Array<string | number>) => Promise<unknown>
  readonly #nameSpace: string
  /** The ban index a ban started here is entered in (lib/stores/ban-index.ts). */
  readonly #index: (banned: string) => string

  constructor (
    client: RedisLike, nameSpace: string, index: (banned: string) => string, clock: Clock = 'redis', locking: Locking = 'global',
    functions = true
  ) {
    this.#call = defineScript(client, LEASE_SCRIPT, clock, locking, functions)
    this.#nameSpace = nameSpace
    this.#index = index
  }

  async acquire (input: LeaseInput): Promise<Decision> {
    return toLeaseDecision(await this.#run('acquire', input.algorithm, 1, acquireArgs(input, this.#index)), input)
  }

  async release (held: Held): Promise<number> {
    return Number(await this.#run('release', held.algorithm, 1, releaseArgs(held)))
  }

  async renew (key: string, held: readonly Held[], leaseMs: number): Promise<number> {
    return Number(await this.#run('renew', held[0]!.algorithm, held.length, renewArgs(key, held, leaseMs)))
  }

  async inUse (key: string): Promise<number> {
    return Number(await this.#call(1, key, 'count'))
  }

  async #run (mode: string, algorithm: Held['algorithm'], batchSize: number, args: Array<string | number>): Promise<unknown> {
    try {
      return await traced(() => ({ nameSpace: this.#nameSpace, mode, algorithm, batchSize }), () => this.#call(...args))
    } catch (err) {
      throw located(LEASE_SCRIPT, err)
    }
  }
}

/** The keys and arguments of lua/lease.lua taking `input`'s leases (its header): the number of keys first. */
export function acquireArgs (
  { keys, id, units, max, leaseMs, ban, strikeWindowMs }: LeaseInput, index: (banned: string) => string
): Array<string | number> {
  return ban === null
    ? [2, keys.leases, keys.banned, 'acquire', id, units, max, leaseMs]
    : [
        5, keys.leases, keys.banned, keys.strikes, keys.offences, index(keys.banned),
        'acquire', id, units, max, leaseMs, ban.threshold, ban.ladder.join(' '), ban.forgetMs, strikeWindowMs
      ]
}

export function releaseArgs ({ key, id, units }: Held): Array<string | number> {
  return [1, key, 'release', id, units]
}

export function renewArgs (key: string, held: readonly Held[], leaseMs: number): Array<string | number> {
  return [1, key, 'renew', leaseMs, held.length, ...held.flatMap(({ id, units }) => [id, units])]
}
