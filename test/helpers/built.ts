// dist/ as the tests that load the package as an app does (from dist/, through its exports) find it: the build
// of lib/ as it stands. `npm test` builds it before the run (pretest); after editing lib/ and running `npx tap`,
// run `npm run build`. No test builds it itself: a build rewrites dist/ while the files running beside it read
// it (the tarball test did, and the snippets beside it saw a .d.ts half written).
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { Test } from 'tap'

/** Fails `t` unless dist/ is at least as new as every file of lib/, naming those newer. */
export function distIsBuilt (t: Test, root: string): void {
  const built = statSync(join(root, 'dist', 'index.js')).mtimeMs
  const newer = (readdirSync(join(root, 'lib'), { recursive: true }) as string[])
    .filter(file => file.endsWith('.ts') && statSync(join(root, 'lib', file)).mtimeMs > built)
  t.same(newer, [], 'dist/ is at least as new as lib/ (npm test builds it first; after `npx tap`, run `npm run build`)')
}
