// The apps bench/shed.js loads (issue 46's load shedder), each in a process of its own, given one JSON argument:
//   { kind: 'cpu', cpuMs, shed? }   /checkout (config.priority 'critical'), /search ('normal'), /recommend
//       ('sheddable'), each burning `cpuMs` of this process's CPU synchronously; /health (exempt by the default rule)
//   { kind: 'dependency', cpuMs, slots, holdMs, shed? }   /work: `cpuMs` of CPU, then a slot of a simulated
//       dependency (`slots` in parallel, first come first served beyond), held `holdMs`; POST /control
//       { slots?, holdMs? } changes them mid-run (exempt)
// Both: GET /stats (exempt) answers `fastify.rateGuard.stats().shed` (null without a shedder). The plugin counts no
// rate limit here (global: false, in process): the shedder alone. `shed` reaches the plugin only when given, as the
// plugin refuses an option it does not know (a dist/ built before the shedder).
// Over IPC: { type: 'ready', port } once listening; { type: 'cpu' } → { type: 'cpu', cpuUs } (this process's CPU
// since start); { type: 'close' } → closes and exits.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'

const config = JSON.parse(process.argv[2])
// The plugin's note that it counts in process (no Redis here): not printed.
process.removeAllListeners('warning')
process.on('warning', (warning) => { if (warning.code !== 'FST_RATE_GUARD_IN_PROCESS') console.error(warning) })

const cpuUs = () => {
  const { user, system } = process.cpuUsage()
  return user + system
}

/** Busy for `ms` of this process's CPU time (not wall time: a core shared with others slows it, never shortens it). */
function burn (ms) {
  const until = cpuUs() + ms * 1000
  while (cpuUs() < until);
}

/** The simulated dependency: `size` requests at once, the others queued in their order. */
class Slots {
  #busy = 0
  #queue = []
  constructor (size) { this.size = size }

  async take () {
    if (this.#busy < this.size) {
      this.#busy++
      return
    }
    await new Promise(resolve => this.#queue.push(resolve))
  }

  give () {
    this.#busy--
    this.#admit()
  }

  resize (size) {
    this.size = size
    this.#admit()
  }

  #admit () {
    while (this.#busy < this.size && this.#queue.length > 0) {
      this.#busy++
      this.#queue.shift()()
    }
  }
}

const app = Fastify({ logger: false })
await app.register(rateGuard, { global: false, ...(config.shed === undefined ? {} : { shed: config.shed }) })
const exempt = { config: { priority: 'exempt' } }
app.get('/stats', exempt, async () => app.rateGuard.stats().shed ?? null)

if (config.kind === 'cpu') {
  for (const [path, priority] of [['/checkout', 'critical'], ['/search', 'normal'], ['/recommend', 'sheddable']]) {
    app.get(path, { config: { priority } }, async () => {
      burn(config.cpuMs)
      return { path }
    })
  }
  app.get('/health', async () => ({ ok: true }))
} else {
  const slots = new Slots(config.slots)
  let holdMs = config.holdMs
  app.get('/work', async () => {
    burn(config.cpuMs)
    await slots.take()
    try {
      await sleep(holdMs)
    } finally {
      slots.give()
    }
    return { done: true }
  })
  app.post('/control', exempt, async (request) => {
    const body = /** @type {{ slots?: number, holdMs?: number }} */ (request.body)
    if (body.slots !== undefined) slots.resize(body.slots)
    if (body.holdMs !== undefined) holdMs = body.holdMs
    return { slots: slots.size, holdMs }
  })
}

// A backlog for the connections an overload opens at once (the open-loop client opens one per request in flight).
await app.listen({ port: 0, host: '127.0.0.1', backlog: 4096 })
process.on('message', async (msg) => {
  if (msg.type === 'cpu') process.send({ type: 'cpu', cpuUs: cpuUs() })
  else if (msg.type === 'close') {
    // Requests still queued (an overload without a shedder) are not waited for.
    app.server.closeAllConnections()
    await app.close()
    process.send({ type: 'closed' }, () => process.exit(0))
  }
})
process.send({ type: 'ready', port: app.server.address().port })
