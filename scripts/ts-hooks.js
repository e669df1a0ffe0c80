// The module hooks that run the suite's TypeScript (registered by scripts/ts-loader.js, .taprc's node-arg):
// each .ts file transformed by esbuild alone, types stripped, line for line with an inline source map, so
// V8's coverage maps back to the source's own lines. tsx, which ran it before, minifies whitespace (a module
// becomes about three lines): coverage, counted by line, then called every module 100% covered whatever ran.
// An import of `./x.js` finds `./x.ts`, as TypeScript's NodeNext resolution writes it.
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { transform } from 'esbuild'

const TS = /\.(c|m)?ts$/

export async function resolve (specifier, context, next) {
  try {
    return await next(specifier, context)
  } catch (err) {
    const relative = specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('file:')
    if (!relative || !/\.(c|m)?js$/.test(specifier) || context.parentURL === undefined) throw err
    return await next(specifier.replace(/js$/, 'ts'), context)
  }
}

export async function load (url, context, next) {
  if (!url.startsWith('file:') || !TS.test(url)) return await next(url, context)
  const path = fileURLToPath(url)
  const commonjs = url.endsWith('.cts')
  const { code } = await transform(await readFile(path, 'utf8'), {
    loader: 'ts',
    format: commonjs ? 'cjs' : 'esm',
    sourcemap: 'inline',
    sourcefile: path,
    target: `node${process.versions.node}`
  })
  return { format: commonjs ? 'commonjs' : 'module', source: code, shortCircuit: true }
}
