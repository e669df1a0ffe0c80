// The planted bugs the suite must catch (issue 44): each mutation below is a small, realistic bug in lib/ or
// lua/ (an off-by-one at a boundary, a give-back left out, a TTL missing...), with the few test files that
// must fail when it is planted. `npm run mutations` plants them one at a time in a temporary copy of the
// working tree (its files as they are now, committed or not; node_modules linked) and runs those files with
// tap, without coverage:
//   CAUGHT    the tests failed: the suite holds this bug off
//   SURVIVED  the tests passed with the bug in place: a test lost its teeth (a failure of this check)
//   STALE     the search string no longer occurs exactly once in its file, or a test file is gone: the code was
//             refactored; re-anchor the mutation on the new code (also a failure)
// It exits non-zero unless every mutation is caught. The files of all mutations are first run once unmutated
// (`--no-baseline` skips that): a failing baseline would make every mutation look caught, so it stops there.
//
//   node scripts/mutations.js [--no-baseline] [--keep] [name ...]   (names: any part of a mutation's name)
//   node scripts/mutations.js --list
import { spawnSync } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { stripVTControlCharacters } from 'node:util'

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)))

// The conformance files' hand-worked tables, without their seeded differentials.
const TABLES = Object.freeze(['--grep=^differential', '--invert'])

// name: what the bug is; file: where it is planted; search: text found exactly once there; replace: the bug;
// tests: the test files that must fail (1 to 3, the quickest that catch it); tap (optional): tap's arguments
// that pick which of their top-level tests run (--grep), to leave out what is slow or timed and catches nothing
// more: the seeded differentials (CPU-bound, and a fresh seed each run), the breaker's runs against a frozen Redis.
export const MUTATIONS = [
  {
    name: 'quota boundary (Lua): a calendar quota lets one unit past its max',
    file: 'lua/quota.lua',
    search: 'if n + cost > limit.max then',
    replace: 'if n + cost > limit.max + 1 then',
    tests: ['test/conformance-quotas.test.ts'],
    tap: TABLES
  },
  {
    name: 'quota boundary (twin): a calendar quota refuses the request that fills it',
    file: 'lib/algorithms/quota.ts',
    search: 'if (n + cost > max) {',
    replace: 'if (n + cost >= max) {',
    tests: ['test/conformance-quotas.test.ts'],
    tap: TABLES
  },
  {
    name: 'calendar boundary: the instant a period ends is still counted in it',
    file: 'lib/calendar.ts',
    search: '} else if (at >= kept.current.end) {',
    replace: '} else if (at > kept.current.end) {',
    tests: ['test/calendar.test.ts']
  },
  {
    name: 'lean path: the sliding log\'s lean count lets max + 1 through (< compared as <=)',
    file: 'lua/lean-sliding-log.lua',
    search: '  if count < max then\n',
    replace: '  if count <= max then\n',
    tests: ['test/conformance-algorithm-tables.test.ts'],
    tap: TABLES
  },
  {
    name: 'TTL missing: a ladder\'s offences never expire, so a client\'s bans are never forgotten',
    file: 'lua/strikes.lua',
    search: "  if #lengths > 1 then\n    redis.call('PEXPIRE', offences, duration + forget)\n  end\n",
    replace: '',
    tests: ['test/escalation.test.ts']
  },
  {
    name: 'ban not checked first (lean path): a lone request\'s EXISTS looks for its override alone, not its ban',
    file: 'lua/lean.lua',
    search: "special = redis.call('EXISTS', KEYS[KEY_BANNED], KEYS[KEY_OVERRIDE]) > 0",
    replace: "special = redis.call('EXISTS', KEYS[KEY_OVERRIDE]) > 0",
    tests: ['test/ban.test.ts']
  },
  {
    name: 'ban not checked first (general path): decide.lua\'s EXISTS looks for the override alone, not the ban',
    file: 'lua/decide.lua',
    search: "if redis.call('EXISTS', req.banned, req.override) == 0 then",
    replace: "if redis.call('EXISTS', req.override) == 0 then",
    tests: ['test/conformance-algorithm-tables.test.ts'],
    tap: TABLES
  },
  {
    name: 'cost ignored in the twin only: the in-process sliding log decides as if every request cost 1',
    file: 'lib/algorithms/sliding-log.ts',
    search: '      const need = units + cost - max\n',
    replace: '      const need = units + 1 - max\n',
    tests: ['test/costs.test.ts']
  },
  {
    name: 'a waiting request not counted (Lua): the fixed window forgets the requests waiting for its next window',
    file: 'lua/fixed-window.lua',
    search: "return start, fields[field('o', i)] or 0, fields[field('c', i)]",
    replace: "return start, fields[field('o', i)] or 0, 0",
    tests: ['test/conformance-wait.test.ts'],
    tap: TABLES
  },
  {
    name: 'double release (twin): a lease released twice gives its units back twice',
    file: 'lib/stores/memory-leases.ts',
    search: '    if (leases?.delete(id) !== true) return 0\n',
    replace: '    if (leases === undefined) return 0\n    leases.delete(id)\n',
    tests: ['test/leases-conformance.test.ts']
  },
  {
    name: 'held slots (Lua): concurrency lets one unit past max',
    file: 'lua/lease.lua',
    search: 'if inUse + units <= max then',
    replace: 'if inUse + units <= max + 1 then',
    tests: ['test/leases-conformance.test.ts']
  },
  {
    name: 'shared refusal: the client\'s count is not given back when the shared budget refuses',
    file: 'lib/request/decide.ts',
    search: '  state.take(input, own)\n  const whole = costing(shared, input.cost)\n',
    replace: '  const whole = costing(shared, input.cost)\n',
    tests: ['test/shared.test.ts']
  },
  {
    name: 'wait: a client that leaves while it waits keeps its place counted',
    file: 'lib/request/pipeline.ts',
    search: '      // Its client left while it waited: its place is given back, and it is not handled.\n      refund(state)\n',
    replace: '      // Its client left while it waited: its place is given back, and it is not handled.\n',
    tests: ['test/wait.test.ts']
  },
  {
    name: 'hold: a request refused for its slots keeps what its rate limits counted',
    file: 'lib/request/pipeline.ts',
    search: '  const taken = state.handOver()\n  if (taken === null) return\n',
    replace: '  if (state.decided?.inFlight === true) return\n  const taken = state.handOver()\n  if (taken === null) return\n',
    tests: ['test/in-flight-features.test.ts']
  },
  {
    name: 'refund after the handler: refundAborted gives the charge back once the handler has started',
    file: 'lib/request/charge.ts',
    search: "if (this.#phase !== 'waiting' || this.#settled) return",
    replace: "if (this.#phase === 'abandoned' || this.#settled) return",
    tests: ['test/security/refund-aborted.test.ts']
  },
  {
    name: 'held denial\'s start: a denial held in process is timed from its answer, not from its question',
    file: 'lib/held-answers.ts',
    search: 'ends: since + decision.retryMs, since, decision }',
    replace: 'ends: this.#now() + decision.retryMs, since, decision }',
    tests: ['test/held-answers.test.ts']
  },
  {
    name: 'breaker: opens one failure after its threshold',
    file: 'lib/breaker.ts',
    search: '    if (this.#failures < this.#threshold) return\n',
    replace: '    if (this.#failures <= this.#threshold) return\n',
    tests: ['test/breaker.test.ts'],
    // The file's unit tests, on an injected clock.
    tap: ['--grep=^Breaker: ']
  },
  {
    name: 'options: max: 0 accepted where a positive integer is required',
    file: 'lib/options/checks.ts',
    search: "export function checkMax (value: unknown, name = 'max', least: 0 | 1 = 1): number {",
    replace: "export function checkMax (value: unknown, name = 'max', least: 0 | 1 = 0): number {",
    tests: ['test/options.test.ts']
  },
  {
    name: 'shed reserve boundary: a normal request admitted with inFlight × (1 − reserve) already in flight',
    file: 'lib/shed/shedder.ts',
    search: "if (this.#inFlight >= this.#line(this.limit, priority)) return 'in-flight'",
    replace: "if (this.#inFlight > this.#line(this.limit, priority)) return 'in-flight'",
    tests: ['test/shed.test.ts'],
    tap: ['--grep=^memory: normal admitted']
  },
  {
    name: 'shed: a sheddable request admitted up to the normal class\'s line, not its own (1 − reserve)²',
    file: 'lib/shed/shedder.ts',
    search: "priority === 'normal' ? left : left * left",
    replace: "priority === 'normal' ? left : left",
    tests: ['test/shed-signals.test.ts'],
    tap: ['--grep=^a full capacity sheds']
  },
  {
    name: 'shed: a critical request admitted past the in-flight capacity',
    file: 'lib/shed/shedder.ts',
    search: "if (priority === 'critical') return this.#inFlight < this.#held ? null : 'in-flight'",
    replace: "if (priority === 'critical') return this.#inFlight <= this.#held ? null : 'in-flight'",
    tests: ['test/shed.test.ts'],
    tap: ['--grep=^memory: normal admitted']
  },
  {
    name: 'shed: an exempt request counted in flight, taking the critical class\'s reserve',
    file: 'lib/request/shed.ts',
    search: "    if (priority === 'exempt') return done()\n",
    replace: '',
    tests: ['test/shed.test.ts'],
    tap: ['--grep=^exempt requests in flight']
  },
  {
    name: 'shed: a request\'s place never given back when its work is over',
    file: 'lib/request/shed.ts',
    search: 'workOf(request, reply).add(() => { shedder.done(performance.now() - at, at) }, DEFAULT_LEASE_MS)',
    replace: 'workOf(request, reply).add(() => {}, DEFAULT_LEASE_MS)',
    tests: ['test/shed.test.ts'],
    tap: ['--grep=^every place given back']
  },
  {
    name: 'shed: normal halved before sheddable is shed whole',
    file: 'lib/shed/shedder.ts',
    search: "const lowest = shares.sheddable > 0 ? 'sheddable' : 'normal'",
    replace: "const lowest = shares.normal > 0 ? 'normal' : 'sheddable'",
    tests: ['test/shed-signals.test.ts'],
    tap: ['--grep=^pressure']
  },
  {
    name: 'shed: a class admitted whole again at the first calm sample, not ramped back',
    file: 'lib/shed/shedder.ts',
    search: 'shares[highest] = Math.min(1, shares[highest] + this.#step)',
    replace: 'shares[highest] = 1',
    tests: ['test/shed-signals.test.ts'],
    tap: ['--grep=^pressure']
  },
  {
    name: 'shed: Retry-After rounded down (1500 ms answered 1)',
    file: 'lib/options/shed.ts',
    search: 'retryAfter: Math.ceil(',
    replace: 'retryAfter: Math.floor(',
    tests: ['test/shed.test.ts'],
    tap: ['--grep=^every shed answer']
  }
]

/** How many times `search` occurs in `text`. */
function occurrences (text, search) {
  let n = 0
  for (let at = text.indexOf(search); at !== -1; at = text.indexOf(search, at + 1)) n++
  return n
}

/** The working tree's files (tracked, and untracked but not ignored) copied into a temporary folder, node_modules linked. */
function copyTree () {
  const dir = mkdtempSync(join(tmpdir(), 'rate-guard-mutations-'))
  const listed = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, encoding: 'utf8' })
  if (listed.status !== 0) throw new Error(`git ls-files failed: ${listed.stderr}`)
  for (const file of listed.stdout.split('\0')) {
    if (file === '' || !existsSync(join(ROOT, file))) continue
    mkdirSync(dirname(join(dir, file)), { recursive: true })
    cpSync(join(ROOT, file), join(dir, file), { dereference: false })
  }
  symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(dir, 'node_modules'))
  return dir
}

/** Runs `tests` in `dir` with tap (terse reporter, no coverage): whether they passed, its output, and the seconds taken. */
function runTests (dir, tests, tap = []) {
  const started = Date.now()
  const args = ['tap', '--disable-coverage', '--reporter=terse', ...tap, ...tests]
  const run = spawnSync('npx', args, { cwd: dir, encoding: 'utf8', maxBuffer: 1 << 28 })
  return { passed: run.status === 0, output: `${run.stdout}${run.stderr}`, seconds: Math.round((Date.now() - started) / 1000) }
}

/** Why `mutation` is stale (its anchor, in the working tree, not found exactly once; a test file gone), or undefined. */
function staleness (mutation) {
  const path = join(ROOT, mutation.file)
  if (!existsSync(path)) return `${mutation.file} is gone`
  const found = occurrences(readFileSync(path, 'utf8'), mutation.search)
  if (found !== 1) return `its search string occurs ${found} times in ${mutation.file} (once expected): ${JSON.stringify(mutation.search)}`
  const missing = mutation.tests.filter(test => !existsSync(join(ROOT, test)))
  if (missing.length > 0) return `test file${missing.length > 1 ? 's' : ''} gone: ${missing.join(', ')}`
  return undefined
}

/** The unmutated runs that cover every test the mutations run: one per set of tap arguments, its files deduplicated. */
function baselines (mutations) {
  const runs = new Map()
  for (const { tests, tap = [] } of mutations) {
    const key = JSON.stringify(tap)
    runs.set(key, { tap, files: [...new Set([...(runs.get(key)?.files ?? []), ...tests])] })
  }
  return runs.values()
}

/** Tap's terse report of a failing run, from its first failing file on, without its progress lines and colours. */
function failures (output) {
  const plain = stripVTControlCharacters(output)
  const from = plain.indexOf(' FAIL ')
  return (from === -1 ? plain : plain.slice(from)).split('\n').filter(line => !/^(Asserts|Suites):/.test(line)).join('\n')
}

function main (args) {
  if (args.includes('--list')) {
    for (const { name, file, tests, tap = [] } of MUTATIONS) console.log(`${name}\n  ${file} -> ${[...tap, ...tests].join(' ')}`)
    return 0
  }
  const names = args.filter(arg => !arg.startsWith('--'))
  const chosen = MUTATIONS.filter(({ name }) => names.length === 0 || names.some(part => name.includes(part)))
  if (chosen.length === 0) {
    console.error(`no mutation's name contains ${names.join(' or ')} (--list names them)`)
    return 2
  }
  const results = []
  const live = []
  for (const mutation of chosen) {
    const stale = staleness(mutation)
    if (stale === undefined) live.push(mutation)
    else results.push({ mutation, outcome: 'STALE', detail: stale })
  }
  for (const { mutation, detail } of results) console.log(`STALE     ${mutation.name}\n          ${detail}`)

  const dir = live.length === 0 ? undefined : copyTree()
  const keep = args.includes('--keep')
  const cleanUp = () => { if (!keep && dir !== undefined) rmSync(dir, { recursive: true, force: true }) }
  if (keep && dir !== undefined) console.log(`copy      ${dir} (kept, unmutated, after the run)`)
  process.once('SIGINT', () => { cleanUp(); process.exit(130) })
  try {
    if (!args.includes('--no-baseline') && live.length > 0) {
      for (const { tap, files } of baselines(live)) {
        const { passed, output, seconds } = runTests(dir, files, tap)
        console.log(`baseline  ${passed ? 'passed' : 'FAILED'} unmutated (${seconds} s): ${[...tap, ...files].join(' ')}`)
        if (!passed) {
          console.log(failures(output))
          console.log('The tests fail without any mutation, so no mutation can be judged: fix them first.')
          return 1
        }
      }
    }
    for (const mutation of live) {
      const path = join(dir, mutation.file)
      const original = readFileSync(path, 'utf8')
      writeFileSync(path, original.replace(mutation.search, () => mutation.replace))
      try {
        const { passed, seconds } = runTests(dir, mutation.tests, mutation.tap)
        const outcome = passed ? 'SURVIVED' : 'CAUGHT'
        results.push({ mutation, outcome })
        const ran = [...mutation.tap ?? [], ...mutation.tests].join(' ')
        console.log(`${outcome.padEnd(9)} ${mutation.name} (${mutation.file}; ${ran}: ${seconds} s)`)
      } finally {
        writeFileSync(path, original)
      }
    }
  } finally {
    cleanUp()
  }

  const count = outcome => results.filter(result => result.outcome === outcome).length
  console.log(`\n${count('CAUGHT')} caught, ${count('SURVIVED')} survived, ${count('STALE')} stale of ${chosen.length}`)
  if (count('SURVIVED') > 0) console.log('SURVIVED: the tests pass with that bug planted: make a test catch it.')
  if (count('STALE') > 0) console.log('STALE: re-anchor each on the code as it is now (search and replace in scripts/mutations.js).')
  return count('CAUGHT') === chosen.length ? 0 : 1
}

process.exitCode = main(process.argv.slice(2))
