// Before `npm test`: what the suite needs beyond Node and npm, checked in a second, each missing piece named
// with the one command that gets it. A Redis (redis-server on PATH, or REDIS_URL) and Debian's chromium for
// the operator page's browser test (CHROMIUM_PATH, else /usr/bin/chromium). `bash .ci/run` installs both with
// apt-get and then runs the suite. (The harness can also start Redis in a container when testcontainers is
// installed and an engine answers, but the suite's Cluster and fault tests start redis-server themselves.)
import { existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'

const onPath = (name) => (process.env.PATH ?? '').split(delimiter).some(dir => dir !== '' && existsSync(join(dir, name)))
const missing = []
if (process.env.REDIS_URL === undefined && !onPath('redis-server')) {
  missing.push('redis-server (the suite starts real Redis processes): sudo apt-get install -y redis-server, or set REDIS_URL')
}
const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
if (!existsSync(chromium)) {
  missing.push(`chromium at ${chromium} (the operator page's browser test): sudo apt-get install -y chromium, or set CHROMIUM_PATH`)
}
if (missing.length > 0) {
  console.error(`npm test needs:\n${missing.map(line => `  - ${line}`).join('\n')}\nOne command installs them and runs the suite on Debian: bash .ci/run`)
  process.exit(1)
}
