// The operator page's (lib/operator/page.ts) decisions per second over the last few minutes, by outcome and by budget: counted from
// the rate-guard:decision channel (one message per decision, carrying its `outcome` and `budget`) into a ring
// of one slot per second. Its memory is bounded whatever the traffic: SECONDS + 1 slots (the seconds shown and
// the one still running), each with at most one count per outcome (the plugin has fourteen, the load shedder's
// `shed` and `shadow-shed` among them: lib/stats.ts lists them) and BUDGETS budgets,
// past which a second's other budgets are counted together as OTHER.

/** How many whole seconds the page shows, and over how many of the last ones a budget's rate is averaged. */
export const SECONDS = 180
export const RECENT = 10
/** Budgets counted by name in one second at most; the rest of that second's are one row, OTHER. */
export const BUDGETS = 20
export const OTHER = '(other budgets)'

/**
 * The outcomes that refused a client for its traffic (not 'unavailable': Redis was; nor 'shed': the process was
 * overloaded, whoever asked; shadow ones let it through).
 */
export const REFUSED: ReadonlySet<string> = new Set(['limited', 'banned', 'ban-started', 'too-costly', 'in-flight', 'waiting-full'])

interface Slot {
  second: number
  outcomes: Map<string, number>
  budgets: Map<string, { decisions: number, refused: number }>
}

/** A budget's rates in a snapshot: per second over the last RECENT seconds, and decisions over the window. */
export interface BudgetRate { budget: string, perSecond: number, refusedPerSecond: number, decisions: number }

/** What `DecisionSeries.snapshot()` gives (see there). */
export interface SeriesSnapshot {
  end: number
  seconds: number
  recent: number
  outcomes: Record<string, number[]>
  budgets: BudgetRate[]
}

/** Decisions per second, by outcome and by budget, over the last SECONDS seconds (a bounded ring). */
export class DecisionSeries {
  #slots: Slot[] = Array.from({ length: SECONDS + 1 }, () => ({ second: -1, outcomes: new Map(), budgets: new Map() }))
  #now: () => number

  /** @param now the clock, in ms */
  constructor (now: () => number = Date.now) {
    this.#now = now
  }

  /** Counts one decision in the running second. */
  count ({ outcome, budget }: { outcome: string, budget: string }): void {
    const second = Math.floor(this.#now() / 1000)
    const slot = this.#slots[second % this.#slots.length]!
    if (slot.second !== second) {
      slot.second = second
      slot.outcomes.clear()
      slot.budgets.clear()
    }
    slot.outcomes.set(outcome, (slot.outcomes.get(outcome) ?? 0) + 1)
    const name = slot.budgets.has(budget) || slot.budgets.size < BUDGETS ? budget : OTHER
    const counts = slot.budgets.get(name) ?? { decisions: 0, refused: 0 }
    counts.decisions++
    if (REFUSED.has(outcome)) counts.refused++
    slot.budgets.set(name, counts)
  }

  /**
   * The last SECONDS whole seconds (the running one is left out: its count is not done), oldest first:
   * `end` is when the last one ended (ms), `outcomes` each outcome's decisions in each second (an outcome with
   * none in the window is left out), `budgets` each budget's decisions and refusals per second over the last
   * RECENT seconds and its decisions over the whole window, the busiest BUDGETS first.
   */
  snapshot (): SeriesSnapshot {
    const end = Math.floor(this.#now() / 1000)
    const first = end - SECONDS
    const outcomes: Record<string, number[]> = {}
    const budgets = new Map<string, { budget: string, decisions: number, recent: number, recentRefused: number }>()
    for (const slot of this.#slots) {
      if (slot.second < first || slot.second >= end) continue
      const at = slot.second - first
      for (const [outcome, n] of slot.outcomes) (outcomes[outcome] ??= new Array<number>(SECONDS).fill(0))[at] = n
      const recent = at >= SECONDS - RECENT
      for (const [budget, counts] of slot.budgets) {
        const sums = budgets.get(budget) ?? { budget, decisions: 0, recent: 0, recentRefused: 0 }
        sums.decisions += counts.decisions
        if (recent) {
          sums.recent += counts.decisions
          sums.recentRefused += counts.refused
        }
        budgets.set(budget, sums)
      }
    }
    return {
      end: end * 1000,
      seconds: SECONDS,
      recent: RECENT,
      outcomes,
      budgets: [...budgets.values()]
        .sort((a, b) => b.recent - a.recent || b.decisions - a.decisions)
        .slice(0, BUDGETS)
        .map(({ budget, decisions, recent, recentRefused }) =>
          ({ budget, perSecond: recent / RECENT, refusedPerSecond: recentRefused / RECENT, decisions }))
    }
  }
}
