// The TypeScript loader the suite runs with (.taprc's node-arg), for a child process that imports lib/'s
// sources: `spawn(process.execPath, ['--import', TS_LOADER, …])`. The same loader as the test files', so the
// coverage a child writes maps onto the same generated code as theirs (one loader's offsets for another's
// would merge into nonsense).
export const TS_LOADER = new URL('../../scripts/ts-loader.js', import.meta.url).href
