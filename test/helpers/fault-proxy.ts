// A TCP proxy in front of a real redis-server that can slow Redis's replies down or make its open connections
// go silent, or refuse new connections. `delay(ms)` holds each reply that long (in order), as a congested network or a busy shard would;
// `stall()`, what a hung load balancer or NAT does, keeps every connection open now, passes what the client
// sends, and drops what Redis answers; a connection opened afterwards passes both ways. No error and no close
// reach the client.
import { once } from 'node:events'
import { connect, createServer } from 'node:net'
import type { Socket } from 'node:net'
import { HOST } from './redis-server.js'
import type { Teardownable } from './redis-server.js'

export interface FaultProxy {
  readonly url: string
  /** Redis's replies reach the client `ms` later from now on (0: at once). */
  delay: (ms: number) => void
  /** Connections open now stop passing Redis's replies (and stay open); later ones pass. */
  stall: () => void
  /** New connections are refused from now on (those open now stay as they are). */
  refuse: () => void
  /** How many connections have been opened through it. */
  readonly connections: number
}

export async function startFaultProxy (t: Teardownable, redisPort: number): Promise<FaultProxy> {
  const open = new Set<{ stalled: boolean, sockets: Socket[] }>()
  let connections = 0
  let delayMs = 0
  const server = createServer(client => {
    connections++
    const upstream = connect(redisPort, HOST)
    const pair = { stalled: false, sockets: [client, upstream] }
    open.add(pair)
    client.on('data', chunk => upstream.write(chunk))
    const pass = (chunk: Buffer): void => { if (!pair.stalled) client.write(chunk) }
    // Timers of one delay fire in the order they were set: replies stay in order.
    upstream.on('data', chunk => { if (delayMs === 0) pass(chunk); else setTimeout(pass, delayMs, chunk) })
    const end = (): void => {
      open.delete(pair)
      client.destroy()
      upstream.destroy()
    }
    for (const socket of pair.sockets) socket.on('error', end).on('close', end)
  })
  server.listen(0, HOST)
  await once(server, 'listening')
  t.teardown(async () => {
    for (const pair of open) for (const socket of pair.sockets) socket.destroy()
    if (server.listening) {
      server.close()
      await once(server, 'close')
    }
  })
  const { port } = server.address() as { port: number }
  return {
    url: `redis://${HOST}:${port}`,
    delay: (ms) => { delayMs = ms },
    refuse: () => { server.close() },
    stall: () => { for (const pair of open) pair.stalled = true },
    get connections () { return connections }
  }
}
