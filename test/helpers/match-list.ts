// tap's t.match on an array checks the entries its pattern lists and lets any more through: a pattern of one
// entry passes a list of three. matchList checks the list holds exactly as many entries as patterns, each
// matching its own, so "logged once" means one line.
import type { Test } from 'tap'

export function matchList (t: Test, actual: readonly unknown[], patterns: readonly unknown[], message = 'the list'): void {
  t.equal(actual.length, patterns.length, `${message}: exactly ${patterns.length} ${patterns.length === 1 ? 'entry' : 'entries'}`, { entries: actual })
  t.match(actual, patterns, message)
}
