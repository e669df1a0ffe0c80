// Test-only variants of the shipped Lua scripts. Redis's clock cannot be
// moved by fake timers, so tests that need exact time swap the script's
// single clock read for a value they pass in. Never shipped.

// The one line that reads the server clock, e.g.
//   now = now or milliseconds(redis.call('TIME'))
//   local now = clock(redis.call('TIME'))
// Leading indentation and `local` are kept; the line ending (\n or \r\n) is left alone.
const NOW_LINE = /^([ \t]*)(local )?now = [^\r\n]*redis\.call\(\s*(['"])TIME\3\s*\)[^\r\n]*$/gm

/**
 * Return `lua` with its `now = ...redis.call('TIME')...` line replaced by
 * `now = tonumber(ARGV[#ARGV])`: the caller passes "now" in milliseconds as
 * the LAST argv. Throws unless exactly one such line exists.
 */
export function timeVariant (lua: string): string {
  const found = lua.match(NOW_LINE) ?? []
  if (found.length !== 1) {
    throw new Error(
      `timeVariant: expected exactly one line "now = ...redis.call('TIME')...", found ${found.length}`
    )
  }
  return lua.replace(NOW_LINE, '$1$2now = tonumber(ARGV[#ARGV])')
}
