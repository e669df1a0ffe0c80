import { fixedWindow } from './fixed-window.js'
import { slidingLog } from './sliding-log.js'
import { slidingWindow } from './sliding-window.js'
import { tokenBucket } from './token-bucket.js'
import type { Step } from './step.js'

// The algorithms a budget can count with. Each is one `lua/<name>.lua` script and one in-process twin
// (a `Step` in this folder) with the same reply; the ban and strike rules around them are shared.

export type Algorithm = 'sliding-log' | 'fixed-window' | 'sliding-window' | 'token-bucket'

export const ALGORITHMS: readonly Algorithm[] = ['sliding-log', 'fixed-window', 'sliding-window', 'token-bucket']

export const DEFAULT_ALGORITHM: Algorithm = 'sliding-log'

/**
 * The name of a budget's state key under the identity's hash tag: `log:<scope>`, `fw:`, `sw:`, `tb:`.
 * Each algorithm has its own, so switching a route's algorithm starts a fresh count instead of meeting a key
 * of another type (a WRONGTYPE error on every request until it expired).
 */
export const STATE_SEGMENT: Readonly<Record<Algorithm, string>> = Object.freeze({
  'sliding-log': 'log',
  'fixed-window': 'fw',
  'sliding-window': 'sw',
  'token-bucket': 'tb'
})

/** The in-process twins, by algorithm. */
export const STEPS: Readonly<Record<Algorithm, Step>> = Object.freeze({
  'sliding-log': slidingLog,
  'fixed-window': fixedWindow,
  'sliding-window': slidingWindow,
  'token-bucket': tokenBucket
})

export type { CalendarPeriods, Counted, Entry, Limit, State, Step } from './step.js'
export { largest, longest } from './step.js'
export { quotasAt, quotasCount, quotasFit, quotasOverridden, quotasSettle } from './quota.js'
export type { Quota } from './quota.js'
