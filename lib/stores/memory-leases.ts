import { leaseDecision } from './decisions.js'
import type { LeaseFacts } from './decisions.js'
import type { DecideInput, Decision, Held, LeaseInput, LeaseStore } from './store.js'
import type { BanPolicy } from '../types.js'

// The in-process twin of lua/lease.lua: a client's leases on a budget, in this process, answered as the script
// answers (the same facts, built into a decision by the same builder, ./decisions.ts), on this process's clock.
// Bans and strikes are the in-process store's (`Bans`), so a ban started here holds for its decisions too. It
// holds only requests in flight in this process, each until it is released or its lease ends: what it holds is
// bounded by them.

/** What the in-process store lends the twin: its bans and strikes. */
export interface Bans {
  banLeft: (bannedKey: string, now: number) => number
  strike: (keys: DecideInput['keys'], ban: BanPolicy, now: number, strikeWindow: number) =>
    { duration: number, offence: number } | undefined
}

interface Lease {
  readonly units: number
  endsAt: number
}

/** The units of `leases`. */
function unitsOf (leases: Map<string, Lease> | undefined): number {
  let units = 0
  for (const lease of leases?.values() ?? []) units += lease.units
  return units
}

export class MemoryLeases implements LeaseStore {
  /** Per key, its leases by request id. */
  readonly #leases = new Map<string, Map<string, Lease>>()
  readonly #bans: Bans
  readonly #now: () => number

  constructor (bans: Bans, now: () => number) {
    this.#bans = bans
    this.#now = now
  }

  acquire (input: LeaseInput): Decision {
    return leaseDecision(this.#acquire(input), input)
  }

  #acquire ({ keys, id, units, max, leaseMs, ban, strikeWindowMs }: LeaseInput): LeaseFacts {
    const now = this.#now()
    const banned = this.#bans.banLeft(keys.banned, now)
    if (banned > 0) return { outcome: 'found-banned', inUse: 0, retry: banned, offence: 0, at: now }
    const leases = this.#live(keys.leases, now)
    const inUse = unitsOf(leases)
    if (units > max) return { outcome: 'never-fits', inUse, retry: 0, offence: 0, at: now }
    if (inUse + units <= max) {
      if (leases === undefined) this.#leases.set(keys.leases, new Map([[id, { units, endsAt: now + leaseMs }]]))
      else leases.set(id, { units, endsAt: now + leaseMs })
      return { outcome: 'taken', inUse: inUse + units, retry: 0, offence: 0, at: now }
    }
    const started = ban === null ? undefined : this.#bans.strike(keys, ban, now, strikeWindowMs)
    if (started === undefined) return { outcome: 'refused', inUse, retry: 0, offence: 0, at: now }
    return { outcome: 'ban-started', inUse, retry: started.duration, offence: started.offence, at: now }
  }

  release ({ key, id, units }: Held): number {
    const leases = this.#leases.get(key)
    if (leases?.delete(id) !== true) return 0
    if (leases.size === 0) this.#leases.delete(key)
    return units
  }

  /** Renews `held`'s leases; one found gone (it ended) is written back, as the script does: the units written back. */
  renew (key: string, held: readonly Held[], leaseMs: number): number {
    const now = this.#now()
    let leases = this.#live(key, now)
    if (leases === undefined) this.#leases.set(key, leases = new Map())
    let restored = 0
    for (const { id, units } of held) {
      const lease = leases.get(id)
      if (lease !== undefined) lease.endsAt = now + leaseMs
      else {
        leases.set(id, { units, endsAt: now + leaseMs })
        restored += units
      }
    }
    return restored
  }

  inUse (key: string): number {
    return unitsOf(this.#live(key, this.#now()))
  }

  /** The leases at `key` that have not ended (a lease ends at its last millisecond, as the script's `-inf now`). */
  #live (key: string, now: number): Map<string, Lease> | undefined {
    const leases = this.#leases.get(key)
    if (leases === undefined) return undefined
    for (const [id, lease] of leases) if (lease.endsAt <= now) leases.delete(id)
    if (leases.size > 0) return leases
    this.#leases.delete(key)
    return undefined
  }

  /** Drops the leases that have ended (their holders stopped renewing them). */
  sweep (now: number): void {
    for (const key of [...this.#leases.keys()]) this.#live(key, now)
  }
}
