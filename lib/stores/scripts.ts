// The Redis store's scripts: each joined once from the files in lua/ (lua/prelude.lua first), named by its hash,
// defined once per client, and called with the keys and arguments lib/stores/layout.ts builds (scriptArgs,
// leanArgs), whose `-- layout:` line in lua/decide.lua and lua/lean.lua `read` fills in.
// Redis names a line of a script by its line in the joined text ('user_script:302'); `located` names it as the
// file's line (lib/stores/redis.ts hands every script error through it).
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { Cluster, Redis } from 'ioredis'
import { ALGORITHMS } from '../algorithms/index.js'
import type { Algorithm } from '../algorithms/index.js'
import { CommandConflictError } from '../errors.js'
import type { DecideInput } from './store.js'
import { keySlot } from '../slots.js'
import { functionCommand, functionLines, libraryOf } from './functions.js'
import { withLayout } from './layout.js'

// The calls' arguments are lib/stores/layout.ts's, built from the one layout the scripts read.
export { leanArgs, quotaWindow, scriptArgs } from './layout.js'

/** One file of a joined script: its name (`lua/decide.lua`) and the line of the joined script it starts at (from 1). */
export interface Part {
  readonly file: string
  readonly first: number
}

/**
 * One script: its files joined with a line break between each two, and its command name, which holds its hash
 * (an edited script is a new command).
 */
export interface Script {
  readonly lua: string
  readonly command: string
  /** Its files in order, each with where it starts. */
  readonly parts: readonly Part[]
}

/** A file of lua/ as the scripts join it: its layout line, if it has one, made the Lua declaring its offsets. */
const read = (name: string): string => withLayout(readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), 'utf8'))

const PRELUDE = read('prelude')
const BAN_INDEX = read('ban-index')
const STRIKES = read('strikes')
const DECIDE = read('decide')
const CROSS_SLOT = read('cross-slot')
const LEAN = read('lean')
const LEASE = read('lease')
const QUOTA = read('quota')

/** The files `texts` (by name: `decide` for `lua/decide.lua`) joined as `name`'s script: `rateGuardSlidingLog_<8 hex of its hash>`. */
function script (name: string, texts: ReadonlyArray<readonly [string, string]>): Script {
  const parts: Part[] = []
  let first = 1
  for (const [file, text] of texts) {
    parts.push(Object.freeze({ file: `lua/${file}.lua`, first }))
    // Its lines, then the line break that joins it to the next.
    first += text.split('\n').length
  }
  const lua = texts.map(([, text]) => text).join('\n')
  const camel = name.replace(/(^|-)([a-z])/g, (_, __: string, letter: string) => letter.toUpperCase())
  return Object.freeze({
    lua, command: `rateGuard${camel}_${createHash('sha1').update(lua).digest('hex').slice(0, 8)}`, parts: Object.freeze(parts)
  })
}

/**
 * The algorithms with a lean path: a file `lua/lean-<algorithm>.lua` giving `lean` to `lua/lean.lua`, which
 * decides the requests `isLean` picks.
 */
export const LEAN_ALGORITHMS: readonly Algorithm[] = Object.freeze(['sliding-log', 'fixed-window', 'sliding-window', 'token-bucket'])

/** Each algorithm's files, and its lean path's: what `script` joins, and, behind `lua/cross-slot.lua`, its cross-slot variant. */
const ALGORITHM_FILES = (algorithm: Algorithm): Array<readonly [string, string]> =>
  [['prelude', PRELUDE], [algorithm, read(algorithm)], ['quota', QUOTA], ['ban-index', BAN_INDEX], ['strikes', STRIKES], ['decide', DECIDE]]
const LEAN_FILES = (algorithm: Algorithm): Array<readonly [string, string]> =>
  [['prelude', PRELUDE], [`lean-${algorithm}`, read(`lean-${algorithm}`)], ['ban-index', BAN_INDEX], ['strikes', STRIKES], ['lean', LEAN]]
const byLean = (make: (algorithm: Algorithm) => Script): Readonly<Partial<Record<Algorithm, Script>>> =>
  Object.freeze(Object.fromEntries(LEAN_ALGORITHMS.map(algorithm => [algorithm, make(algorithm)])))

/**
 * One script per algorithm, read once: `lua/prelude.lua` (numbers as text for Redis, and the settling bounds),
 * the algorithm's file (its `count` and `settle`), `lua/ban-index.lua`, `lua/strikes.lua`, then
 * `lua/decide.lua` (the bans, strikes and overrides around them, the same for all).
 */
export const SCRIPTS: Readonly<Record<Algorithm, Script>> = Object.freeze(Object.fromEntries(ALGORITHMS.map(algorithm =>
  [algorithm, script(algorithm, ALGORITHM_FILES(algorithm))])) as Record<Algorithm, Script>)
/** Each lean path's script (`lua/lean.lua` around `lua/lean-<algorithm>.lua`): the requests `isLean` picks. */
export const LEAN_SCRIPTS = byLean(algorithm => script(`lean-${algorithm}`, LEAN_FILES(algorithm)))
/** `concurrency`'s leases (lua/lease.lua), with the strikes and bans a refusal may count. */
export const LEASE_SCRIPT = script('lease', [['prelude', PRELUDE], ['ban-index', BAN_INDEX], ['strikes', STRIKES], ['lease', LEASE]])
/**
 * The cross-slot variants (Redis 7.0 and later, on a Cluster): each algorithm's script and the lean one with
 * `lua/cross-slot.lua` in front, whose shebang (`#!lua flags=allow-cross-slot-keys`) is their first line. One
 * call decides requests of several slots one master serves; its arguments are `crossSlotArgs`'.
 */
export const CROSS_SLOT_SCRIPTS: Readonly<Record<Algorithm, Script>> = Object.freeze(Object.fromEntries(ALGORITHMS.map(algorithm =>
  [algorithm, script(`cross-slot-${algorithm}`, [['cross-slot', CROSS_SLOT], ...ALGORITHM_FILES(algorithm)])])
) as Record<Algorithm, Script>)
export const CROSS_SLOT_LEAN_SCRIPTS = byLean(algorithm =>
  script(`cross-slot-lean-${algorithm}`, [['cross-slot', CROSS_SLOT], ...LEAN_FILES(algorithm)]))

/**
 * The arguments of a cross-slot call (`lua/cross-slot.lua`) made of a call's own (`scriptArgs`, `leanArgs`: the
 * number of keys, the keys, the rest): the first key alone as KEYS (it routes the call), then the number of
 * keys and the keys, then how many runs of keys of one slot follow and each run's length (the script checks
 * each run with one EXISTS), then the rest.
 */
export function crossSlotArgs (args: ReadonlyArray<string | number>): Array<string | number> {
  const n = Number(args[0])
  const keys = args.slice(1, n + 1) as string[]
  const runs: number[] = []
  let last = -1
  for (const key of keys) {
    const slot = keySlot(key)
    if (slot === last) runs[runs.length - 1]!++
    else runs.push(1)
    last = slot
  }
  return [1, keys[0]!, n, ...keys, runs.length, ...runs, ...args.slice(n + 1)]
}

/** The operator's ban: the ban and its entry in the ban index (`lua/ban.lua`). */
export const BAN_SCRIPT = script('ban', [['prelude', PRELUDE], ['ban-index', BAN_INDEX], ['ban', read('ban')]])

/** Every script above on Redis's clock, as one FUNCTION library (lib/stores/functions.ts): what `defineScript` calls with FCALL. */
export const LIBRARY = libraryOf([
  ...Object.values(SCRIPTS), ...Object.values(LEAN_SCRIPTS), LEASE_SCRIPT, ...Object.values(CROSS_SLOT_SCRIPTS),
  ...Object.values(CROSS_SLOT_LEAN_SCRIPTS), BAN_SCRIPT
])

/** A line of a joined script as Redis names it: `user_script:302` (`@user_script:302`, or `user_script: 302` in Redis 6). */
const JOINED_LINE = /@?user_script: ?(\d+)/g

/**
 * `text` (a Redis error's, or the error text of one request) with each line of `script` it names given as its
 * file's line, the joined line beside it: `lua/decide.lua:45 (user_script:302)`.
 */
export function sourceLines (script: Script, text: string): string {
  return functionLines(LIBRARY, script.command, text).replace(JOINED_LINE, (joined, line: string) => {
    const n = Number(line)
    let part = script.parts[0]!
    for (const each of script.parts) if (each.first <= n) part = each
    return `${part.file}:${n - part.first + 1} (${joined})`
  })
}

/** `err`, an error of a call of `script` (or of one of its requests), with its message (and stack) naming the files' lines. */
export function located<T> (script: Script, err: T): T {
  if (err instanceof Error) {
    err.message = sourceLines(script, err.message)
    err.stack = sourceLines(script, String(err.stack))
  }
  return err
}

/** Every script takes the same keys and arguments (see the header of `lua/decide.lua`), the number of keys first. */
export type ScriptCommand = (...keysAndArgv: Array<string | number>) => Promise<unknown>

/**
 * Whether a lean script decides `input`: decided (not peeked or settled) by an algorithm with a lean path
 * (`LEAN_ALGORITHMS`) on one limit (not a calendar quota), at a cost of 1, with no over-limit wait and no maxWait.
 * It hands back the few it cannot: an identity with an override of several limits, a state it does not read (a
 * log holding costlier entries), a foreign value at a key.
 */
export function isLean (input: DecideInput, algorithm: Algorithm): boolean {
  return LEAN_ALGORITHMS.includes(algorithm) && !input.peek && input.limits.length === 1 && input.limits[0]!.period === undefined &&
    (input.cost ?? 1) === 1 && input.overLimit === undefined && input.wait === undefined
}

/**
 * Whose clock the scripts read: Redis's `TIME` (the default: one clock for every instance), or, for a server
 * that refuses `TIME` in scripts (ElastiCache Serverless), the app's, sent as each call's last argument.
 */
export type Clock = 'redis' | 'app'

/**
 * What a script call locks on a server that locks per key (Upstash): the whole server (`'global'`, what every
 * script takes unless it asks, and all Redis and Valkey know), or only its KEYS (`'keys'`: `keyLocked`).
 */
export type Locking = 'global' | 'keys'

/** A script's one line that reads the clock: `now = ...redis.call('TIME')...`, `local` or not. */
const NOW_LINE = /^([ \t]*)(local )?now = [^\r\n]*redis\.call\(\s*(['"])TIME\3\s*\)[^\r\n]*$/gm

/**
 * `lua` reading the app's clock: its one `now = ...redis.call('TIME')...` line made `now = tonumber(ARGV[#ARGV])`
 * (the caller sends the time, ms, last), on the same line, so errors still name their file's lines. Throws
 * unless there is exactly one such line: every script reads the clock in one place.
 */
export function appClockVariant (lua: string): string {
  const found = lua.match(NOW_LINE) ?? []
  if (found.length !== 1) {
    throw new Error(`appClockVariant: expected exactly one line "now = ...redis.call('TIME')...", found ${found.length}`)
  }
  return lua.replace(NOW_LINE, '$1$2now = tonumber(ARGV[#ARGV])')
}

const APP_CLOCK = new WeakMap<Script, Script>()
const KEY_LOCKED = new WeakMap<Script, Script>()

/** The shebang that asks a server locking per key (Upstash) to lock only a script call's KEYS, not the whole server. */
export const KEY_LOCKING = '#!lua flags=allow-key-locking'

/**
 * `script` taking the lock of its call's keys alone on a server that locks per key (Upstash, where a script
 * takes the global lock unless it asks): its first line, a comment of lua/prelude.lua's, made the shebang
 * `KEY_LOCKING`, so every other line keeps its number (and `located` its file). A command of its own name.
 * Redis and Valkey refuse a flag they do not know: lib/connect.ts sends these only to a server that took it.
 */
export function keyLocked (script: Script): Script {
  return variant(script, KEY_LOCKED, 'KeyLocking', lua => {
    if (!lua.startsWith('--')) throw new Error(`keyLocked: ${script.command} does not open with a comment line`)
    return KEY_LOCKING + lua.slice(lua.indexOf('\n'))
  })
}

/** `script` as it reads `clock`: itself, or its app-clock variant (a command of its own name). */
export function onClock (script: Script, clock: Clock): Script {
  return clock === 'redis' ? script : variant(script, APP_CLOCK, 'AppClock', appClockVariant)
}

/**
 * `script` with its text made by `make`, line for line (so its parts, and the lines errors name, stay): a
 * command of its own name, `<script's name><kind>_<8 hex of its hash>`, made once per script (`made`).
 */
function variant (script: Script, made: WeakMap<Script, Script>, kind: string, make: (lua: string) => string): Script {
  let found = made.get(script)
  if (found === undefined) {
    const lua = make(script.lua)
    const command = `${script.command.replace(/_[0-9a-f]{8}$/, '')}${kind}_${createHash('sha1').update(lua).digest('hex').slice(0, 8)}`
    found = Object.freeze({ lua, command, parts: script.parts })
    made.set(script, found)
  }
  return found
}

/** The commands this plugin defined, per client: `defineCommand` silently overwrites, so we check first. */
const defined = new WeakMap<object, Set<string>>()

/**
 * Defines `algorithm`'s script (or another `Script`) on `client` once, as it reads `clock` and takes `locking`
 * (`'keys'`: `keyLocked`); refuses a command of the same name that is not ours. On the app's clock, each call
 * sends `Date.now()` last; with `functions`, a script of `LIBRARY` is called as its function where the server holds it.
 */
export function defineScript (
  client: Redis | Cluster, algorithm: Algorithm | Script, clock: Clock = 'redis', locking: Locking = 'global', functions = false
): ScriptCommand {
  const script = typeof algorithm === 'string' ? SCRIPTS[algorithm] : algorithm
  const { command: name, lua } = onClock(locking === 'keys' ? keyLocked(script) : script, clock)
  let ours = defined.get(client)
  if (ours?.has(name) !== true) {
    if (name in client) throw new CommandConflictError(name)
    // No numberOfKeys: each call gives it first, as its requests' keys are three to seven each.
    client.defineCommand(name, { lua })
    if (ours === undefined) defined.set(client, ours = new Set())
    ours.add(name)
  }
  const command = (client as unknown as Record<string, ScriptCommand>)[name]!.bind(client)
  if (clock === 'app') return async (...args) => await command(...args, Date.now())
  return functions && LIBRARY.first.has(name) ? functionCommand(client, LIBRARY, name, command) : command
}

/** Each script of `scripts` (`LEAN_SCRIPTS`, `CROSS_SLOT_LEAN_SCRIPTS`) defined on `client`, by algorithm. */
export function defineScripts (
  client: Redis | Cluster, scripts: Readonly<Partial<Record<Algorithm, Script>>>, clock: Clock = 'redis', locking: Locking = 'global',
  functions = false
): Partial<Record<Algorithm, ScriptCommand>> {
  return Object.fromEntries(Object.entries(scripts).map(([algorithm, script]) =>
    [algorithm, defineScript(client, script, clock, locking, functions)]))
}
