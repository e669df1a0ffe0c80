// A TCP proxy that stands for a Redis address that moves: what a virtual IP, a DNS name or a managed
// endpoint does when a replica is promoted. It passes both ways to the server it points at; `switchTo(port)`
// points it at another and drops every connection open now, so clients reconnect to the new one.
import { once } from 'node:events'
import { connect, createServer } from 'node:net'
import type { Socket } from 'node:net'
import { HOST } from './redis-server.js'
import type { Teardownable } from './redis-server.js'

export interface SwitchProxy {
  readonly url: string
  /** New connections go to `port`; those open now are dropped. */
  switchTo: (port: number) => void
}

export async function startSwitchProxy (t: Teardownable, port: number): Promise<SwitchProxy> {
  let target = port
  const open = new Set<Socket>()
  const server = createServer(client => {
    const upstream = connect(target, HOST)
    client.pipe(upstream)
    upstream.pipe(client)
    for (const socket of [client, upstream]) {
      open.add(socket)
      socket.on('error', () => { client.destroy(); upstream.destroy() })
      socket.on('close', () => { open.delete(socket); client.destroy(); upstream.destroy() })
    }
  })
  server.listen(0, HOST)
  await once(server, 'listening')
  t.teardown(async () => {
    for (const socket of open) socket.destroy()
    server.close()
    await once(server, 'close')
  })
  return {
    url: `redis://${HOST}:${(server.address() as { port: number }).port}`,
    switchTo: (next) => {
      target = next
      for (const socket of open) socket.destroy()
    }
  }
}
