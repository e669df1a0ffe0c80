// tap builds its Test class with the plugins .taprc names, but only in a run that finds them changed, and that
// run's test files still load the plugins tap was built with before: the runner passes their loaders on. After a
// fresh `npm ci` (tap as published: every plugin, ts-node among them), the first `npm test` ran every file through
// ts-node and mock's loader beside tsx: 7 min 26 s of tap, against 4 min 24 s for the same clone's next run
// (2026-11-29, this 2-core machine). `npm test` runs this first: it builds tap's plugins when they are not
// .taprc's (about 6 s of CPU), and does nothing when they are.
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { TapConfig } from '@tapjs/config'
import { signature } from '@tapjs/test/built'

const config = await TapConfig.load()
if (config.pluginSignature !== signature) {
  console.log('npm test: building tap with the plugins .taprc names (tap build)')
  const tap = createRequire(import.meta.url).resolve('tap/package.json').replace(/package\.json$/, 'dist/esm/run.mjs')
  const built = spawnSync(process.execPath, [tap, 'build'], { stdio: 'inherit' })
  if (built.status !== 0) process.exit(built.status ?? 1)
}
