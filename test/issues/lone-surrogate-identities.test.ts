// Regression: identities holding lone UTF-16 surrogates shared one budget. hashIdentity hashed the UTF-8 of
// the identity, and UTF-8 encoding turns every lone surrogate into U+FFFD, so '\uD800', '\uDFFF' and
// '\uFFFD' (or a user id 'a\uD83D' and 'a\uDE00') had one hash tag: one client could exhaust or get banned
// for another. Such identities come from keyGenerator or userId (JSON can carry "\ud800"), not from HTTP
// headers. Found by test/hostile.test.ts.
import { createHash } from 'node:crypto'
import t from 'tap'
import { hashIdentity } from '../../lib/stores/key-names.js'

t.test('identities that differ only in lone surrogates get different hashes', async t => {
  const inputs = ['\uD800', '\uDFFF', '\uFFFD', 'a\uD83D', 'a\uDE00', 'a\uFFFD', '\uDE00\uD83D', '\uD83D\uDE00', '😀']
  const hashes = inputs.map(hashIdentity)
  t.equal(new Set(hashes).size, inputs.length - 1, 'all distinct but the two spellings of one emoji')
  t.equal(hashIdentity('\uD83D\uDE00'), hashIdentity('😀'), 'a surrogate pair is the character it encodes')
  for (const hash of hashes) t.match(hash, /^[A-Za-z0-9_-]{22}$/)
})

t.test('well-formed identities keep their hash: SHA-256 of their UTF-8', async t => {
  for (const input of ['', 'apikey:k', '😀', '\uFFFD', 'é']) {
    t.equal(hashIdentity(input), createHash('sha256').update(input, 'utf8').digest('base64url').slice(0, 22), JSON.stringify(input))
  }
})

t.test('ill-formed identities: SHA-256 of 0xFF and their UTF-16 code units, so they never meet a UTF-8 string', async t => {
  for (const input of ['\uD800', 'a\uDE00b']) {
    const expected = createHash('sha256').update(Buffer.concat([Buffer.from([0xff]), Buffer.from(input, 'utf16le')])).digest('base64url').slice(0, 22)
    t.equal(hashIdentity(input), expected, JSON.stringify(input))
  }
})
