import { docsUrl } from '../docs-links.js'

// What an unknown option name is told: the nearest name taken where it was given (a typo, a case), another
// rate limiter's name with ours and how to write it (data below, each of ours held to the table by a test),
// or a limit's own field given beside the limits. Only names taken where they were given are suggested; one
// given at register only is said to be so.

/** Another library's option, as this plugin takes it: `ours` (none: no equivalent) and how to write it. */
export interface Foreign {
  readonly library: 'express-rate-limit' | 'rate-limiter-flexible'
  readonly ours: readonly string[]
  readonly write: string
}

const express = (ours: readonly string[], write: string): Foreign => ({ library: 'express-rate-limit', ours, write })
const flexible = (ours: readonly string[], write: string): Foreign =>
  ({ library: 'rate-limiter-flexible', ours, write })

/**
 * Other libraries' options this plugin spells another way or does not have. Theirs that it takes by the same
 * name (`keyGenerator`, `store`, `standardHeaders`, `legacyHeaders`, `skipSuccessfulRequests`,
 * `skipFailedRequests`, `ipv6Subnet`, and every option of `@fastify/rate-limit`) are not here.
 */
export const FOREIGN: Readonly<Record<string, Foreign>> = Object.freeze({
  windowMs: express(['timeWindow'], "timeWindow: 15 * 60_000 (milliseconds, as windowMs) or '15 minutes'"),
  limit: express(['max'], 'max: 100 (limits takes several limits: limits: [{ max, timeWindow }])'),
  message: express(['errorResponseBuilder'],
    "errorResponseBuilder: (request, context) => ({ statusCode: context.statusCode, message: 'Slow down' })"),
  statusCode: express(['errorResponseBuilder'],
    'the statusCode of the object errorResponseBuilder returns (429 unless it says otherwise)'),
  handler: express(['errorResponseBuilder', 'onExceeded'],
    'errorResponseBuilder for the body of a refusal, onExceeded: (request, key) => void to act on each'),
  onLimitReached: express(['onExceeded'], 'onExceeded: (request, key) => void, on each refused request'),
  skip: express(['allowList'], 'allowList: (request, key) => boolean (true: not limited), or an array of keys'),
  requestWasSuccessful: express(['countWhen'],
    'countWhen: (request, reply) => boolean (false: the request is given back)'),
  passOnStoreError: express(['failMode'], "failMode: 'open' (true) or 'closed' (false)"),
  headers: express(['legacyHeaders'], 'legacyHeaders: true or false (the X-RateLimit-* headers)'),
  draft_polli_ratelimit_headers: express(['enableDraftSpec'],
    'enableDraftSpec: true (RateLimit-Limit, -Remaining, -Reset)'),
  identifier: express(['limits'], "a limit's name: limits: [{ max: 100, timeWindow: '1 minute', name: 'api' }]"),
  requestPropertyName: express([], "a handler reads the request's quota on request.rateGuard"),
  validate: express([], 'every option is checked at register, always'),
  points: flexible(['max'], 'max: 5 (requests per timeWindow)'),
  duration: flexible(['timeWindow'],
    "timeWindow: 60_000 or '60 seconds' (in milliseconds here; duration counts seconds)"),
  blockDuration: flexible(['ban'],
    "ban: { threshold: 1, duration: '10 minutes' } (a client refused once is banned for duration)"),
  keyPrefix: flexible(['nameSpace'], "nameSpace: 'my-app:'"),
  storeClient: flexible(['redis'], 'redis: new Redis(…), a client you lend, or a redis:// URL'),
  insuranceLimiter: flexible(['failMode'], "failMode: 'local' (the in-process store decides while Redis fails)"),
  inMemoryBlockOnConsumed: flexible(['banCache'], 'banCache: true, the default (refusals are held in process)'),
  execEvenly: flexible([], 'requests are not spread out; maxWait lets a refused request wait for its turn instead')
})

/** A limit's own fields (a calendar quota's, a name), which belong in an entry of `limits`, each with an example. */
const LIMIT_FIELDS: Readonly<Record<string, string>> = Object.freeze({
  per: "limits: [{ max: 1000, per: 'day' }]",
  timeZone: "limits: [{ max: 1000, per: 'day', timeZone: 'America/New_York' }]",
  name: "limits: [{ max: 100, timeWindow: '1 minute', name: 'api' }]"
})

/** How far a name may be from one it was meant to be: a letter in a short name, more in longer ones. */
const reach = (name: string): number => name.length <= 4 ? 1 : name.length <= 8 ? 2 : 3

/** Letters inserted, deleted, changed or swapped with the next to make `a` into `b` (optimal string alignment). */
function distance (a: string, b: string): number {
  // rows[i][j]: the edits from a's first i letters to b's first j.
  const rows = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => i + j))
  for (let i = 1; i <= a.length; i++) {
    const [before, row] = [rows[i - 1]!, rows[i]!]
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(before[j]! + 1, row[j - 1]! + 1, before[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
      const swapped = i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]
      if (swapped) row[j] = Math.min(row[j]!, rows[i - 2]![j - 2]! + 1)
    }
  }
  return rows[a.length]![b.length]!
}

const loose = (name: string): string => name.toLowerCase().replace(/[-_]/g, '')

/** The known name `name` was most likely meant to be (case, `-` and `_` aside; then the fewest edits), or none. */
export function nearest (name: string, known: Iterable<string>): string | undefined {
  let best: string | undefined
  let least = reach(name) + 1
  for (const candidate of known) {
    const edits = loose(candidate) === loose(name) ? 0 : distance(name.toLowerCase(), candidate.toLowerCase())
    if (edits < least) [best, least] = [candidate, edits]
  }
  return best
}

/** Where the options are listed, for a message to end with. */
const listed = (): string => `Every option: ${docsUrl('options', 'options')}`

/** What an unknown name among `known` (a nested option's fields, header names) is told. */
export function unknownName (name: string, known: Iterable<string>): string {
  const near = nearest(name, known)
  return `${near === undefined ? 'no such option.' : `no such option; did you mean \`${near}\`?`} ${listed()}`
}

/** Where a suggested option may be given, when not where it was: at register only. */
const atRegister = (option: string): string => `\`${option}\` is given at register only (it holds for the whole plugin)`

/**
 * What an unknown option name is told where options are given (the plugin's, a route's, a limiter's): `here`
 * the names taken there, `registerOnly` those taken only at register; a link to the list of options ends it.
 */
export function unknownOption (name: string, here: ReadonlySet<string>, registerOnly: ReadonlySet<string>): string {
  const foreign = Object.hasOwn(FOREIGN, name) ? FOREIGN[name] : undefined
  if (foreign !== undefined) {
    const elsewhere = foreign.ours.filter(option => !here.has(option))
    const where = elsewhere.length === 0 ? '' : `; ${elsewhere.map(atRegister).join(', ')}`
    const named = foreign.ours.map(option => `\`${option}\``).join(' or ')
    const ours = foreign.ours.length === 0 ? 'has no equivalent here' : `is ${named} here`
    return `no such option: ${foreign.library}'s \`${name}\` ${ours}: ${foreign.write}${where}. ${listed()}`
  }
  if (Object.hasOwn(LIMIT_FIELDS, name)) {
    const see = docsUrl('options', 'limits')
    return `no such option here: \`${name}\` belongs in a limit of \`limits\`: ${LIMIT_FIELDS[name]!}. See ${see}`
  }
  const there = nearest(name, here) === undefined ? nearest(name, registerOnly) : undefined
  return there === undefined ? unknownName(name, here) : `no such option; ${atRegister(there)}. ${listed()}`
}
