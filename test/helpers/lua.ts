// Test-only use of the scripts' app-clock variant (lib/stores/scripts.ts): Redis's clock cannot be moved by fake
// timers, so tests that need exact time run a script reading the time they pass as its last argument, as a
// server that refuses TIME runs it (`clock: 'app'`).
export { appClockVariant as timeVariant } from '../../lib/stores/scripts.js'
