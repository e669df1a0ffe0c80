// The load shedder's part of the model of test/combination.test.ts (test/helpers/combination-model.ts calls it for
// every request, before anything else): the shedder of test/helpers/combination-app.ts has a fixed capacity of
// SHED.inFlight requests and no signal but that, and the app counts what is in flight itself (a request the
// shedder let in, until its handler and its response are over), so whether a request is shed is known from that
// count alone: a capacity full is no pressure on the classes' admitted shares, which stay whole (read on the
// decision channel, when it sheds). The rules:
//
//   shed        an exempt request is never shed; a critical one exactly when SHED.inFlight requests are in
//               flight; a normal one exactly from SHED_LINE (SHED.inFlight less its reserve), a sheddable one
//               exactly from SHEDDABLE_LINE (less the reserve again): the lowest class first.
//               A request shed is answered 503 FST_RATE_GUARD_SHED with `Retry-After: 1`, its handler never
//               runs, and it counts nowhere (the model counts it on no budget: the answers that come after
//               prove it); its decision message names its class and the in-flight reason. In shadow mode the
//               same decisions are reported (`shadow-shed`) and the request goes on, counted as any other.
//   in flight   the shedder's own count, as it decides, is the app's (within what the plugin hears a turn
//               later): nothing shed is in flight, nothing let in is left out, and nothing stays after its end.
import { PRIORITY, SHED, SHED_LINE, SHEDDABLE_LINE } from './combination-app.js'
import type { Arrival, Path, ShedSeen } from './combination-app.js'

export const SHED_INVARIANTS = {
  shed: 'exempt never shed; critical shed exactly with the capacity in flight, normal from the reserve\'s line, sheddable from the ' +
    'line below it; the shares stay whole; a shed request is a 503 with Retry-After that runs nothing and counts nowhere',
  inFlight: 'the shedder counts in flight exactly the requests it let in whose handler or response is not over'
} as const
export type ShedInvariant = keyof typeof SHED_INVARIANTS
type Fail = (invariant: ShedInvariant, why: string) => void

/** What the model saw of a request's passage through the shedder. */
export interface ShedStep {
  readonly path: Path
  readonly arrival: Arrival | undefined
  readonly shed: ShedSeen | undefined
  /** Its answer's status (null: none yet, or none), and whether its handler ran. */
  readonly status: number | null
  readonly ran: boolean
  /** Its answer's Retry-After and error code, when the test read them (not on a socket it hung up). */
  readonly read: { readonly retryAfter: string | undefined, readonly code: string | null } | undefined
}

const range = ({ lower, upper }: Arrival): string => lower === upper ? String(lower) : `${lower} to ${upper}`

export class ShedRules {
  readonly #shadow: boolean
  readonly #fail: Fail
  readonly #reach: (kind: string) => void
  constructor (shadow: boolean, fail: Fail, reach: (kind: string) => void) {
    this.#shadow = shadow
    this.#fail = fail
    this.#reach = reach
  }

  /** Checks a request's passage; true when it was shed (enforced: it counts nowhere, and nothing else is checked). */
  observe (step: ShedStep, fail: Fail = this.#fail): boolean {
    const { arrival, shed } = step
    if (arrival === undefined) {
      // It never reached the server's hooks (hung up first).
      if (shed !== undefined) fail('shed', 'shed, though the app never saw it arrive')
      return false
    }
    const { counted, lower, upper } = arrival
    if (counted < lower || counted > upper) fail('inFlight', `the shedder counted ${counted} in flight, the app ${range(arrival)}`)
    const priority = PRIORITY[step.path] ?? 'normal'
    if (shed === undefined) {
      // Let in: in flight from now on.
      const line = lineOf(priority)
      if (lower >= line) fail('shed', `${priority}, ${range(arrival)} in flight: let in at or past ${line}`)
      if (priority === 'critical' && lower >= SHED_LINE) this.#reach('a critical request admitted past the others\' share')
      if (priority === 'exempt' && lower >= SHED_LINE) this.#reach('an exempt request admitted past the others\' share')
      if (priority === 'normal' && lower >= SHEDDABLE_LINE) this.#reach('a normal request admitted past the sheddable share')
      return false
    }
    this.#shed(step, arrival, shed, fail)
    if (this.#shadow) return false
    const { read } = step
    if (step.status !== 503 || step.ran) fail('shed', `answered ${String(step.status)}${step.ran ? ', its handler ran' : ''}, though shed`)
    if (read !== undefined && (read.retryAfter !== '1' || read.code !== 'FST_RATE_GUARD_SHED')) {
      fail('shed', `answered with Retry-After ${String(read.retryAfter)} and the code ${String(read.code)}`)
    }
    return true
  }

  /** A request shed (or, in shadow mode, reported): whether its class, the count and the shares allowed it. */
  #shed ({ path }: ShedStep, arrival: Arrival, { outcome, reason, admitted, priority: said }: ShedSeen, fail: Fail): void {
    const priority = PRIORITY[path] ?? 'normal'
    const line = lineOf(priority)
    const what = `${priority}, ${range(arrival)} in flight`
    // No signal is read, and a full capacity is no pressure: the shares stay whole.
    if (admitted.normal < 1 || admitted.sheddable < 1) fail('shed', `shares ${admitted.normal} (normal), ${admitted.sheddable} (sheddable)`)
    if (said !== priority) fail('shed', `shed as ${String(said)}, its route's class is ${priority}`)
    if (reason !== 'in-flight') fail('shed', `shed for ${String(reason)}: no signal but in flight is read`)
    if (outcome !== (this.#shadow ? 'shadow-shed' : 'shed')) fail('shed', `outcome ${outcome} (shadow mode: ${String(this.#shadow)})`)
    if (priority === 'exempt') fail('shed', `${what}: an exempt request shed`)
    else if (arrival.upper < line) fail('shed', `${what}: shed below ${line}`)
    this.#reach(this.#shadow ? 'a request shed in shadow mode, let through' : 'a request shed')
    this.#reach(`shed: ${priority}`)
    if (priority === 'sheddable' && arrival.upper < SHED_LINE) this.#reach('a sheddable request shed below the normal line')
  }
}

/** The in-flight count from which a request of `priority` is shed (exempt: never). */
function lineOf (priority: string): number {
  return priority === 'critical' ? SHED.inFlight : priority === 'normal' ? SHED_LINE : priority === 'sheddable' ? SHEDDABLE_LINE : Infinity
}
