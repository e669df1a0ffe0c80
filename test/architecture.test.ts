// The structure ARCHITECTURE.md draws, held against the code: lib/ has no import circle, every file sits on one
// layer and imports nothing above it (by path, not by name), every file of lib/ is named on the page (and every file the page
// names exists), and no file or function outgrows what a reader takes in at once.
import { readFileSync, readdirSync } from 'node:fs'
import { basename, dirname, join, normalize, relative, sep } from 'node:path'
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
 * options and the stores sit side by side on the bottom floor: neither imports the other.
 */
const LAYERS: ReadonlyArray<{ name: string, level: number, paths: readonly string[] }> = [
  { name: 'operator tools', level: 6, paths: ['operator/'] },
  { name: 'registration', level: 5, paths: ['index.ts', 'routes.ts', 'declared.ts', 'connect.ts', 'registrations.ts', 'limiters.ts', 'admin.ts', 'admin-api.ts'] },
  { name: 'request', level: 4, paths: ['request/', 'budgets.ts', 'headers.ts'] },
  {
    name: 'decision',
    level: 3,
    paths: ['decider.ts', 'guard.ts', 'connection-watch.ts', 'batcher.ts', 'breaker.ts', 'held-answers.ts', 'changes.ts', 'silence.ts',
      'late.ts', 'trouble.ts', 'stats.ts', 'leases.ts']
  },
  { name: 'stores', level: 2, paths: ['stores/'] },
  { name: 'options', level: 2, paths: ['options/'] },
  { name: 'bottom floor', level: 1, paths: ['types.ts', 'errors.ts', 'channels.ts', 'deadline.ts', 'awaitable.ts', 'duration.ts', 'calendar.ts', 'oldest.ts', 'slots.ts', 'ip.ts', 'identity.ts', 'callbacks.ts', 'addressless.ts', 'forwarded.ts', 'warnings.ts', 'docs-links.ts', 'algorithms/'] }
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

t.test('ARCHITECTURE.md names every file of lib/, and only files that exist', async t => {
  const page = readFileSync(join(root, 'ARCHITECTURE.md'), 'utf8')
  const named = new Set([...page.matchAll(/[\w-]+\.ts\b/g)].map(([name]) => name!).filter(name => !name.endsWith('test.ts')))
  const names = new Set(files.map(file => basename(file)))
  t.strictSame(files.filter(file => !named.has(basename(file))), [], 'every file of lib/ is on the page')
  t.strictSame([...named].filter(name => !names.has(name)), [], 'every file the page names is in lib/')
})

t.test('no file of lib/ over 320 lines, no function over 80', async t => {
  const long: string[] = []
  for (const file of files) {
    const text = readFileSync(join(lib, file), 'utf8')
    const lines = text.split('\n').length
    if (lines > 320) long.push(`${file}: ${lines} lines`)
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined) {
        const first = source.getLineAndCharacterOfPosition(node.getStart()).line
        const last = source.getLineAndCharacterOfPosition(node.end).line
        if (last - first + 1 > 80) long.push(`${relative(root, join(lib, file))}:${first + 1}: a function of ${last - first + 1} lines`)
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  t.strictSame(long, [])
})
