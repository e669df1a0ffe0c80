import type { FastifyBaseLogger } from 'fastify'
import type { BatchWatch } from './batcher.js'
import { LateRedisError, SilentConnectionError } from './errors.js'
import { LateReplies } from './late.js'
import type { ReplyTimes } from './shed/reply-times.js'
import type { LateNews } from './late.js'
import { Silence, silenceAfter } from './silence.js'
import type { DecisionStats } from './stats.js'
import { TROUBLE_LOG_INTERVAL } from './trouble.js'
import type { Trouble } from './trouble.js'
import { warn } from './warnings.js'

// What watches the connection to Redis through its batches, beside the decisions: silence (a connection that
// takes commands and returns nothing, lib/silence.ts) and late replies (a slow Redis, lib/late.ts, and the
// ghosts it leaves). Each is told as trouble; what is done about silence is `silent`'s (lib/stores/stalled.ts).

export interface ConnectionWatchOptions {
  /** The deadline of a call to Redis, ms. */
  timeout: number
  trouble: Trouble
  /** Where ghosts are counted: requests Redis allowed after failMode answered them. */
  stats: DecisionStats
  /** Called when the connection fell silent, with the error that says so, and whether Redis is still not heard from. */
  silent: ((err: Error, quiet: () => boolean) => void) | undefined
  /** The registration's logger: what is said of Redis answering late. */
  log: FastifyBaseLogger | undefined
  /** Where every reply's time is kept for the load shedder's `redisTime` signal (a missed deadline: `timeout`). */
  times: ReplyTimes
}

export function connectionWatch ({ timeout, trouble, stats, silent, log, times }: ConnectionWatchOptions): BatchWatch {
  const afterMs = silenceAfter(timeout)
  const silence = silent === undefined
    ? undefined
    : new Silence(afterMs, quiet => {
      const error = new SilentConnectionError(afterMs)
      trouble.publish(error)
      silent(error, quiet)
    })
  const late = new LateReplies(timeout, TROUBLE_LOG_INTERVAL, (news: LateNews) => {
    const error = new LateRedisError(news.late, news.p99Ms, news.timeoutMs, news.coverMs)
    trouble.publish(error)
    if (log === undefined) return
    warn(log, 'REDIS_LATE', 'rate-guard: Redis answers, but after the deadline; failMode decides those requests', { err: error, ...news })
  })
  return {
    sent: at => silence?.sent(at),
    replied: (ms, results, isLate) => {
      silence?.heard()
      times.replied(ms)
      late.replied(ms, isLate)
      // Requests Redis counted that failMode answered.
      if (!isLate || results === null) return
      for (const result of results) if (!(result instanceof Error) && result.status === 'allowed') stats.ghost()
    },
    // No connection, or one lost: the client knows, and reconnects by itself. Silence is a connection
    // that seems alive, so the watch starts over (after a Redis freeze that outlasted a cut, say, the new
    // connection's fast failures must not count as silence once it is ready).
    failed: () => silence?.heard(),
    missed: now => {
      times.replied(timeout)
      silence?.missed(now)
    }
  }
}
