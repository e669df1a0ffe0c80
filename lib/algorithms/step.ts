/** What an in-process twin of one script is: the counting part, without the ban and strike rules around it. */

/** A budget's state in the in-process store; it is forgotten at `expiresAt` (the script's key TTL). */
export interface State {
  expiresAt: number
}

export interface StepResult {
  readonly allowed: boolean
  /** As in the script's reply: the count after this decision, ms until reset, ms until a retry may pass. */
  readonly count: number
  readonly reset: number
  readonly retry: number
  /** The state to store under the budget's key, when the step made a new one; otherwise nothing is written. */
  readonly state?: State
}

/**
 * One decision on a budget's live state (`undefined`: none, or expired) at `now`. A peek or a denial never
 * changes the count; a step may mutate `state` in place.
 */
export type Step = (state: State | undefined, max: number, window: number, now: number, peek: boolean) => StepResult
