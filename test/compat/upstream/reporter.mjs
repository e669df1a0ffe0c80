// A node:test reporter writing one JSON line per test that came to an end (suites left out), with the names
// of the suites around it, for ../upstream.test.ts to compare with the list of deliberate differences.
// Its status is 'pass', 'fail', 'skip' or 'todo': node:test reports a skipped test (and a todo that did not
// fail) as a pass, which is no pass of ours.
export default async function * reporter (source) {
  const names = []
  for await (const { type, data } of source) {
    if (type === 'test:start') names[data.nesting] = data.name
    if (type !== 'test:pass' && type !== 'test:fail') continue
    if (data.details.type === 'suite') continue
    const name = [...names.slice(0, data.nesting), data.name].join(' › ')
    const error = data.details.error
    const status = data.skip !== undefined && data.skip !== false ? 'skip' : data.todo !== undefined && data.todo !== false ? 'todo' : type === 'test:pass' ? 'pass' : 'fail'
    yield JSON.stringify({ name, status, error: error === undefined ? undefined : String(error.cause ?? error).slice(0, 2000) }) + '\n'
  }
}
