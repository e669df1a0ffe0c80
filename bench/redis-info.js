// What the bench reads from Redis: CPU, commands and memory (INFO), and the cleanup of a run's keys.

/** One INFO call for every section the bench uses, parsed into numbers (and strings where not numeric). */
export async function info (redis) {
  const text = await redis.info('server', 'cpu', 'stats', 'memory', 'commandstats')
  const out = {}
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':')
    if (colon === -1 || line.startsWith('#')) continue
    const name = line.slice(0, colon)
    const value = line.slice(colon + 1)
    if (name.startsWith('cmdstat_')) {
      out[name] = Object.fromEntries(value.split(',').map(pair => pair.split('=')).map(([k, v]) => [k, Number(v)]))
    } else {
      out[name] = value !== '' && !Number.isNaN(Number(value)) ? Number(value) : value
    }
  }
  return out
}

/** Redis CPU (user + system, µs) and commands processed between two INFO readings; the later INFO call itself excluded. */
export function delta (before, after) {
  const cpu = (i) => (i.used_cpu_user + i.used_cpu_sys) * 1e6
  return {
    cpuUs: cpu(after) - cpu(before),
    commands: after.total_commands_processed - before.total_commands_processed - 1,
    usedMemory: after.used_memory - before.used_memory
  }
}

/** `calls` and `usec` of one command in INFO commandstats (zero when never called). */
export function commandStat (i, name) {
  const stat = i[`cmdstat_${name}`]
  return { calls: stat?.calls ?? 0, usec: stat?.usec ?? 0 }
}

/** Deletes every key under `prefix` (SCAN, then UNLINK in batches). */
export async function deleteKeys (redis, prefix) {
  let cursor = '0'
  let deleted = 0
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 5000)
    cursor = next
    if (keys.length > 0) deleted += await redis.unlink(...keys)
  } while (cursor !== '0')
  return deleted
}
