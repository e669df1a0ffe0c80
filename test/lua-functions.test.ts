// No function in lua/ over 60 lines, as in lib/ (test/architecture.test.ts): a script's steps each read at once.
// Lua's blocks are counted from its text, comments and strings left out: `function`, `if`, `do` (which `for`
// and `while` open) and `repeat` open one, `end` and `until` close it.
import { readFileSync, readdirSync } from 'node:fs'
import t from 'tap'

const LONGEST = 60
const folder = new URL('../lua/', import.meta.url)

/** Each function of `lua` (named, or `anonymous`) with the line it starts on and how many lines it spans. */
function functionsOf (lua: string): Array<{ name: string, line: number, lines: number }> {
  const code = lua.replace(/--\[(=*)\[[^]*?\]\1\]/g, text => text.replace(/[^\n]/g, ' '))
    .replace(/--[^\n]*/g, '')
    .replace(/'(\\.|[^'\\\n])*'|"(\\.|[^"\\\n])*"/g, '""')
  const found: Array<{ name: string, line: number, lines: number }> = []
  const open: Array<{ name: string, line: number } | null> = []
  let line = 1
  for (const [token, name] of code.matchAll(/\n|\bfunction\b\s*([\w.:]*)|\b(?:if|do|repeat|end|until)\b/g)) {
    if (token === '\n') line++
    else if (token.startsWith('function')) open.push({ name: name || 'anonymous', line })
    else if (token === 'end' || token === 'until') {
      const closed = open.pop()
      if (closed) found.push({ ...closed, lines: line - closed.line + 1 })
    } else open.push(null)
  }
  return found
}

t.test('functionsOf counts a function\'s lines through its blocks', async t => {
  const lua = "local function a (x)\n  if x then\n    for i = 1, 2 do\n    end\n  end -- end\n  local s = 'end'\nend\n" +
    'local b = function () repeat until true end\n'
  t.strictSame(functionsOf(lua), [{ name: 'a', line: 1, lines: 7 }, { name: 'anonymous', line: 8, lines: 1 }])
})

t.test(`no function of lua/ over ${LONGEST} lines`, async t => {
  const long: string[] = []
  const files = readdirSync(folder).filter(file => file.endsWith('.lua')).sort()
  t.ok(files.includes('decide.lua'))
  for (const file of files) {
    for (const { name, line, lines } of functionsOf(readFileSync(new URL(file, folder), 'utf8'))) {
      if (lines > LONGEST) long.push(`lua/${file}:${line}: ${name}, ${lines} lines`)
    }
  }
  t.strictSame(long, [])
})
