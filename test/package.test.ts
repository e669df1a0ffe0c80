// What a user installs: the packed tarball carries the license, the built code and the Lua scripts, and
// package.json says what it needs (the Node version whose require() loads this ES module).
import { execFile } from 'node:child_process'
import { chmodSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const root = new URL('..', import.meta.url)
/** scripts/preflight.js, npm test's first step, with `env` (and no more of this process's environment than PATH and HOME when env gives none). */
const preflight = (env: Record<string, string>): Promise<{ stdout: string, stderr: string }> =>
  promisify(execFile)(process.execPath, ['scripts/preflight.js'], { cwd: root, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env } })

t.test('the tarball carries LICENSE, dist/ and lua/', async t => {
  const { stdout } = await promisify(execFile)('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, timeout: 60_000 })
  const files = new Set((JSON.parse(stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map(file => file.path))
  t.ok(files.has('LICENSE'), 'LICENSE')
  t.ok(files.has('dist/index.js') && files.has('dist/index.d.ts'), 'the built module and its types')
  t.ok(files.has('lua/decide.lua'), 'the Lua scripts')
  t.ok(files.has('CHANGELOG.md'), 'the CHANGELOG')
  t.ok(files.has('dashboards/grafana.json'), 'the Grafana dashboard')
  for (const tool of ['page', 'view', 'names', 'series', 'prometheus', 'opentelemetry']) {
    t.ok(files.has(`dist/operator/${tool}.js`) && files.has(`dist/operator/${tool}.d.ts`), `the operator tool ${tool}, typed`)
  }
  t.ok(files.has('dist/adapters/mercurius.js') && files.has('dist/adapters/mercurius.d.ts'), 'the Mercurius adapter, typed')
  t.notOk([...files].some(file => file.startsWith('test/') || file.startsWith('lib/')), 'no tests, no sources')
})

t.test('package.json: MIT as the LICENSE says, engines from the first Node whose require() loads an ES module, a git install builds', async t => {
  const pkg = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { license: string, engines: { node: string }, scripts: Record<string, string> }
  t.equal(pkg.license, 'MIT')
  t.match(readFileSync(new URL('LICENSE', root), 'utf8'), /^MIT License/)
  t.equal(pkg.engines.node, '>=20.19')
  // prepare, not prepack: installing from git, npm's pacote (lib/git.js) installs the dev deps, then lib/dir.js
  // runs *only* prepare ("pre/post-pack is run by the npm CLI for publish and pack") before packing the clone:
  // with prepack alone a git install would have no dist/. A tarball from the registry runs neither.
  // The cost, seen with npm 11.19 installing the packed tarball: "npm warn install-scripts 1 package has install
  // scripts not yet covered by allowScripts: fastify-rate-guard@0.1.0 (prepare: tsc -p tsconfig.json)", though
  // npm does not run prepare for a tarball. Dropping it would silence that and break installs from git.
  // prepack as well: npm pack and npm publish run it (and prepare too, but only a prepack is what a pack is
  // sure to run whatever npm decides about prepare next), so a tarball always ships a fresh build.
  t.equal(pkg.scripts.prepare, pkg.scripts.build, 'prepare builds, so an install from git has dist/')
  t.equal(pkg.scripts.prepack, pkg.scripts.build, 'prepack builds, so a pack ships a fresh dist/')
})

t.test('the operator tools and adapters are subpath exports, their libraries optional peers', async t => {
  const pkg = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as {
    exports: Record<string, unknown>, peerDependencies: Record<string, string>, peerDependenciesMeta: Record<string, { optional: boolean }>
  }
  for (const [subpath, file] of [['operator-page', 'page'], ['prometheus', 'prometheus'], ['opentelemetry', 'opentelemetry']] as const) {
    t.strictSame(pkg.exports[`./${subpath}`], { types: `./dist/operator/${file}.d.ts`, default: `./dist/operator/${file}.js` }, subpath)
  }
  t.equal(pkg.exports['./grafana-dashboard.json'], './dashboards/grafana.json', 'the dashboard, as a file')
  for (const peer of ['prom-client', '@opentelemetry/api', 'mercurius', 'graphql']) {
    t.ok(pkg.peerDependencies[peer], `${peer} a peer`)
    t.equal(pkg.peerDependenciesMeta[peer]?.optional, true, `${peer} optional: only its subpath imports it`)
  }
})

t.test('package.json says where the project lives: repository, homepage, bugs', async t => {
  const pkg = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as Record<string, unknown>
  const home = 'https://github.com/fastify-rate-guard/fastify-rate-guard'
  t.strictSame(pkg.repository, { type: 'git', url: `git+${home}.git` })
  t.equal(pkg.homepage, `${home}#readme`)
  t.strictSame(pkg.bugs, { url: `${home}/issues` })
})

t.test('npm test stops at once when the machine cannot install what it lacks, naming the command that does', async t => {
  const failed = await preflight({ PATH: '/nonexistent', CHROMIUM_PATH: '/nonexistent/chromium' }).then(() => null, (err: { code: number, stderr: string }) => err)
  t.equal(failed?.code, 1, 'it fails')
  t.match(failed?.stderr, /redis-server .*apt-get install -y redis-server/, 'names redis-server and its install')
  t.match(failed?.stderr, /chromium .*apt-get install -y chromium/, 'names chromium and its install')
  t.match(failed?.stderr, /luac5\.4 .*apt-get install -y lua5\.4/, 'and luac5.4, whose check is skipped without it')
  t.match(failed?.stderr, /One command .*: sudo apt-get install -y redis-server chromium lua5\.4/, 'and the one command that installs them all')
  await t.resolves(preflight({}), 'and passes on this machine')
})

t.test('npm test installs what the machine lacks with apt-get when it can, then checks again', async t => {
  const dir = t.testdir()
  const log = join(dir, 'apt-get.log')
  const chromium = join(dir, 'chromium')
  // An apt-get that installs each package it is given where the check looks for it; sudo -n runs what follows.
  const fake = (name: string, body: string): void => { writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`); chmodSync(join(dir, name), 0o755) }
  fake('apt-get', `echo "$*" >> ${log}
[ "$1" = install ] || exit 0
for p in "$@"; do case "$p" in
  redis-server) : > ${join(dir, 'redis-server')}; chmod +x ${join(dir, 'redis-server')} ;;
  chromium) : > ${chromium} ;;
  lua5.4) : > ${join(dir, 'luac5.4')}; chmod +x ${join(dir, 'luac5.4')} ;;
esac; done`)
  fake('sudo', '[ "$1" = -n ] && shift; "$@"')

  const installed = await preflight({ PATH: dir, CHROMIUM_PATH: chromium })
  t.match(installed.stderr, /installing what this machine lacks with apt-get: redis-server chromium lua5\.4/, 'says what it installs')
  t.strictSame(readFileSync(log, 'utf8').trim().split('\n'), ['update -qq', 'install -y -qq --no-install-recommends redis-server chromium lua5.4'], 'one update, one install of all three')
  await preflight({ PATH: dir, CHROMIUM_PATH: chromium })
  t.equal(readFileSync(log, 'utf8').trim().split('\n').length, 2, 'and nothing more once all is there')

  const refused = await preflight({ PATH: dir, CHROMIUM_PATH: join(dir, 'elsewhere'), RATE_GUARD_TEST_INSTALL: 'no' }).then(() => null, (err: { code: number, stderr: string }) => err)
  t.equal(refused?.code, 1, 'RATE_GUARD_TEST_INSTALL=no refuses the install, and the run stops')
  t.equal(readFileSync(log, 'utf8').trim().split('\n').length, 2, 'without running apt-get')

  fake('apt-get', `echo "$*" >> ${log}; [ "$1" = install ] && exit 100; exit 0`)
  const broken = await preflight({ PATH: dir, CHROMIUM_PATH: join(dir, 'elsewhere') }).then(() => null, (err: { code: number, stderr: string }) => err)
  t.equal(broken?.code, 1, 'an install that fails stops the run')
  t.match(broken?.stderr, /apt-get install .* failed \(exit 100\)[^]*chromium at .*elsewhere/, 'saying so, and what is still missing')
})
