// What a user installs: the packed tarball carries the license, the built code and the Lua scripts, and
// package.json says what it needs (the Node version whose require() loads this ES module).
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import t from 'tap'

const root = new URL('..', import.meta.url)

t.test('the tarball carries LICENSE, dist/ and lua/', async t => {
  const { stdout } = await promisify(execFile)('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, timeout: 60_000 })
  const files = new Set((JSON.parse(stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map(file => file.path))
  t.ok(files.has('LICENSE'), 'LICENSE')
  t.ok(files.has('dist/index.js') && files.has('dist/index.d.ts'), 'the built module and its types')
  t.ok(files.has('lua/decide.lua'), 'the Lua scripts')
  t.notOk([...files].some(file => file.startsWith('test/') || file.startsWith('lib/')), 'no tests, no sources')
})

t.test('package.json: MIT as the LICENSE says, engines from the first Node whose require() loads an ES module, a git install builds', async t => {
  const pkg = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { license: string, engines: { node: string }, scripts: Record<string, string> }
  t.equal(pkg.license, 'MIT')
  t.match(readFileSync(new URL('LICENSE', root), 'utf8'), /^MIT License/)
  t.equal(pkg.engines.node, '>=20.19')
  t.equal(pkg.scripts.prepare, pkg.scripts.build, 'prepare builds, so an install from git has dist/')
})

t.test('npm test says at once what the machine lacks, naming the command that installs it', async t => {
  const run = promisify(execFile)
  const failed = await run(process.execPath, ['scripts/preflight.js'], { cwd: root, env: { PATH: '/nonexistent', CHROMIUM_PATH: '/nonexistent/chromium' } }).then(() => null, (err: { code: number, stderr: string }) => err)
  t.equal(failed?.code, 1, 'it fails')
  t.match(failed?.stderr, /redis-server .*apt-get install -y redis-server/, 'names redis-server and its install')
  t.match(failed?.stderr, /chromium .*apt-get install -y chromium/, 'names chromium and its install')
  t.match(failed?.stderr, /bash \.ci\/run/, 'and the one command that does both')
  await t.resolves(run(process.execPath, ['scripts/preflight.js'], { cwd: root }), 'and passes on this machine')
})
