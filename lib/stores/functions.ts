import { createHash } from 'node:crypto'
import type { Cluster, Redis } from 'ioredis'
import { isCluster } from './client.js'

// The scripts as a Redis FUNCTION library (Redis 7.0 and later, Valkey), called with FCALL: loaded once per
// server and version, never evicted (Redis 8 evicts scripts sent with EVAL beyond 500), and no NOSCRIPT round
// trip after a client restarts. One library per version of the scripts' text (`rateguard_<hash>`), so two
// versions of the app run side by side in a rolling deploy, each calling its own functions. A server that
// refuses FUNCTION (below 7.0, an ACL, a proxy) keeps EVALSHA (lib/stores/scripts.ts's `defineScript`); a
// call told `Function not found` (FUNCTION FLUSH, a restart that lost the data, a failover to a node that never
// had it) ran nothing, so the library is loaded again and the call sent once more.

/** What a function is made of: its name (a `Script`'s command) and its text. */
export interface FunctionSource {
  readonly command: string
  readonly lua: string
}

export interface Library {
  readonly name: string
  readonly code: string
  /** The library's line each script's text starts at (its line 1), by its command: where `user_function:<line>` is. */
  readonly first: ReadonlyMap<string, number>
  /**
   * Each script's function, by its command: `<command>_<the library's hash>`. Function names are one namespace
   * across a server's libraries, so a script two versions share would otherwise stop the second from loading.
   */
  readonly functions: ReadonlyMap<string, string>
}

/** The shebang of a script whose keys may span slots (lua/cross-slot.lua): a function flag in the library. */
const CROSS_SLOT = '#!lua flags=allow-cross-slot-keys'

/**
 * `sources` as one library: each text the body of a function taking KEYS and ARGV, line for line (a shebang
 * becomes the function's flag and an empty line), and comment lines left empty, which keep the numbering and
 * spare Redis compiling half a megabyte of prose.
 */
export function libraryOf (sources: readonly FunctionSource[]): Library {
  const hash = createHash('sha1')
  for (const { command, lua } of sources) hash.update(`${command}\n${lua}\n`)
  const version = hash.digest('hex').slice(0, 12)
  const name = `rateguard_${version}`
  const lines = [`#!lua name=${name}`]
  const first = new Map<string, number>()
  const functions = new Map<string, string>()
  for (const { command, lua } of sources) {
    const text = lua.split('\n')
    const crossSlot = text[0] === CROSS_SLOT
    functions.set(command, `${command}_${version}`)
    const flags = crossSlot ? "'allow-cross-slot-keys'" : ''
    lines.push(`redis.register_function{function_name='${command}_${version}', flags={${flags}}, callback=function (KEYS, ARGV)`)
    first.set(command, lines.length + 1)
    for (const [i, line] of text.entries()) lines.push((i === 0 && crossSlot) || /^\s*--/.test(line) ? '' : line)
    lines.push('end}')
  }
  return Object.freeze({ name, code: lines.join('\n'), first, functions })
}

/** A line of a library as Redis names it in an error: `user_function:302` (`@user_function:302`). */
const LIBRARY_LINE = /(@?)user_function: ?(\d+)/g

/** `text` with each library line of `command`'s function named as that function's text's line (`user_script:<line>`). */
export function functionLines (library: Library, command: string, text: string): string {
  const first = library.first.get(command)
  return first === undefined
    ? text
    : text.replace(LIBRARY_LINE, (_, at: string, line: string) => `${at}user_script:${Number(line) - first + 1}`)
}

/** Whether the functions are called: not yet (`'evalsha'` meanwhile), yes, or never on this server (`'refused'`). */
type Mode = 'evalsha' | 'fcall' | 'refused'

interface State {
  mode: Mode
  /** The load under way, shared by every call that needs it. */
  loading: Promise<void> | null
  /** When the last load started (ms). */
  tried: number
}

/** How often a call may start a load while the library is not loaded (Redis was down at start, or is). */
const RETRY_MS = 1000

const states = new WeakMap<object, State>()

const ALREADY_LOADED = /^ERR Library '[^']*' already exists/
const NOT_FOUND = /^ERR Function not found/
/**
 * Redis refuses a function that may write while out of memory before it runs, where a script sent with EVALSHA
 * runs and is refused only at its first write: a client at its limit or banned is still answered then.
 */
const OUT_OF_MEMORY = /^OOM /

/** The servers that must hold the library: a standalone Redis, or each master of a Cluster. */
function servers (client: Redis | Cluster): Array<Redis | Cluster> {
  return isCluster(client) ? client.nodes('master') : [client]
}

/**
 * Loads `library` on `client`'s servers (each master of a Cluster) unless there already: resolves once every
 * one holds it (calls go FCALL from then), or once one refused FUNCTION (EVALSHA for good: a server that replied
 * with an error). A lost connection changes nothing: the next call that needs it loads again.
 */
export async function loadLibrary (client: Redis | Cluster, library: Library): Promise<void> {
  const state = stateOf(client)
  if (state.mode === 'refused') return
  state.loading ??= (async () => {
    state.tried = Date.now()
    try {
      const all = servers(client)
      // A Cluster client not ready yet knows no master: nothing is loaded, so nothing is called with FCALL.
      if (all.length === 0) return
      await Promise.all(all.map(async server => {
        try {
          // The name holds the text's hash: a library of this name is this one, so it is never replaced.
          await server.call('FUNCTION', 'LOAD', library.code)
        } catch (err) {
          if (!ALREADY_LOADED.test((err as Error).message)) throw err
        }
      }))
      state.mode = 'fcall'
    } catch (err) {
      if ((err as Error).name === 'ReplyError') state.mode = 'refused'
    } finally {
      state.loading = null
    }
  })()
  await state.loading
}

function stateOf (client: object): State {
  let state = states.get(client)
  if (state === undefined) states.set(client, state = { mode: 'evalsha', loading: null, tried: -Infinity })
  return state
}

/** Whether `client`'s calls go with FCALL now. */
export function callsFunctions (client: Redis | Cluster): boolean {
  return stateOf(client).mode === 'fcall'
}

type Command = (...keysAndArgv: Array<string | number>) => Promise<unknown>

/**
 * `command`'s function in `library` called with FCALL once the library is loaded on `client`; `evalsha` until
 * then (a load is started, at most one a second, while none runs) and on a server that refuses functions. A
 * call told `Function not found` ran nothing: the library is loaded again, and that call sent with `evalsha`. So
 * is one refused for want of memory (`OUT_OF_MEMORY`), which leaves the functions called.
 */
export function functionCommand (client: Redis | Cluster, library: Library, command: string, evalsha: Command): Command {
  const state = stateOf(client)
  const name = library.functions.get(command)!
  const fcall = (client as unknown as { fcall: Command }).fcall.bind(client)
  return async (...args) => {
    if (state.mode !== 'fcall') {
      // loadLibrary never rejects: what it met leaves EVALSHA, or ends the loading for good.
      if (state.mode === 'evalsha' && state.loading === null && Date.now() - state.tried >= RETRY_MS) loadLibrary(client, library)
      return await evalsha(...args)
    }
    try {
      return await fcall(name, ...args)
    } catch (err) {
      const { message } = err as Error
      if (OUT_OF_MEMORY.test(message)) return await evalsha(...args)
      if (!NOT_FOUND.test(message)) throw err
      state.mode = 'evalsha'
      await loadLibrary(client, library)
      return await evalsha(...args)
    }
  }
}
