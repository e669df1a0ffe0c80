// A TCP proxy in front of a real redis-server that takes a script flag Redis does not know, as a server that has
// it would (Upstash's `allow-key-locking`): in what the client sends, each `#!lua flags=<flag>` becomes
// `#!lua flags=` and spaces (the same length, so no RESP length changes), which Redis runs as a script with
// no flags. It counts the flags it took: the scripts that asked for it. Redis's replies pass unchanged. Redis
// hashes the text it runs, not the text asked, so an EVALSHA of a flagged script finds nothing there: each call
// goes again as EVAL (ioredis's fallback), and asks again.
import { once } from 'node:events'
import { connect, createServer } from 'node:net'
import type { Socket } from 'node:net'
import { HOST } from './redis-server.js'
import type { Teardownable } from './redis-server.js'

export interface FlagProxy {
  readonly url: string
  /** How many times a script asked for the flag (each EVAL or SCRIPT LOAD of its text). */
  readonly taken: number
}

export async function startFlagProxy (t: Teardownable, redisPort: number, flag: string): Promise<FlagProxy> {
  const asked = Buffer.from(`#!lua flags=${flag}`)
  const taken = Buffer.from(`#!lua flags=${' '.repeat(flag.length)}`)
  const sockets = new Set<Socket>()
  let count = 0
  /** `chunk` with every whole `asked` in it taken; the bytes at its end that could begin one are held for the next chunk. */
  const rewrite = (chunk: Buffer): { pass: Buffer, held: Buffer } => {
    for (let at = chunk.indexOf(asked); at !== -1; at = chunk.indexOf(asked, at + asked.length)) {
      taken.copy(chunk, at)
      count++
    }
    for (let keep = Math.min(asked.length - 1, chunk.length); keep > 0; keep--) {
      if (chunk.subarray(chunk.length - keep).equals(asked.subarray(0, keep))) return { pass: chunk.subarray(0, chunk.length - keep), held: chunk.subarray(chunk.length - keep) }
    }
    return { pass: chunk, held: Buffer.alloc(0) }
  }
  const server = createServer(client => {
    const upstream = connect(redisPort, HOST)
    sockets.add(client).add(upstream)
    // Bytes held are never a command's last: RESP ends each with CRLF, which no flag begins with.
    let held: Buffer = Buffer.alloc(0)
    client.on('data', chunk => {
      const next = rewrite(Buffer.concat([held, chunk]))
      held = next.held
      upstream.write(next.pass)
    })
    upstream.on('data', chunk => client.write(chunk))
    const end = (): void => {
      client.destroy()
      upstream.destroy()
    }
    for (const socket of [client, upstream]) socket.on('error', end).on('close', end)
  })
  server.listen(0, HOST)
  await once(server, 'listening')
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    server.close()
    await once(server, 'close')
  })
  const { port } = server.address() as { port: number }
  return {
    url: `redis://${HOST}:${port}`,
    get taken () { return count }
  }
}
