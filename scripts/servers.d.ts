// The types of scripts/servers.js, for the tests that import it (test/helpers/servers.ts).
export interface Server {
  readonly name: string
  readonly folder: string
  /** The first words of its `redis-server --version`. */
  readonly version: string
  /** The upstream repository and tag it is built from. */
  readonly tag: string
}
export interface FoundServer extends Server {
  /** The path of its redis-server executable. */
  readonly bin: string
}
export declare const SERVERS: readonly Server[]
export declare const HOW_TO_GET_SERVERS: string
export declare function findServers (): { dir: string, servers: FoundServer[] } | { missing: string }
