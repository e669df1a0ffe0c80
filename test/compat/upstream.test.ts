// Drop-in, judged by @fastify/rate-limit's own tests: every test file their installed package ships runs
// against the built package (dist/), with only `require('../index')` changed to `require('fastify-rate-guard')`.
// A test of theirs may fail only when docs/migrating.md lists it among the deliberate differences ("Where the
// answers differ on purpose"), and every test listed there must still fail: the list is neither stale nor short.
// Passes and skips are counted apart: the tests skipped must be the ones their files mark `skip`, and every
// other test that is not listed must pass.
import { execFile } from 'node:child_process'
import { cpSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { distIsBuilt } from '../helpers/built.js'
import { startRedisServer } from '../helpers/redis.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const here = fileURLToPath(new URL('./upstream/', import.meta.url))
const theirs = join(dirname(createRequire(import.meta.url).resolve('@fastify/rate-limit/package.json')), 'test')
// Inside this package, so `require('fastify-rate-guard')` is the package's reference to itself (dist/).
const suite = join(root, '.upstream')
/** One file's tests may take this long: theirs wait out real windows against Redis (about 15 s in all). */
const FILE_TIMEOUT = 60_000
/** Files run at once: their tests sleep far more than they compute. */
const PARALLEL = 4

interface Result { file: string, name: string, status: 'pass' | 'fail' | 'skip' | 'todo', error?: string }

/**
 * Their test files, copied: `require('../index')` (or `'../../index'`) is the only line changed, and each is
 * saved as `.cjs` (this package is an ES module one, theirs CommonJS).
 */
function copySuite (): string[] {
  rmSync(suite, { recursive: true, force: true })
  mkdirSync(suite, { recursive: true })
  cpSync(theirs, suite, { recursive: true })
  const files = (readdirSync(suite, { recursive: true }) as string[]).filter(file => file.endsWith('.test.js')).sort()
  return files.map(file => {
    const path = join(suite, file)
    const source = readFileSync(path, 'utf8')
    const changed = source.replace(/require\('(\.\.\/)+index'\)/g, "require('fastify-rate-guard')")
    if (changed === source) throw new Error(`${file}: no require('../index') to change`)
    rmSync(path)
    writeFileSync(path.replace(/\.js$/, '.cjs'), changed)
    return file
  })
}

async function runFile (file: string, redisPort: number): Promise<Result[]> {
  const args = ['--require', join(here, 'preload.cjs'), '--test-reporter', join(here, 'reporter.mjs'), join(suite, file.replace(/\.js$/, '.cjs'))]
  const { stdout, stderr, failed } = await new Promise<{ stdout: string, stderr: string, failed: (Error & { killed?: boolean }) | null }>(resolve => {
    execFile(process.execPath, args, { cwd: suite, timeout: FILE_TIMEOUT, maxBuffer: 64 << 20, env: { ...process.env, UPSTREAM_REDIS_PORT: String(redisPort) } },
      (err, stdout, stderr) => resolve({ stdout, stderr, failed: err }))
  })
  const results = stdout.split('\n').filter(line => line.startsWith('{')).map(line => ({ file, ...JSON.parse(line) as Omit<Result, 'file'> }))
  // A file that died before its tests reported (a crash at load) fails as a whole; one that did not exit
  // (something kept the process alive: a test that failed before closing its Redis client, or this plugin)
  // fails as well, with whatever its tests reported.
  if (results.length === 0) return [{ file, name: '(the whole file)', status: 'fail', error: `${failed?.message ?? 'no test ran'}\n${stderr.slice(-2000)}` }]
  if (failed?.killed === true) results.push({ file, name: '(the file did not exit)', status: 'fail', error: `killed after ${FILE_TIMEOUT} ms` })
  return results
}

/**
 * The tests their files mark to be skipped (`{ skip: true }` or a reason, `test.skip(`, `it.skip(`,
 * `describe.skip(`, `t.skip(`; the same for todo), counted in their source, not from the run: what the run's
 * skips are held to.
 */
function markedInSource (files: readonly string[], mark: 'skip' | 'todo'): number {
  const pattern = new RegExp(`\\b${mark}:\\s*(true|'[^']*'|"[^"]*")|\\b(test|it|describe|t)\\.${mark}\\(`, 'g')
  return files.reduce((n, file) => n + (readFileSync(join(theirs, file), 'utf8').match(pattern)?.length ?? 0), 0)
}

/** docs/migrating.md's list of their tests that fail on purpose: `file › test name` in the section's table. */
function listedDifferences (): Set<string> {
  const readme = readFileSync(join(root, 'docs', 'migrating.md'), 'utf8')
  const section = /^#### Where the answers differ on purpose\n([\s\S]*?)(?=^#)/m.exec(readme)
  if (section === null) throw new Error('docs/migrating.md has no "Where the answers differ on purpose" section')
  const rows = section[1]!.split('\n').filter(line => /^\| `[^`]+` \|/.test(line))
  return new Set(rows.map(line => /^\| `([^`]+)` \|/.exec(line)![1]!))
}

t.setTimeout(3 * FILE_TIMEOUT)

t.test("@fastify/rate-limit's own test suite passes against the built package", async t => {
  distIsBuilt(t, root)

  const redis = await startRedisServer(t)
  const files = copySuite()
  t.teardown(() => rmSync(suite, { recursive: true, force: true }))
  const results: Result[] = []
  const queue = [...files]
  await Promise.all(Array.from({ length: PARALLEL }, async () => {
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) results.push(...await runFile(file, redis.port))
  }))

  const listed = new Set(listedDifferences())
  const id = (result: Result): string => `${result.file} › ${result.name}`
  const failed = results.filter(result => result.status === 'fail')
  const passed = results.filter(result => result.status === 'pass').length
  const skipped = results.filter(result => result.status === 'skip')
  const todo = results.filter(result => result.status === 'todo')
  t.comment(`of their ${results.length} tests: ${passed} pass, ${failed.length} fail (${listed.size} listed as deliberate differences), ${skipped.length} skipped, ${todo.length} todo`)
  for (const result of failed.filter(result => !listed.has(id(result)))) {
    t.fail(`their test fails: ${id(result)}`, { diagnostic: true, error: result.error })
  }
  const failing = new Set(failed.map(id))
  for (const name of listed) t.ok(failing.has(name), `listed, and still fails: ${name}`)
  const markedSkip = markedInSource(files, 'skip')
  const markedTodo = markedInSource(files, 'todo')
  t.equal(skipped.length, markedSkip, `skipped: the ${markedSkip} their files mark skip (${skipped.map(id).join('; ') || 'none'})`)
  t.equal(todo.length, markedTodo, `todo: the ${markedTodo} their files mark todo`)
  t.equal(passed, results.length - markedSkip - markedTodo - listed.size, `passed: every test of theirs but the ${markedSkip} skipped, ${markedTodo} todo and ${listed.size} listed (${passed} of ${results.length})`)
  t.ok(passed >= 100, `their suite ran: ${passed} passed (${results.length} tests from ${files.length} files in ${relative(root, theirs)})`)
})
