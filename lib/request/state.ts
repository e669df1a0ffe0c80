import type { FastifyReply, FastifyRequest } from 'fastify'
import type { HeaderStyle } from '../headers.js'
import type { Decidable, Decision, Verdict } from '../stores/store.js'
import type { Given } from './identify.js'
import type { Plan } from './plan.js'
import type { Slots } from '../leases.js'

// A request as the pipeline (./pipeline.ts) takes it through one budget's stages: one small object a request,
// which each stage reads and fills in, and what a stage tells the pipeline it came to (a `Step`). What the
// stages count of the request is reported here (`take`) and leaves in one move (`handOver`): to the pipeline's
// `refund` when a later stage refuses the request or its client leaves, or to the request's charge
// (./charge.ts), which settles it from then on. Taken once, handed over once: nothing is given back twice.

/** What a request comes to: go on (`undefined`), an error to refuse it with, or an answer sent here (503). */
export type HookResult = Error | undefined | typeof SENT
export const SENT = Symbol('sent')

/** A budget a stage counted the request on: the decision that counted it, which says what to settle. */
export interface Taken {
  readonly input: Decidable
  readonly decision: Decision
}

/** A decision on a request: the verdict answered, on which budget (`input`, `headers`). */
export interface Decided {
  readonly verdict: Verdict
  readonly input: Decidable
  readonly headers: HeaderStyle
  /** Refused because its client's requests in flight fill its budget's `concurrency` (./hold.ts). */
  readonly inFlight?: true
  /** Refused because `maxWaiting` requests wait in its registration, where it would have waited (./wait.ts). */
  readonly roomFull?: true
  /** Under `concurrency`, the answer on its slots (./hold.ts): units in flight in its `count`. */
  readonly slots?: Verdict
}

/** The stage refused a request that may hold counts: the pipeline gives them back, and the request goes on to its answer. */
export const REFUSED = Symbol('refused')
/** Its client left while it waited: the pipeline gives back what it holds, and it goes no further (./wait.ts). */
export const LEFT = Symbol('left while waiting')
/** The allow list let it by, uncounted: no stage counts it (./allow.ts). */
export const LISTED = Symbol('allow-listed')
/** Nothing more to do: the request's answer is `result` as it stands. */
export const END = Symbol('end')

/** What a stage came to: go on to the next (`undefined`), or one of the above. */
export type Step = undefined | typeof REFUSED | typeof LEFT | typeof LISTED | typeof END

/** A stage: reads and fills in the request's state, at once when its answer is at hand. */
export type Stage = (state: RequestState) => Step | PromiseLike<Step>

const NOTHING_TAKEN: readonly Taken[] = Object.freeze([])

export class RequestState {
  readonly plan: Plan
  readonly request: FastifyRequest
  /** Null only where the stages run to prepare a decision alone (`createRateLimit`), which never reach one that answers. */
  readonly reply: FastifyReply | null
  /** Who the client is, as the stores key it (identify). */
  key = ''
  /** The key as the app's key generator returned it: what the app's callbacks are given (identify). */
  given: Given = ''
  /** What the decision on the client's own budget takes (limits); null while not known, or when the allow list let it by. */
  input: Decidable | null = null
  /** The decision as it stands (decide, then wait and hold). */
  decided: Decided | null = null
  /** What the request comes to (respond). */
  result: HookResult = undefined
  /** A budget spent by hand (./spend.ts): the key under the client's, and the units, the app asked for. */
  spending: { readonly key: string | undefined, readonly cost: number } | null = null
  /** Slots taken by hand (./spend.ts's `slots`). */
  slots: Slots | null = null
  /** What stages counted of it, until handed over (null: nothing). */
  #taken: Taken[] | null = null

  constructor (plan: Plan, request: FastifyRequest, reply: FastifyReply | null) {
    this.plan = plan
    this.request = request
    this.reply = reply
  }

  /** A stage counted the request on a budget: it holds that until it is handed over. */
  take (input: Decidable, decision: Decision): void {
    (this.#taken ??= []).push({ input, decision })
  }

  /** What the request holds, in the order it was taken (its own budget first), handed over once: nothing after. */
  handOver (): readonly Taken[] {
    const taken = this.#taken ?? NOTHING_TAKEN
    this.#taken = null
    return taken
  }
}
