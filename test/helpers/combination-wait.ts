// The model of /wait in test/combination.test.ts: a sliding log of WAIT.windowMs (test/helpers/combination-app.ts)
// on the app's clock, which the test holds still during a decision, so every answer is known before it comes.
// A request that fits its window is let through at once, its place now; one that would fit once enough places
// have left waits for that (no longer than WAIT.maxWaitMs, and only while fewer than WAIT.maxQueue of its
// client's places lie ahead of the clock), its place counted at its wait's end; any other is refused (429).
// A client that leaves while it waits gives its place back, and the log forgets it.
import { ROUTES, WAIT } from './combination-app.js'

/** What /wait must answer a request: let through at once, after `ms`, or refused. */
export type WaitAnswer = { readonly kind: 'now' } | { readonly kind: 'waits', readonly ms: number } | { readonly kind: 'refused' }

interface Place {
  readonly at: number
  readonly id: string
}

export class WaitLog {
  /** Per scope and client, the places counted, oldest first (a place ahead of the clock is a request waiting). */
  readonly #places = new Map<string, Place[]>()

  /** Decides request `id` of `who` (its scope and client) at `now`, as the route must, and keeps its place. */
  decide (who: string, now: number, id: string): WaitAnswer {
    const places = this.#places.get(who) ?? []
    this.#places.set(who, places)
    const max = ROUTES['/wait'].max
    const counted = places.filter(place => place.at > now - WAIT.windowMs)
    if (counted.length < max) {
      this.#keep(places, { at: now, id })
      return { kind: 'now' }
    }
    // The place it waits for: once the oldest counted places that hold it off have left the window.
    const ms = counted[counted.length - max]!.at + WAIT.windowMs - now
    const ahead = places.filter(place => place.at > now).length
    if (ms > WAIT.maxWaitMs || ahead >= WAIT.maxQueue) return { kind: 'refused' }
    this.#keep(places, { at: now + ms, id })
    return { kind: 'waits', ms }
  }

  /** Request `id` left while it waited: its place is given back. */
  leave (who: string, id: string): void {
    const places = this.#places.get(who) ?? []
    const at = places.findIndex(place => place.id === id)
    if (at !== -1) places.splice(at, 1)
  }

  /** For a report: `who`'s places, in ms from `now`, and the requests that took them. */
  describe (who: string, now: number): string {
    return (this.#places.get(who) ?? []).map(({ at, id }) => `${id} at ${at - now}`).join(', ')
  }

  #keep (places: Place[], place: Place): void {
    let i = places.length
    while (i > 0 && places[i - 1]!.at > place.at) i--
    places.splice(i, 0, place)
  }
}
