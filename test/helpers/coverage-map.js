// tap `coverage-map` (see .taprc): whatever a test file loads, coverage is
// measured on lib/ only. Test helpers, examples, bench and dist never count.
//
// A test file that never imports lib/ (itself or through the helpers it imports) gets null: tap then runs it,
// and every process it starts, without V8's coverage at all. Its processes wrote no line of lib/ to the report
// (checked on a whole run's .tap/coverage: architecture, lua-functions, package, snippets and tarball), yet each
// paid for counting every block it ran: snippets.test.ts, TypeScript compiling the docs, took 31 and 27 s of CPU
// without it, 37 and 36 s with it. A file that reached lib/ some other way (a child given a path to run) and
// lost its coverage here could only make the run fail short of 100%, never pass a line no test ran.
import { readFileSync } from 'node:fs'
import { dirname, join, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const LIB = join(ROOT, 'lib') + sep
/** A static import or export `from '…'`, or `import('…')` with a literal: only relative ones are followed. */
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)'(\.{1,2}\/[^']+)'/gm

/** Whether `file` imports anything of lib/, itself or through the files it imports (followed once each). */
function reachesLib (file, seen = new Set()) {
  if (seen.has(file)) return false
  seen.add(file)
  let source
  try {
    source = readFileSync(file, 'utf8')
  } catch {
    return false
  }
  for (const [, specifier] of source.matchAll(IMPORT)) {
    const target = join(dirname(file), specifier)
    if (target.startsWith(LIB)) return true
    if (/\.js$/.test(target) && reachesLib(target.replace(/\.js$/, '.ts'), seen)) return true
    if (reachesLib(target, seen)) return true
  }
  return false
}

export default function coverageMap (testFile) {
  const file = join(ROOT, testFile)
  if (relative(ROOT, file).startsWith('..')) return ['lib/**/*.ts']
  return reachesLib(file) ? ['lib/**/*.ts'] : null
}
