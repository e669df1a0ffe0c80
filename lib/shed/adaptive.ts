import type { ResolvedAdaptive } from '../options/shed.js'

// The in-flight capacity adapted to latency (`shed.inFlight: { floor, ceiling }`): how many requests the
// process lets run at once, found from how long they take. A gradient rule, after Netflix's concurrency-limits
// and Envoy's adaptive concurrency filter, on one sample interval's requests at a time:
// - the no-load latency (`minRtt`) is the lowest mean latency of an interval seen since it was last measured;
// - an interval whose mean latency is within `tolerance` of it (1.1: 10% over) shows no queue: the limit grows
//   by max(1, 5%), but only while the requests in flight reached half of it (an idle process proves nothing);
// - one whose latency is past it shows a queue: the limit is multiplied by tolerance × minRtt / latency (at
//   least by 0.5), which puts it where the latency would be back within tolerance, if the queue is the cause;
// - when the limit came down three intervals in a row, by a third or more, and the latency did not (the work
//   itself got slower, not the queue longer), and every `probeMs` anyway, the no-load latency is measured
//   again: the limit is held at `floor` until `floor` requests admitted since have completed (2 s at most),
//   their mean taken as the new minRtt, and the limit put back where it was before it came down if the work
//   did get slower (else where the cuts left it: a queue's latency lags the limit by the requests still in
//   it); likewise when an interval is a third faster than no load was (the work got faster: that interval's
//   latency still holds the old queue).
// The limit settles where the latency is `tolerance` over no load: past the knee where requests start to
// queue by about the tolerance. All within `floor` and `ceiling`.

/** The limit grows by this share of itself (at least 1) an interval. */
const GROWTH = 0.05
/** At most this cut an interval. */
const LEAST_FACTOR = 0.5
/** Intervals in a row the limit came down, latency not, before the no-load latency is measured again. */
const DOWNS_TO_PROBE = 3
/** How far the limit came down (a share of where it was) before a latency that did not is a probe's reason. */
const PROBE_CUT = 1 / 3
/** A probe lasts at most this long. */
const LONGEST_PROBE_MS = 2000

interface Probe {
  readonly since: number
  /** Where the limit goes back to if the work got slower (the no-load latency measured past tolerance of the last). */
  readonly restore: number
  /** Where it goes back to otherwise: the limit as the probe began. */
  readonly current: number
  sum: number
  count: number
}

export class AdaptiveLimit {
  readonly #options: ResolvedAdaptive
  #limit: number
  #minRtt = Infinity
  #lastProbe: number
  #probe: Probe | null = null
  /** The intervals in a row the limit came down, the limit before the first of them, and that interval's latency. */
  #downs = 0
  #before = 0
  #rttBefore = 0
  /** This interval's completed requests: their latencies' sum, and how many. */
  #sum = 0
  #count = 0

  constructor (options: ResolvedAdaptive, now: number) {
    this.#options = options
    this.#limit = options.floor
    this.#lastProbe = now
  }

  /** The requests allowed in flight now. */
  get limit (): number {
    return this.#probe === null ? Math.floor(this.#limit) : this.#options.floor
  }

  /** The limit outside a probe (during one, where it goes back to): what the critical class may use all the same. */
  get held (): number {
    return Math.floor(this.#probe?.restore ?? this.#limit)
  }

  /** Whether the no-load latency is being measured (the limit held at its floor). */
  get probing (): boolean {
    return this.#probe !== null
  }

  /** The no-load latency as measured (Infinity until a sample is). */
  get minRtt (): number {
    return this.#minRtt
  }

  /** A request admitted at `admittedAt` completed after `rttMs`. */
  completed (rttMs: number, admittedAt: number): void {
    const probe = this.#probe
    if (probe !== null && admittedAt >= probe.since) {
      probe.sum += rttMs
      probe.count++
    }
    this.#sum += rttMs
    this.#count++
  }

  /** An interval ended at `now`, in which at most `peak` requests were in flight at once. */
  sample (now: number, peak: number): void {
    const count = this.#count
    const rtt = count === 0 ? 0 : this.#sum / count
    this.#sum = 0
    this.#count = 0
    if (this.#probe !== null) return this.#probing(now)
    if (count === 0) return
    if (now - this.#lastProbe >= this.#options.probeMs) return this.#startProbe(now, this.#limit)
    // Far faster than no load was: the work got faster, and this interval's latency still holds its queue.
    if (this.#minRtt !== Infinity && rtt < (1 - PROBE_CUT) * this.#minRtt) return this.#startProbe(now, this.#limit)
    this.#minRtt = Math.min(this.#minRtt, rtt)
    const { tolerance, floor, ceiling } = this.#options
    const over = rtt / (tolerance * this.#minRtt)
    if (over <= 1) {
      this.#downs = 0
      if (peak * 2 >= this.#limit) this.#limit = Math.min(ceiling, this.#limit + Math.max(1, this.#limit * GROWTH))
      return
    }
    if (this.#downs === 0) {
      this.#before = this.#limit
      this.#rttBefore = rtt
    }
    this.#downs++
    this.#limit = Math.max(floor, this.#limit * Math.max(LEAST_FACTOR, 1 / over))
    // Cut by a third or more over three intervals or more, and the latency not: the work got slower, not the queue longer.
    const cut = this.#limit <= (1 - PROBE_CUT) * this.#before
    if (this.#downs >= DOWNS_TO_PROBE && cut && rtt >= 0.9 * this.#rttBefore) this.#startProbe(now, this.#before)
  }

  #startProbe (now: number, restore: number): void {
    this.#probe = { since: now, restore, current: this.#limit, sum: 0, count: 0 }
    this.#downs = 0
  }

  #probing (now: number): void {
    const probe = this.#probe!
    const done = probe.count >= this.#options.floor
    if (!done && now - probe.since < LONGEST_PROBE_MS) return
    this.#probe = null
    this.#lastProbe = now
    const measured = done ? probe.sum / probe.count : this.#minRtt
    // The work got slower: the limit before it came down was right. Else the queue was the cause (its latency lags
    // the limit by the requests still queued): the limit the cuts came to stands.
    const slower = measured > this.#options.tolerance * this.#minRtt
    this.#minRtt = measured
    this.#limit = Math.max(this.#options.floor, Math.min(this.#options.ceiling, slower ? probe.restore : probe.current))
  }
}
