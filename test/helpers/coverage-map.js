// tap `coverage-map` (see .taprc): whatever a test file loads, coverage is
// measured on lib/ only. Test helpers, examples, bench and dist never count.
export default function coverageMap () {
  return ['lib/**/*.ts']
}
