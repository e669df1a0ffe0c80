// A TCP proxy in front of a real redis-server that can make its open connections go silent: what a hung load
// balancer or NAT does. `stall()` keeps every connection open now, passes what the client sends, and drops
// what Redis answers; a connection opened afterwards passes both ways. No error and no close reach the client.
import { once } from 'node:events'
import { connect, createServer } from 'node:net'
import type { Socket } from 'node:net'
import { HOST } from './redis-server.js'
import type { Teardownable } from './redis-server.js'

export interface StallProxy {
  readonly url: string
  /** Connections open now stop passing Redis's replies (and stay open); later ones pass. */
  stall: () => void
  /** How many connections have been opened through it. */
  readonly connections: number
}

export async function startStallProxy (t: Teardownable, redisPort: number): Promise<StallProxy> {
  const open = new Set<{ stalled: boolean, sockets: Socket[] }>()
  let connections = 0
  const server = createServer(client => {
    connections++
    const upstream = connect(redisPort, HOST)
    const pair = { stalled: false, sockets: [client, upstream] }
    open.add(pair)
    client.on('data', chunk => upstream.write(chunk))
    upstream.on('data', chunk => { if (!pair.stalled) client.write(chunk) })
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
    server.close()
    await once(server, 'close')
  })
  const { port } = server.address() as { port: number }
  return {
    url: `redis://${HOST}:${port}`,
    stall: () => { for (const pair of open) pair.stalled = true },
    get connections () { return connections }
  }
}
