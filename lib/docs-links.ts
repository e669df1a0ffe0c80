import { readFileSync } from 'node:fs'

// Links from the plugin's messages to its docs, at the tag of the version installed: the docs/ folder is not in
// the package, and a page of another version may say otherwise. The version is package.json's, read once;
// `../package.json` is the package's own from lib/ (the sources) and dist/ (the build) alike.

const REPOSITORY = 'https://github.com/fastify-rate-guard/fastify-rate-guard'

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }

/**
 * The address of a section of the docs for this version: `page` is a file of docs/ without `.md`, `anchor` a
 * heading's as GitHub writes it (test/option-suggestions.test.ts holds every link in lib/ to a page and a heading
 * that exist).
 */
export function docsUrl (page: string, anchor: string): string {
  return `${REPOSITORY}/blob/v${version}/docs/${page}.md#${anchor}`
}
