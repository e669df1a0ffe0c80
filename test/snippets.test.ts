// Every ```ts and ```js block of README.md and docs/*.md, and every file in examples/, compiled as an app's
// tsc would compile it against the BUILT package (npm run build first; `npm test` does it in pretest):
// `import rateGuard from 'fastify-rate-guard'` resolves by the package's own name through package.json
// "exports" to dist/index.d.ts, as in types/. The settings are test/fixtures/snippets/tsconfig.json (strict,
// skipLibCheck false, checkJs), under three resolutions: node16, nodenext, and esnext + bundler. Each block is
// a module of its own; the names a fragment takes from the text around it (`app`, `search`, …) are declared
// once in PRELUDE below. A block whose fence says ```ts fragment is not code and is not held to compile, but it
// must fail to: a fragment that compiles has its marker removed. SNIPPETS_README=<file> reads that file in
// place of README.md (to try an edited copy). A CommonJS TypeScript app, test/fixtures/snippets/consumer.cts,
// is compiled with the same settings: clean under node20 and nodenext, refused under node16 (see CONSUMER).
import t from 'tap'
import ts from 'typescript'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { FULL } from './helpers/thorough.js'

// TypeScript compiles every snippet twice (nodenext, bundler; node16 too under FULL=1), CPU-bound: 27 s on a quiet
// machine for three, up to 45 s beside a CPU-bound process. A hang still fails within three minutes.
t.setTimeout(180_000)

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const FIXTURE = join(ROOT, 'test', 'fixtures', 'snippets')
/** `ws`'s types, which the package does not install (@fastify/websocket's typings, the WebSocket example and docs use them). */
const WS_TYPES = join(FIXTURE, 'ws.d.ts')

// What a block may use without declaring it: an app, the plugin, and the handlers and helpers the text
// around a block speaks of. A block imports from here (on its first line, so its lines keep their numbers)
// each of these names it does not declare itself; nothing is global, and examples/ sees none of them.
const PRELUDE = `
import type { FastifyInstance, RouteHandlerMethod } from 'fastify'
import type { Redis, ClusterNode } from 'ioredis'
export { Cluster } from 'ioredis'
export { default as rateGuard } from 'fastify-rate-guard'
export declare const app: FastifyInstance
export declare const redis: Redis
export declare const nodes: ClusterNode[]
export declare const keyHash: string
export declare const apiKeys: { has (apiKey: string): Promise<boolean> }
export declare const model: { complete (prompt: unknown): Promise<{ text: string, usage: { totalTokens: number } }> }
export declare const search: RouteHandlerMethod, health: RouteHandlerMethod, login: RouteHandlerMethod
export declare const metrics: RouteHandlerMethod, geocode: RouteHandlerMethod, handler: RouteHandlerMethod
export declare const a: RouteHandlerMethod, b: RouteHandlerMethod
`
const PRELUDE_NAMES = ts.createSourceFile('prelude.ts', PRELUDE, ts.ScriptTarget.ES2022).statements.flatMap(s =>
  ts.isVariableStatement(s)
    ? s.declarationList.declarations.map(d => (d.name as ts.Identifier).text)
    : ts.isExportDeclaration(s) && s.exportClause !== undefined && ts.isNamedExports(s.exportClause)
      ? s.exportClause.elements.map(e => e.name.text)
      : [])

/** The names a block declares at its top level (imports, variables, functions, classes). */
function declaredNames (code: string): Set<string> {
  const names = new Set<string>()
  const add = (name: ts.BindingName | undefined): void => {
    if (name === undefined) return
    if (ts.isIdentifier(name)) names.add(name.text)
    else for (const element of name.elements) if (!ts.isOmittedExpression(element)) add(element.name)
  }
  for (const statement of ts.createSourceFile('block.ts', code, ts.ScriptTarget.ES2022).statements) {
    if (ts.isImportDeclaration(statement)) {
      const clause = statement.importClause
      add(clause?.name)
      const bindings = clause?.namedBindings
      if (bindings !== undefined) {
        if (ts.isNamespaceImport(bindings)) add(bindings.name)
        else for (const element of bindings.elements) add(element.name)
      }
    } else if (ts.isVariableStatement(statement)) {
      for (const declaration of statement.declarationList.declarations) add(declaration.name)
    } else if (ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement)) {
      add(statement.name)
    }
  }
  return names
}

interface Block {
  /** Where the block is, for messages: `README.md:7` (the line of its opening fence). */
  where: string
  /** The line of its opening fence, 1-based. */
  line: number
  lang: 'ts' | 'js'
  fragment: boolean
  code: string
}

const FENCE = /^ {0,3}(`{3,})\s*([^`\s]*)([^`]*)$/

/** The ```ts and ```js blocks of one markdown text (```typescript, ```javascript, ```mjs count too). */
export function extractBlocks (name: string, text: string): Block[] {
  const blocks: Block[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!)
    if (open === null) continue
    const [, ticks, lang, rest] = open as unknown as [string, string, string, string]
    let end = i + 1
    while (end < lines.length && !new RegExp(`^ {0,3}\`{${ticks.length},}\\s*$`).test(lines[end]!)) end++
    const kind = ({ ts: 'ts', typescript: 'ts', js: 'js', javascript: 'js', mjs: 'js' } as const)[lang.toLowerCase() as 'ts']
    if (kind !== undefined) {
      blocks.push({
        where: `${name}:${i + 1}`,
        line: i + 1,
        lang: kind,
        fragment: rest.trim().split(/\s+/).includes('fragment'),
        code: lines.slice(i + 1, end).join('\n') + '\n'
      })
    }
    i = end
  }
  return blocks
}

/** README.md (or SNIPPETS_README) and every docs/*.md, with the names messages give them. */
function markdownFiles (): Array<{ name: string, path: string }> {
  const files = [{ name: 'README.md', path: process.env.SNIPPETS_README ?? join(ROOT, 'README.md') }]
  const docs = join(ROOT, 'docs')
  if (existsSync(docs)) {
    for (const file of readdirSync(docs).filter(f => f.endsWith('.md')).sort()) {
      files.push({ name: `docs/${file}`, path: join(docs, file) })
    }
  }
  return files
}

const BASE = ((): ts.CompilerOptions => {
  const path = join(FIXTURE, 'tsconfig.json')
  const read = ts.readConfigFile(path, ts.sys.readFile)
  if (read.error !== undefined) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'))
  return ts.convertCompilerOptionsFromJson(read.config.compilerOptions, FIXTURE, path).options
})()

const CONFIGS: Record<string, ts.CompilerOptions> = {
  node16: { ...BASE, module: ts.ModuleKind.Node16, moduleResolution: ts.ModuleResolutionKind.Node16 },
  nodenext: { ...BASE, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext },
  bundler: { ...BASE, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler }
}

// Parsed files, shared by the programs (as a language service shares them): the node_modules typings are
// parsed once, not once per program.
const parsed = new Map<string, ts.SourceFile | undefined>()

/**
 * Compiles `files` (path -> text, held in memory; every other file is read from disk) plus `roots` from disk,
 * and returns each file's errors as `line: TSnnnn message`, with lines counted from 1 in that file.
 */
function compile (options: ts.CompilerOptions, files: Map<string, string>, roots: string[] = []): Map<string, string[]> {
  const host = ts.createCompilerHost(options, true)
  const fileExists = host.fileExists.bind(host)
  const readFile = host.readFile.bind(host)
  host.fileExists = file => files.has(file) || fileExists(file)
  host.readFile = file => files.get(file) ?? readFile(file)
  host.getSourceFile = (file, language) => {
    const settings = typeof language === 'object' ? language : { languageVersion: language }
    const text = files.get(file)
    const key = `${file}|${settings.languageVersion}|${settings.impliedNodeFormat}`
    if (text === undefined && parsed.has(key)) return parsed.get(key)
    const source = text ?? ts.sys.readFile(file)
    const sourceFile = source === undefined ? undefined : ts.createSourceFile(file, source, settings, true)
    if (text === undefined) parsed.set(key, sourceFile)
    return sourceFile
  }
  const program = ts.createProgram({ rootNames: [...files.keys(), ...roots, WS_TYPES], options, host })
  const errors = new Map<string, string[]>()
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const file = d.file?.fileName ?? '(options)'
    const line = d.file !== undefined && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0
    const list = errors.get(file) ?? []
    list.push(`${line}: TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`)
    errors.set(file, list)
  }
  return errors
}

const EXAMPLES = join(ROOT, 'examples')
const examples = readdirSync(EXAMPLES).filter(f => /\.[cm]?[jt]s$/.test(f)).sort().map(f => join(EXAMPLES, f))

/**
 * Each block's errors under `options`, with lines given in the markdown file (`README.md:8: TS2307 …`), and
 * each file of `roots`' (`examples/app.js:3: TS…`); an error anywhere else (the prelude, a typing the
 * package ships) is listed under `elsewhere`. One program holds them all, so the typings are checked once.
 */
function check (options: ts.CompilerOptions, blocks: Block[], roots: string[] = []): { blocks: Map<Block, string[]>, files: Map<string, string[]>, elsewhere: string[] } {
  const files = new Map([[join(FIXTURE, 'prelude.ts'), PRELUDE]])
  const byPath = new Map<string, Block>()
  for (const block of blocks) {
    const path = join(FIXTURE, `${block.where.replace(/[/:.]/g, '_')}.${block.lang}`)
    const own = declaredNames(block.code)
    const take = PRELUDE_NAMES.filter(name => !own.has(name))
    files.set(path, `import { ${take.join(', ')} } from './prelude.js'; ${block.code}`)
    byPath.set(path, block)
  }
  const errors = compile(options, files, roots)
  const result = { blocks: new Map(blocks.map(block => [block, [] as string[]])), files: new Map(roots.map(f => [f, [] as string[]])), elsewhere: [] as string[] }
  for (const [file, list] of errors) {
    const block = byPath.get(file)
    const name = relative(ROOT, file)
    if (block !== undefined) {
      const markdown = block.where.slice(0, block.where.lastIndexOf(':'))
      for (const e of list) {
        const at = e.indexOf(':')
        result.blocks.get(block)!.push(`${markdown}:${block.line + Number(e.slice(0, at))}${e.slice(at)}`)
      }
    } else {
      (result.files.get(file) ?? result.elsewhere).push(...list.map(e => `${name}:${e}`))
    }
  }
  return result
}

t.test('a block that does not compile is named by file:line with the TypeScript error', async t => {
  const text = '# A\n\nSome text.\n\n```ts\nconst n: number = 1\nconst s: string = n\n```\n\n```sh\nls\n```\n'
  const blocks = extractBlocks('docs/x.md', text)
  t.equal(blocks.length, 1, 'only the ts block')
  t.equal(blocks[0]!.where, 'docs/x.md:5')
  // skipLibCheck here: the typings are checked below; this only proves the message.
  t.strictSame(check({ ...CONFIGS.node16, skipLibCheck: true }, blocks).blocks.get(blocks[0]!),
    ["docs/x.md:7: TS2322 Type 'number' is not assignable to type 'string'."])
})

t.test('fences: info strings, longer fences, the fragment marker', async t => {
  const text = '````ts fragment\n```js\nnot a fence inside\n```\n````\n```javascript title="x"\nlet x = 1\n```\n```json\n{}\n```\n'
  const blocks = extractBlocks('y.md', text)
  t.strictSame(blocks.map(b => [b.where, b.lang, b.fragment, b.code]), [
    ['y.md:1', 'ts', true, '```js\nnot a fence inside\n```\n'],
    ['y.md:6', 'js', false, 'let x = 1\n']
  ])
  t.strictSame([...declaredNames('import a, { b as c } from "x"\nimport * as d from "y"\nconst { e, f: [g] } = h\nfunction i () {}\nclass j {}\nk()\n')],
    ['a', 'c', 'd', 'e', 'g', 'i', 'j'], 'the names a block declares itself (it takes none of those from the prelude)')
})

const blocks = markdownFiles().flatMap(({ name, path }) => extractBlocks(name, readFileSync(path, 'utf8')))

// A `.cts` compiles to require(), which loads this ES module from Node 20.19 on. TypeScript models that under
// `module` node20 and nodenext (TypeScript 5.9 or later), where `import x = require(…)` gives what the package
// exports as 'module.exports'; node16 and node18 model a Node that cannot, and refuse the import (TS1471).
// docs/migrating.md tells CommonJS apps so; the app is compiled in the node16 and nodenext programs below (one
// program less each) and alone under node20.
const CONSUMER = join(FIXTURE, 'consumer.cts')
const REFUSED = /consumer\.cts:4: TS1471 Module 'fastify-rate-guard' cannot be imported using this construct/

// node16 reads an ES module's blocks as nodenext does (they part only on require()): in `npm test` its program
// compiles the CommonJS app alone, and every block and example under FULL=1 (test/helpers/thorough.ts).
for (const [config, options] of Object.entries(CONFIGS)) {
  const all = FULL || config !== 'node16'
  t.test(`${config}: ${all ? 'every ts and js block of README.md and docs/*.md, every file of examples/' : 'the CommonJS app alone'}`, async t => {
    t.ok(blocks.length > 0, 'the README has blocks to check')
    const found = all ? check(options, blocks, config === 'bundler' ? examples : [...examples, CONSUMER]) : check(options, [], [CONSUMER])
    t.strictSame(found.elsewhere, [], 'no error in the prelude or in a typing the package ships (dist/*.d.ts)')
    for (const [block, own] of found.blocks) {
      const first = block.code.slice(0, block.code.indexOf('\n'))
      if (block.fragment) {
        t.ok(own.length > 0, `${block.where} is marked fragment, yet compiles: drop the marker`)
      } else {
        t.strictSame(own, [], `${block.where} ${block.lang}: ${first}`)
      }
    }
    for (const [file, own] of found.files) {
      const name = relative(ROOT, file)
      if (file === CONSUMER && config === 'node16') t.match(own[0], REFUSED, `${name}: require() of the package is refused`)
      else t.strictSame(own, [], name)
    }
  })
}

t.test('node20: a CommonJS TypeScript app (.cts) requires the package, typed as require() answers', async t => {
  const node20 = { ...BASE, module: ts.ModuleKind.Node20, moduleResolution: ts.ModuleResolutionKind.Node16 }
  t.strictSame(Object.fromEntries(compile(node20, new Map(), [CONSUMER])), {}, 'no error in consumer.cts nor in a typing it meets')
})
