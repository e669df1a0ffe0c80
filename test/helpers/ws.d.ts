// `ws` ships no types and @types/ws is not a dev dependency: what the WebSocket tests use of its client, typed.
declare module 'ws' {
  import { EventEmitter } from 'node:events'
  import type { OutgoingHttpHeaders } from 'node:http'

  class WebSocket extends EventEmitter {
    static readonly OPEN: 1
    constructor (url: string, options?: { headers?: OutgoingHttpHeaders })
    readonly readyState: number
    binaryType: 'nodebuffer' | 'arraybuffer' | 'fragments'
    send (data: string | Buffer, options?: { binary?: boolean }): void
    ping (): void
    close (code?: number, reason?: string): void
    terminate (): void
  }
  namespace WebSocket {
    type WebSocket = InstanceType<typeof WebSocket>
    type Server = EventEmitter
  }
  export default WebSocket
  export { WebSocket }
}
