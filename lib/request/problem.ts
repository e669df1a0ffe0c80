import type { HeaderStyle } from '../headers.js'
import { policyName, retryAfterSeconds } from '../headers.js'
import type { Decision } from '../stores/store.js'

// `errorFormat: 'problem'`: refusals as RFC 9457 problem details (`application/problem+json`), with the problem
// types draft-ietf-httpapi-ratelimit-headers-10 defines: `quota-exceeded` for a 429, with `violated-policies`
// (the IETF names of the limits that refused it); `abnormal-usage-detected` for a ban's 403;
// `temporary-reduced-capacity` for failMode 'closed''s 503. Each says `retry-after` in seconds, as the header
// does, but for a request that never fits (it costs more than a limit holds).

export const PROBLEM_TYPE = 'application/problem+json; charset=utf-8'
const TYPES = 'https://iana.org/assignments/http-problem-types#'

const QUOTA_EXCEEDED = { type: `${TYPES}quota-exceeded`, title: 'Request cannot be satisfied as assigned quota has been exceeded' }
const ABNORMAL_USAGE = {
  type: `${TYPES}abnormal-usage-detected`,
  title: 'Request not satisfied due to detection of abnormal request pattern'
}
const REDUCED_CAPACITY = {
  type: `${TYPES}temporary-reduced-capacity`,
  title: 'Request cannot be satisfied due to temporary reduced capacity'
}

/** The problem body of a refusal: `verdict` on a request of `cost` units, its limits named as `headers` name them. */
export function refusalProblem (verdict: Decision, cost: number, headers: HeaderStyle, statusCode: number, message: string): string {
  const banned = verdict.status === 'banned'
  // The limits it did not fit: each one's count (after the decision, which counted nothing) and its cost past it.
  const violated = verdict.limits.flatMap((limit, i) => limit.count + cost > limit.limit ? [policyName(headers, i)] : [])
  return JSON.stringify({
    ...(banned ? ABNORMAL_USAGE : QUOTA_EXCEEDED),
    status: statusCode,
    detail: message,
    ...(violated.length > 0 ? { 'violated-policies': violated } : {}),
    ...(verdict.retryMs > 0 ? { 'retry-after': retryAfterSeconds(verdict.retryMs) } : {})
  })
}

/** The problem body of failMode 'closed''s 503: try again in `after` seconds. */
export function unavailableProblem (after: number, message: string): string {
  return JSON.stringify({ ...REDUCED_CAPACITY, status: 503, detail: message, 'retry-after': after })
}
