import { createError } from '@fastify/error'

// Every error this plugin makes, created once. Codes are stable: match on `err.code`.

export const InvalidOptionError = createError<'FST_RATE_GUARD_INVALID_OPTION', [string, string]>(
  'FST_RATE_GUARD_INVALID_OPTION',
  'Invalid rate-guard option "%s": %s',
  500,
  TypeError
)

// `@fastify/rate-limit`'s messages, word for word (apps and their tests compare them); the stack of either
// points at the route declared with the bad value. A route's configuration of `true`, which theirs refuses in
// the same words, is told after them what to write instead (the argument; '' for any other value).
export const InvalidRouteConfigError = createError<'FST_RATE_GUARD_INVALID_ROUTE_CONFIG', [string]>(
  'FST_RATE_GUARD_INVALID_ROUTE_CONFIG',
  'Unknown value for route rate-limit configuration%s',
  500,
  TypeError
)

export const InvalidGroupIdError = createError<'FST_RATE_GUARD_INVALID_OPTION', []>(
  'FST_RATE_GUARD_INVALID_OPTION',
  'groupId must be a string',
  500,
  TypeError
)

export const BudgetConflictError = createError<'FST_RATE_GUARD_BUDGET_CONFLICT', [string, string, string, string]>(
  'FST_RATE_GUARD_BUDGET_CONFLICT',
  '%s would share budget "%s" with %s, but they count differently (%s): routes of one budget (a group, a route and its HEAD) ' +
    'need the same algorithm and limits',
  500,
  TypeError
)

export const CommandConflictError = createError<'FST_RATE_GUARD_COMMAND_CONFLICT', [string]>(
  'FST_RATE_GUARD_COMMAND_CONFLICT',
  'The Redis client already has a command named "%s" that rate-guard did not define; refusing to overwrite it'
)

export const InvalidReplyError = createError<'FST_RATE_GUARD_INVALID_REPLY', [string]>(
  'FST_RATE_GUARD_INVALID_REPLY',
  'Unexpected reply from the rate-guard script: %s'
)

export const DeadlineError = createError<'FST_RATE_GUARD_DEADLINE', [number]>(
  'FST_RATE_GUARD_DEADLINE',
  'Redis did not answer the rate limit decision within %d ms'
)

export const SilentConnectionError = createError<'FST_RATE_GUARD_SILENT_CONNECTION', [number]>(
  'FST_RATE_GUARD_SILENT_CONNECTION',
  'The connection to Redis took commands and returned nothing for %d ms: it is taken for dead'
)

export const LateRedisError = createError<'FST_RATE_GUARD_LATE_REPLIES', [number, number, number, number]>(
  'FST_RATE_GUARD_LATE_REPLIES',
  'Redis answered %d times after the deadline: replies take %d ms at p99 against a timeout of %d ms; timeout: %d would cover them'
)

/** An operator call made, or still under way, when its registration closed (its Redis client with it). */
export const ClosedError = createError<'FST_RATE_GUARD_CLOSED', [string]>(
  'FST_RATE_GUARD_CLOSED',
  'rate-guard was closed before %s() finished'
)

// Answers to clients. No stack trace: these are outcomes, not bugs, and they are made on the hot path.
export const TooManyRequestsError = createError<'FST_RATE_GUARD_TOO_MANY_REQUESTS', [string]>(
  'FST_RATE_GUARD_TOO_MANY_REQUESTS',
  'Rate limit exceeded, retry in %s',
  429,
  Error,
  false
)

/**
 * A request past its client's `concurrency`: `max` units of its requests are in flight on the budget. It may
 * retry in a second (`Retry-After: 1`), when one of them may have ended.
 */
export const TooManyInFlightError = createError<'FST_RATE_GUARD_TOO_MANY_IN_FLIGHT', []>(
  'FST_RATE_GUARD_TOO_MANY_IN_FLIGHT',
  'Too many requests in flight: retry when one of yours has ended',
  429,
  Error,
  false
)

/**
 * A request that would wait (`maxWait`) while `maxWaiting` requests already wait in its registration: refused
 * instead, what it counted given back. `Retry-After`: when its limits let it through with no wait at all.
 */
export const TooManyWaitingError = createError<'FST_RATE_GUARD_TOO_MANY_WAITING', [string]>(
  'FST_RATE_GUARD_TOO_MANY_WAITING',
  'Too many requests waiting on this server: retry in %s',
  429,
  Error,
  false
)

/** A request that costs more than a limit holds (`cost`): it would never pass, so it gets no `Retry-After`. */
export const TooCostlyError = createError<'FST_RATE_GUARD_TOO_COSTLY', []>(
  'FST_RATE_GUARD_TOO_COSTLY',
  'Rate limit exceeded: this request costs more than the limit allows',
  429,
  Error,
  false
)

export const InvalidSettleError = createError<'FST_RATE_GUARD_INVALID_SETTLE', [string]>(
  'FST_RATE_GUARD_INVALID_SETTLE',
  'A request settles at a whole number of units, 0 or more: got %s',
  500,
  TypeError
)

export const AlreadySettledError = createError<'FST_RATE_GUARD_ALREADY_SETTLED', []>(
  'FST_RATE_GUARD_ALREADY_SETTLED',
  'This request has already settled: a request settles once'
)

/**
 * A request its client left before its handler started, under `refundAborted` or while it waited (`maxWait`):
 * its charge was given back, so it is not handled. 499, nginx's "client closed request": nobody reads it.
 */
export const AbandonedError = createError<'FST_RATE_GUARD_ABANDONED', []>(
  'FST_RATE_GUARD_ABANDONED',
  'The client closed the request before its handler started: it was given back, and is not handled',
  499,
  Error,
  false
)

export const BannedError = createError<'FST_RATE_GUARD_BANNED', [string]>(
  'FST_RATE_GUARD_BANNED',
  'Rate limit exceeded, retry in %s',
  403,
  Error,
  false
)

export const UnavailableError = createError<'FST_RATE_GUARD_UNAVAILABLE', [string]>(
  'FST_RATE_GUARD_UNAVAILABLE',
  'Rate limiter unavailable, retry in %s',
  503,
  Error,
  false
)

/** A request the load shedder (`shed`) answered: the process is overloaded, and it was not of the classes kept. */
export const ShedError = createError<'FST_RATE_GUARD_SHED', [string]>(
  'FST_RATE_GUARD_SHED',
  'Server overloaded, retry in %s',
  503,
  Error,
  false
)

// Registration: Redis cannot serve the plugin.
export const RedisNotReadyError = createError<'FST_RATE_GUARD_REDIS_NOT_READY', [string]>(
  'FST_RATE_GUARD_REDIS_NOT_READY',
  'Redis was not ready at registration (strict: true): %s'
)

export const RedisRefusedError = createError<'FST_RATE_GUARD_REDIS_REFUSED', [string]>(
  'FST_RATE_GUARD_REDIS_REFUSED',
  'Redis refused rate-guard (check the password, and that the ACL user may run EVALSHA and EVAL on the key space): %s'
)
