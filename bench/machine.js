// The machine and software a run measured, for the header of the table and the JSON.
import { readFileSync } from 'node:fs'
import { availableParallelism, loadavg } from 'node:os'
import { info } from './redis-info.js'

export function version (name) {
  try {
    return JSON.parse(readFileSync(new URL(`../node_modules/${name}/package.json`, import.meta.url), 'utf8')).version
  } catch {
    return 'not installed'
  }
}

export function loadAverage () {
  return loadavg().map(x => x.toFixed(2)).join(' ')
}

function cpuModel () {
  try {
    const line = readFileSync('/proc/cpuinfo', 'utf8').split('\n').find(l => l.startsWith('model name'))
    return line === undefined ? 'unknown' : line.slice(line.indexOf(':') + 1).trim()
  } catch {
    return 'unknown'
  }
}

async function maxmemoryPolicy (redis) {
  try {
    const reply = await redis.config('GET', 'maxmemory-policy')
    return (Array.isArray(reply) ? reply[1] : reply['maxmemory-policy']) ?? 'unknown'
  } catch {
    return 'unknown (CONFIG refused)'
  }
}

export async function machine (redis, pin) {
  const redisInfo = await info(redis)
  return {
    nproc: availableParallelism(),
    cpu: cpuModel(),
    node: process.version,
    redis: redisInfo.redis_version,
    redisMaxmemoryPolicy: await maxmemoryPolicy(redis),
    packages: Object.fromEntries(['fastify', 'ioredis', '@fastify/rate-limit', 'rate-limiter-flexible'].map(name => [name, version(name)])),
    pinning: pin.note,
    loadAverageBefore: loadAverage()
  }
}

/** Busy and total jiffies of each CPU (from /proc/stat), or null where there is no /proc. */
export function coreTimes () {
  try {
    return readFileSync('/proc/stat', 'utf8').split('\n').filter(line => /^cpu\d/.test(line)).map((line) => {
      const [user, nice, system, idle, iowait, irq, softirq, steal] = line.split(/\s+/).slice(1).map(Number)
      const busy = user + nice + system + irq + softirq + steal
      return { busy, total: busy + idle + iowait }
    })
  } catch {
    return null
  }
}

/** Each CPU's busy share between two `coreTimes()` readings. */
export function coreBusy (before, after) {
  if (before === null || after === null) return null
  return after.map((core, i) => (core.busy - before[i].busy) / Math.max(1, core.total - before[i].total))
}
