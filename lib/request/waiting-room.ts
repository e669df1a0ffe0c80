// The room where a registration's requests wait (`maxWait`): every budget and client together, at most
// `maxWaiting` at once (lib/options/wait.ts says why 1000 by default). A place is taken when a request starts
// to wait and freed when its wait ends or its client leaves (./wait.ts); one registration, one room.

/** The requests waiting at once in one registration, all its budgets together: at most `size`. */
export class WaitingRoom {
  readonly size: number
  #taken = 0

  constructor (size: number) {
    this.size = size
  }

  /** Takes a place, if one is free. */
  enter (): boolean {
    if (this.#taken >= this.size) return false
    this.#taken++
    return true
  }

  leave (): void {
    this.#taken--
  }
}
