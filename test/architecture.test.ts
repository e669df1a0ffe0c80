// The structure ARCHITECTURE.md draws, held against the code: lib/ has no import circle, every file sits on one
// layer and imports nothing above it (by path, not by name), every file of lib/ is named on the page by its path
// (and every file the page names exists), and no line, file or function outgrows what a reader takes in at once.
import { readFileSync, readdirSync } from 'node:fs'
import { dirname, join, normalize, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import ts from 'typescript'

const root = fileURLToPath(new URL('..', import.meta.url))
const lib = join(root, 'lib')
const files = (readdirSync(lib, { recursive: true }) as string[]).filter(file => file.endsWith('.ts')).map(file => normalize(file)).sort()

/** What each file of lib/ imports of lib/ (type-only imports too: a circle of types is still a circle to read). */
const imports = new Map(files.map(file => {
  const source = readFileSync(join(lib, file), 'utf8')
  const targets = [...source.matchAll(/^(?:import|export)\b[^'"]*?from\s+'(\.[^']+)'/gms)]
    .map(([, spec]) => normalize(join(dirname(file), spec!.replace(/\.js$/, '.ts'))))
  return [file, targets] as const
}))

/** Every circle of imports, each as the files it goes through (a depth-first walk that meets a file it is still in). */
function circles (): string[][] {
  const found: string[][] = []
  const state = new Map<string, 'open' | 'done'>()
  const path: string[] = []
  const visit = (file: string): void => {
    if (state.get(file) === 'done') return
    if (state.get(file) === 'open') {
      found.push(path.slice(path.indexOf(file)))
      return
    }
    state.set(file, 'open')
    path.push(file)
    for (const next of imports.get(file) ?? []) visit(next)
    path.pop()
    state.set(file, 'done')
  }
  for (const file of files) visit(file)
  return found
}

t.test('lib/ has no import circle', async t => {
  t.strictSame(circles(), [])
})

/**
 * ARCHITECTURE.md's layers, top to bottom, each file of lib/ by its path: a folder (`request/`) or a file
 * (`connect.ts`, `stores/key-names.ts`), so two files of one name in different folders are told apart. The
 * options and the stores sit side by side on one floor, above the bottom floor: neither imports the other.
 */
const LAYERS: ReadonlyArray<{ name: string, level: number, paths: readonly string[] }> = [
  { name: 'operator tools', level: 6, paths: ['operator/'] },
  { name: 'adapters', level: 6, paths: ['adapters/'] },
  { name: 'registration', level: 5, paths: ['index.ts', 'routes.ts', 'declared.ts', 'connect.ts', 'registrations.ts', 'limiters.ts', 'admin.ts', 'admin-api.ts'] },
  { name: 'request', level: 4, paths: ['request/', 'budgets.ts', 'headers.ts'] },
  {
    name: 'decision',
    level: 3,
    paths: ['decider.ts', 'guard.ts', 'connection-watch.ts', 'batcher.ts', 'breaker.ts', 'held-answers.ts', 'changes.ts', 'silence.ts',
      'late.ts', 'trouble.ts', 'stats.ts', 'leases.ts', 'shed/']
  },
  { name: 'stores', level: 2, paths: ['stores/'] },
  { name: 'options', level: 2, paths: ['options/'] },
  { name: 'bottom floor', level: 1, paths: ['types.ts', 'shed-types.ts', 'errors.ts', 'channels.ts', 'deadline.ts', 'awaitable.ts', 'duration.ts', 'calendar.ts', 'oldest.ts', 'slots.ts', 'ip.ts', 'identity.ts', 'callbacks.ts', 'addressless.ts', 'forwarded.ts', 'warnings.ts', 'docs-links.ts', 'algorithms/'] }
]

/** The layers that hold `file` (a path under lib/): exactly one, unless the table above is wrong. */
function layersOf (file: string): Array<typeof LAYERS[number]> {
  const path = file.split(sep).join('/')
  return LAYERS.filter(layer => layer.paths.some(p => p.endsWith('/') ? path.startsWith(p) : path === p))
}

t.test('every file of lib/ sits on one layer, and imports only its own layer and those below', async t => {
  for (const file of files) {
    const [layer, ...more] = layersOf(file)
    t.ok(layer !== undefined && more.length === 0, `${file}: on one layer (${[layer, ...more].filter(Boolean).map(l => l!.name).join(', ') || 'none'})`)
    if (layer === undefined) continue
    const above = imports.get(file)!.filter(target => {
      const to = layersOf(target)[0]
      return to === undefined || to.level > layer.level || (to.level === layer.level && to !== layer)
    })
    t.strictSame(above, [], `${file} (${layer.name}) imports nothing above it, nor beside it`)
  }
})

t.test('the operator tools (lib/operator/, the subpath exports) sit beside the plugin: nothing else imports them', async t => {
  const operator = files.filter(file => file.startsWith('operator/'))
  t.ok(operator.length >= 6, 'page, view, names, series, prometheus, opentelemetry')
  for (const file of files.filter(file => !file.startsWith('operator/'))) {
    t.strictSame(imports.get(file)!.filter(target => target.startsWith('operator/')), [], `${file} imports no operator tool`)
    const source = readFileSync(join(lib, file), 'utf8')
    t.notMatch(source, /from '(prom-client|@opentelemetry\/api)'/, `${file} imports no optional peer`)
  }
  // What a user imports besides the plugin: the channels' names and messages, IP forms, key hashes, the types.
  const used = new Set(['channels.ts', 'ip.ts', 'types.ts', 'stores/key-names.ts'])
  for (const file of operator) {
    const others = imports.get(file)!.filter(target => !target.startsWith('operator/') && !used.has(target))
    t.strictSame(others, [], `${file} imports only its folder and ${[...used].join(', ')}`)
  }
})

/**
 * The files of lib/ that ARCHITECTURE.md names, each by its path under lib/, and the bare names it mentions
 * besides. A file is named by its path written out (`stores/leases.ts`, `lib/stores/leases.ts`), by a bare name
 * inside a folder's block of the page's folder listing (a code line opening with `lib/<folder>/`, and the indented
 * lines after it: `  wait.ts` under `lib/options/` is `options/wait.ts`), or, for a file at the top of lib/, by
 * its bare name anywhere else. So each of two files of one name (`request/wait.ts`, `options/wait.ts`) must be
 * named in its own right. A bare name elsewhere may still mention a file of a folder the page has placed it in
 * (`memory.ts`, in the stores' paragraph).
 */
function namedOnPage (page: string): { paths: Set<string>, bare: Set<string> } {
  const paths = new Set<string>()
  const bare = new Set<string>()
  const folders = new Set(files.filter(file => file.includes(sep)).map(file => file.split(sep)[0]!))
  let code = false
  let block: string | undefined
  for (const line of page.split('\n')) {
    if (line.startsWith('```')) {
      code = !code
      block = undefined
      continue
    }
    const opens = code ? /^lib\/((?:[\w-]+\/)+)/.exec(line) : null
    if (opens !== null) block = opens[1]
    else if (!code || !/^\s/.test(line)) block = undefined
    for (const [written] of line.matchAll(/(?<![\w/.-])(?:[\w-]+\/)*[\w-]+\.ts\b/g)) {
      const path = written!.replace(/^lib\//, '')
      if (path.includes('/')) {
        // A path outside lib/ (test/, types/, docs/) is none of its files.
        if (written!.startsWith('lib/') || folders.has(path.split('/')[0]!)) paths.add(path)
      } else if (block !== undefined) paths.add(`${block}${path}`)
      else bare.add(path)
    }
  }
  return { paths, bare }
}

t.test('ARCHITECTURE.md names every file of lib/ by its path, and only files that exist', async t => {
  const { paths, bare } = namedOnPage(readFileSync(join(root, 'ARCHITECTURE.md'), 'utf8'))
  const slashed = files.map(file => file.split(sep).join('/'))
  const top = new Set(slashed.filter(file => !file.includes('/')))
  const unnamed = slashed.filter(file => !paths.has(file) && !(top.has(file) && bare.has(file)))
  t.strictSame(unnamed, [], 'every file of lib/ is on the page, by its path')
  const exists = new Set(slashed)
  t.strictSame([...paths].filter(path => !exists.has(path)), [], 'every path the page names is a file of lib/')
  const names = new Set(slashed.map(file => file.split('/').pop()!))
  t.strictSame([...bare].filter(name => !names.has(name)), [], 'every bare name the page mentions is a file of lib/')
})

/** How long a line of lib/ and lua/ may be, and what a file and a function may grow to. */
const LIMITS = { lineWidth: 160, fileLines: 320, functionLines: 60 }

t.test(`no line of lib/ or lua/ over ${LIMITS.lineWidth} characters`, async t => {
  const wide: string[] = []
  for (const folder of ['lib', 'lua']) {
    const all = (readdirSync(join(root, folder), { recursive: true, withFileTypes: true }))
      .filter(entry => entry.isFile()).map(entry => relative(root, join(entry.parentPath, entry.name))).sort()
    for (const file of all) {
      readFileSync(join(root, file), 'utf8').split('\n').forEach((line, i) => {
        if (line.length > LIMITS.lineWidth) wide.push(`${file.split(sep).join('/')}:${i + 1}: ${line.length} characters`)
      })
    }
  }
  t.strictSame(wide, [], `lines over ${LIMITS.lineWidth} characters`)
})

t.test(`no file of lib/ over ${LIMITS.fileLines} lines, no function over ${LIMITS.functionLines}`, async t => {
  const long: string[] = []
  for (const file of files) {
    const text = readFileSync(join(lib, file), 'utf8')
    const lines = text.split('\n').length
    if (lines > LIMITS.fileLines) long.push(`${file}: ${lines} lines`)
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined) {
        const first = source.getLineAndCharacterOfPosition(node.getStart()).line
        const last = source.getLineAndCharacterOfPosition(node.end).line
        if (last - first + 1 > LIMITS.functionLines) {
          long.push(`${relative(root, join(lib, file))}:${first + 1}: a function of ${last - first + 1} lines`)
        }
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  t.strictSame(long, [])
})
