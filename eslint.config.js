import neostandard from 'neostandard'

// neostandard is a complete config on its own; `ts: true` adds the
// typescript-eslint parser and checks *.ts (lib/, test/, types/).
// Generated and scratch output is never linted.
export default neostandard({
  ts: true,
  ignores: ['dist/**', 'coverage/**', '.tap/**', 'node_modules/**', 'bench/results/**', '.upstream/**']
})
