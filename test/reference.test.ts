// docs/reference.md names everything the package offers, and docs/options.md stays readable: checked against
// the code, so an export, an error or warning code, a subpath export or an option added without its line in
// the docs fails here, naming what is missing. The package's exports are read with the TypeScript compiler
// (value and type-only exports alike) from lib/index.ts; the subpath exports from package.json "exports" as it
// stands when the test runs (each subpath's module read from its lib/ source, or its built .d.ts); the codes
// by scanning lib/**/*.ts for 'FST_RATE_GUARD_…' string literals; the options from lib/options/table.ts.
import t from 'tap'
import ts from 'typescript'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { OPTIONS } from '../lib/options/table.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const REFERENCE = readFileSync(join(ROOT, 'docs', 'reference.md'), 'utf8')
const OPTIONS_PAGE = readFileSync(join(ROOT, 'docs', 'options.md'), 'utf8')

// The longest line docs/options.md may have, table rows included. 200, not the 120 of prose: a table row is
// one line whatever its cells hold, and a row with an option, its default and a one-line meaning (plus a link
// to the paragraph below the table that explains it) fits in 200; its prose is wrapped at 120.
const LONGEST_LINE = 200

/** A TypeScript program of `files` and what they import. */
function programOf (files: string[]): ts.Program {
  return ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    allowImportingTsExtensions: true,
    allowJs: true,
    noEmit: true,
    skipLibCheck: true,
    types: ['node']
  })
}

// One program for every file read: lib/index.ts and every subpath's module (a program costs seconds, and the
// adapters' bring mercurius's, graphql's and ws's types), made with the first file asked for.
let last: ts.Program | undefined

/** The names `file` exports, value and type-only ones alike, as TypeScript resolves them (re-exports included). */
function exportsOf (file: string): string[] {
  const roots = [join(ROOT, 'lib', 'index.ts'), ...subpaths().flatMap(({ module }) => module === undefined ? [] : [module])]
  const program = last?.getSourceFile(file) !== undefined ? last : programOf([...roots, file])
  last = program
  const source = program.getSourceFile(file)
  if (source === undefined) throw new Error(`TypeScript could not read ${file}`)
  const checker = program.getTypeChecker()
  const module = checker.getSymbolAtLocation(source)
  // A file with no import or export is no module: it exports nothing a reader could import by name.
  if (module === undefined) return []
  return checker.getExportsOfModule(module).map(symbol => symbol.getName())
}

/** Every .ts file under `dir`. */
function sources (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter(entry => entry.isFile() && entry.name.endsWith('.ts'))
    .map(entry => join(entry.parentPath, entry.name))
}

/** The `FST_RATE_GUARD_*` codes written as string literals anywhere in lib/ (errors, warnings, whatever comes). */
function codesInLib (): Map<string, string> {
  const codes = new Map<string, string>()
  for (const file of sources(join(ROOT, 'lib'))) {
    for (const [, code] of readFileSync(file, 'utf8').matchAll(/['"`](FST_RATE_GUARD_[A-Z_]+)['"`]/g)) {
      if (code !== undefined && !codes.has(code)) codes.set(code, relative(ROOT, file))
    }
  }
  return codes
}

/** The first path a package.json "exports" target leads to (conditions: types first, then the rest in order). */
function targetOf (target: unknown): string | undefined {
  if (typeof target === 'string') return target
  if (target === null || typeof target !== 'object') return undefined
  const conditions = target as Record<string, unknown>
  for (const key of ['types', ...Object.keys(conditions)]) {
    const found = targetOf(conditions[key])
    if (found !== undefined) return found
  }
  return undefined
}

/**
 * A subpath's module to read its exports from: its lib/ source when there is one (dist/x.js is lib/x.ts), else
 * the file itself (a .d.ts, or JavaScript), when it exists; none for a data file (JSON) or one not built yet.
 */
function moduleOf (target: string): string | undefined {
  if (!/\.[cm]?[jt]s$/.test(target)) return undefined
  const path = join(ROOT, target)
  const source = path.replace(join(ROOT, 'dist'), join(ROOT, 'lib')).replace(/(\.d)?\.[cm]?[jt]s$/, '.ts')
  if (existsSync(source)) return source
  return existsSync(path) ? path : undefined
}

/** The subpath exports of package.json other than the package itself and package.json. */
function subpaths (): Array<{ subpath: string, module: string | undefined }> {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string, exports: Record<string, unknown> }
  return Object.entries(pkg.exports)
    .filter(([key]) => key !== '.' && key !== './package.json')
    .map(([key, target]) => {
      const path = targetOf(target)
      return { subpath: `${pkg.name}${key.slice(1)}`, module: path === undefined ? undefined : moduleOf(path) }
    })
}

/** Whether the reference has an entry for `name`: a table row that starts with it in backticks. */
function hasEntry (page: string, name: string): boolean {
  return page.split('\n').some(line => line.startsWith(`| \`${name}\``))
}

t.test('every export of the package has an entry in docs/reference.md', async t => {
  const names = exportsOf(join(ROOT, 'lib', 'index.ts'))
  // A floor, so a compiler setting that silently resolved nothing cannot pass: the package has 65 today.
  t.ok(names.length >= 60, `read ${names.length} exports from lib/index.ts`)
  t.ok(names.includes('RequestCharge') && names.includes('rateGuard'), 'type-only and value exports are both read')
  const missing = names.filter(name => !hasEntry(REFERENCE, name))
  t.same(missing, [], `exports without a "| \`name\` |" row in docs/reference.md: ${missing.join(', ')}`)
})

t.test('every error class of `errors` has an entry', async t => {
  const names = exportsOf(join(ROOT, 'lib', 'errors.ts'))
  t.ok(names.length >= 10, `read ${names.length} errors from lib/errors.ts`)
  const missing = names.filter(name => !hasEntry(REFERENCE, `errors.${name}`))
  t.same(missing, [], `errors without a "| \`errors.Name\` |" row in docs/reference.md: ${missing.join(', ')}`)
})

t.test('every FST_RATE_GUARD_* code in lib/ is in docs/reference.md', async t => {
  const codes = codesInLib()
  t.ok(codes.has('FST_RATE_GUARD_INVALID_OPTION') && codes.has('FST_RATE_GUARD_LATE_REPLIES'), 'the scan finds the codes')
  const missing = [...codes].filter(([code]) => !REFERENCE.includes(`\`${code}\``)).map(([code, file]) => `${code} (${file})`)
  t.same(missing, [], `codes the reference does not name: ${missing.join(', ')}`)
})

t.test('every subpath export in package.json is in docs/reference.md, with its exports', async t => {
  for (const { subpath, module } of subpaths()) {
    const at = REFERENCE.indexOf(`\`${subpath}\``)
    t.ok(at >= 0, `docs/reference.md names \`${subpath}\``)
    if (at < 0 || module === undefined) continue
    // Its names are looked for after its first mention: the section that gives it.
    const after = REFERENCE.slice(at)
    const missing = exportsOf(module).filter(name => name !== 'default' && !after.includes(`\`${name}\``))
    t.same(missing, [], `${subpath}: exports docs/reference.md does not name after it: ${missing.join(', ')}`)
  }
})

t.test('every option of lib/options/table.ts has a row in the options table of docs/options.md', async t => {
  const missing = Object.keys(OPTIONS).filter(name => !OPTIONS_PAGE.split('\n').some(line => line.startsWith(`| \`${name}\``)))
  t.same(missing, [], `options without a row in docs/options.md: ${missing.join(', ')}`)
})

t.test(`no line of docs/options.md is longer than ${LONGEST_LINE} characters`, async t => {
  const long = OPTIONS_PAGE.split('\n').flatMap((line, i) => line.length > LONGEST_LINE ? [`line ${i + 1}: ${line.length}`] : [])
  t.same(long, [], `lines over ${LONGEST_LINE} characters in docs/options.md: ${long.join(', ')}`)
})

t.test('the reference is linked from the README', async t => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  t.match(readme, /\]\(docs\/reference\.md\)/, 'README.md links docs/reference.md')
})
