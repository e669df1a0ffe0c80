// The module hooks that run the suite's TypeScript (registered by scripts/ts-loader.js, .taprc's node-arg):
// each .ts file transformed by esbuild alone, types stripped, line for line with an inline source map, so
// V8's coverage maps back to the source's own lines. tsx, which ran it before, minifies whitespace (a module
// becomes about three lines): coverage, counted by line, then called every module 100% covered whatever ran.
// An import of `./x.js` finds `./x.ts`, as TypeScript's NodeNext resolution writes it. What esbuild made is kept
// on disk (node_modules/.cache/rate-guard-ts/, by the source's hash): the suite's 138 processes each load the
// same 150 files, and a process that finds them all there never starts esbuild's service.
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { fileURLToPath, pathToFileURL } from 'node:url'

const TS = /\.(c|m)?ts$/
const CACHE = fileURLToPath(new URL('../node_modules/.cache/rate-guard-ts/', import.meta.url))
/** Changes what is cached when the transform does. */
const VERSION = '2'

export async function resolve (specifier, context, next) {
  const relative = specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('file:')
  if (!relative || !/\.(c|m)?js$/.test(specifier) || context.parentURL === undefined) return await next(specifier, context)
  // Looked up before asking Node, not after it fails: a failed resolution tries the specifier as CommonJS would
  // and builds an error with its stack, about 0.15 s of CPU in each process that imports lib/. A .js that is
  // there is still the one taken.
  const ts = specifier.replace(/js$/, 'ts')
  if (!existsSync(fileOf(specifier, context.parentURL)) && existsSync(fileOf(ts, context.parentURL))) return await next(ts, context)
  return await next(specifier, context)
}

/** The file `specifier` names from `parent`, or '' when it names none. */
function fileOf (specifier, parent) {
  try {
    const url = specifier.startsWith('/') ? pathToFileURL(specifier) : new URL(specifier, parent)
    return url.protocol === 'file:' ? fileURLToPath(url) : ''
  } catch {
    return ''
  }
}

export async function load (url, context, next) {
  if (!url.startsWith('file:') || !TS.test(url)) return await next(url, context)
  const path = fileURLToPath(url)
  const commonjs = url.endsWith('.cts')
  const source = await readFile(path, 'utf8')
  const cached = `${CACHE}${createHash('sha1').update(`${VERSION}\0${path}\0${process.versions.node}\0${source}`).digest('hex')}.js`
  let code
  try {
    code = readFileSync(cached, 'utf8')
  } catch {
    const { transform } = await import('esbuild')
    code = (await transform(source, {
      loader: 'ts',
      format: commonjs ? 'cjs' : 'esm',
      sourcemap: 'inline',
      // The map without the source in it: Node and the coverage report read the .ts from disk. Each test
      // process's coverage file carried every lib/ file's source twice over (base64 in the map, then in JSON):
      // 90 of the run's 107 MB of .tap/coverage, written by each process as it exits and read by the report.
      sourcesContent: false,
      sourcefile: path,
      target: `node${process.versions.node}`
    })).code
    // Written whole, then renamed: a process beside never reads half a file.
    mkdirSync(CACHE, { recursive: true })
    const part = `${cached}.${process.pid}`
    writeFileSync(part, code)
    renameSync(part, cached)
  }
  return { format: commonjs ? 'commonjs' : 'module', source: code, shortCircuit: true }
}
