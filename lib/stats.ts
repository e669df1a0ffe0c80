import type { Outcome } from './channels.js'
import type { ShedSnapshot } from './shed/shedder.js'

/** What `fastify.rateGuard.stats()` gives: this instance's decisions by outcome, since it started. */
export interface StatsSnapshot {
  /** When counting started (the registration), ISO 8601. */
  readonly since: string
  readonly decisions: Readonly<Record<Outcome, number>>
  /**
   * Ghosts: requests Redis counted whose answer came after the deadline, so failMode answered them (let
   * through unenforced, refused 503, or decided in process) while Redis holds them as allowed.
   */
  readonly ghosts: number
  /** The load shedder's state now (`shed`), when the registration has one. */
  readonly shed?: ShedSnapshot
}

const OUTCOMES: readonly Outcome[] = [
  'allowed', 'limited', 'banned', 'ban-started', 'too-costly', 'in-flight', 'waiting-full', 'unenforced', 'unavailable',
  'shadow-limited', 'shadow-banned', 'shadow-ban-started', 'shed', 'shadow-shed'
]

/** One registration's decisions by outcome, counted in this process (one increment a decision). */
export class DecisionStats {
  readonly #since = Date.now()
  readonly #counts = Object.fromEntries(OUTCOMES.map(outcome => [outcome, 0])) as Record<Outcome, number>

  #ghosts = 0
  #shed: (() => ShedSnapshot) | undefined

  count (outcome: Outcome): void {
    this.#counts[outcome]++
  }

  ghost (): void {
    this.#ghosts++
  }

  /** The load shedder whose state the snapshot carries. */
  shedding (snapshot: () => ShedSnapshot): void {
    this.#shed = snapshot
  }

  snapshot (): StatsSnapshot {
    const made = { since: new Date(this.#since).toISOString(), decisions: { ...this.#counts }, ghosts: this.#ghosts }
    return this.#shed === undefined ? made : { ...made, shed: this.#shed() }
  }
}

/** Several registrations' snapshots as one: counts added, from the earliest start. */
export function combined (snapshots: readonly StatsSnapshot[]): StatsSnapshot {
  const decisions = Object.fromEntries(OUTCOMES.map(outcome =>
    [outcome, snapshots.reduce((sum, s) => sum + s.decisions[outcome], 0)])) as Record<Outcome, number>
  const since = snapshots.map(s => s.since).sort()[0]!
  const shed = snapshots.find(s => s.shed !== undefined)?.shed
  const made = { since, decisions, ghosts: snapshots.reduce((sum, s) => sum + s.ghosts, 0) }
  return shed === undefined ? made : { ...made, shed }
}
