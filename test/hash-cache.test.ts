// lib/stores/key-names.ts's HashCache: the hashes of identities seen lately, in two generations. A working set
// up to twice its size is hashed once however it cycles, an identity found again lives on through a flood,
// and a flood of fresh identities (or of long ones) holds a bounded number.
import t from 'tap'
import { HashCache } from '../lib/stores/key-names.js'

const SIZE = 1000

/** A cache of `SIZE` a generation, and how many times it has hashed. */
function counting (): { cache: HashCache, made: () => number } {
  let made = 0
  const cache = new HashCache(SIZE, key => {
    made++
    return `#${key}`
  })
  return { cache, made: () => made }
}

t.test('a cyclic working set of 1.5 and 2 times the size: hashed in the first round only', async t => {
  for (const factor of [1.5, 2]) {
    const { cache, made } = counting()
    const keys = Array.from({ length: factor * SIZE }, (_, i) => `ip:10.0.${i >> 8}.${i & 255}`)
    for (const key of keys) t.equal(cache.hash(key), `#${key}`)
    t.equal(made(), keys.length, `${factor}×: every identity hashed once in the first round`)
    for (let round = 0; round < 5; round++) for (const key of keys) cache.hash(key)
    t.equal(made(), keys.length, `${factor}×: five more rounds, all ${5 * keys.length} requests answered from the cache`)
    t.ok(cache.size <= 2 * SIZE, `${factor}×: ${cache.size} held`)
  }
  // One past twice the size: the bound is real (every identity leaves before it returns), and nothing breaks.
  const { cache, made } = counting()
  const keys = Array.from({ length: 2 * SIZE + 1 }, (_, i) => `k${i}`)
  for (let round = 0; round < 3; round++) for (const key of keys) cache.hash(key)
  t.equal(made(), 3 * keys.length, 'a cyclic set past twice the size misses, as any cache of that size would')
})

t.test('an identity found again between fresh ones is never hashed again', async t => {
  const { cache, made } = counting()
  const hot = Array.from({ length: 100 }, (_, i) => `hot${i}`)
  let fresh = 0
  for (let round = 0; round < 50; round++) {
    for (const key of hot) cache.hash(key)
    // Five hundred strangers between two visits of each hot identity: 25 generations turned over in all.
    for (let i = 0; i < SIZE / 2; i++) cache.hash(`fresh${fresh++}`)
  }
  t.equal(made(), hot.length + fresh, 'each hot identity hashed once; each stranger once')
})

t.test('a flood of fresh identities: at most twice the size held, and the first ones forgotten', async t => {
  const { cache, made } = counting()
  let most = 0
  for (let i = 0; i < 20 * SIZE; i++) {
    cache.hash(`flood${i}`)
    most = Math.max(most, cache.size)
  }
  t.equal(most, 2 * SIZE, `at most ${2 * SIZE} held through ${20 * SIZE} fresh identities`)
  const before = made()
  t.equal(cache.hash('flood0'), '#flood0', 'an early one, hashed afresh')
  t.equal(made(), before + 1)
  t.equal(cache.hash(`flood${20 * SIZE - 1}`), `#flood${20 * SIZE - 1}`, 'the last one, held')
  t.equal(made(), before + 1)
})

t.test('an identity over 256 characters is hashed every time, never held', async t => {
  const { cache, made } = counting()
  const long = 'x'.repeat(257)
  const edge = 'y'.repeat(256)
  cache.hash(long)
  cache.hash(long)
  cache.hash(edge)
  cache.hash(edge)
  t.equal(made(), 3, 'the 257-character one twice, the 256-character one once')
  t.equal(cache.size, 1)
})
