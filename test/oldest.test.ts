// lib/oldest.ts: a Map's entries from the oldest, with one iterator kept across calls (what the bounded maps
// evict: held answers, the in-process store's least recently used logs).
import t from 'tap'
import { Oldest } from '../lib/oldest.js'

t.test('hands out entries oldest first, as they are deleted, moved to the back and added', async t => {
  const map = new Map([['a', 1], ['b', 2], ['c', 3]])
  const oldest = new Oldest(map)
  const take = (): string | undefined => {
    const entry = oldest.next()
    if (entry !== undefined) map.delete(entry[0])
    return entry?.[0]
  }
  t.equal(take(), 'a')
  map.delete('b')
  map.set('d', 4)
  map.delete('c')
  map.set('c', 5)
  t.strictSame([take(), take(), take()], ['d', 'c', undefined], 'a deleted entry is skipped, one set again comes after the newer ones')
  t.equal(map.size, 0)
  map.set('e', 6)
  map.set('f', 7)
  t.strictSame(oldest.next(), ['e', 6], 'after the map ran empty, a new entry is the oldest')
  t.strictSame([oldest.next()?.[0], oldest.next()?.[0]], ['f', 'e'], 'one handed out and left in place comes again after a walk round the map')
})

t.test('after a clear, the entries set since', async t => {
  const map = new Map([['a', 1], ['b', 2]])
  const oldest = new Oldest(map)
  t.strictSame(oldest.next(), ['a', 1])
  map.clear()
  map.set('c', 3)
  map.set('d', 4)
  t.strictSame([oldest.next()?.[0], oldest.next()?.[0]], ['c', 'd'])
})

t.test('a full map evicting one entry per insert drops what a fresh iterator would: the least recently set', async t => {
  const SIZE = 1000
  const ours = new Map<number, number>()
  const oldest = new Oldest(ours)
  const fresh = new Map<number, number>()
  const evicted: Array<[number, number]> = []
  for (let i = 0; i < 5 * SIZE; i++) {
    if (ours.size >= SIZE) {
      const a = oldest.next()![0]
      const b = fresh.keys().next().value!
      evicted.push([a, b])
      ours.delete(a)
      fresh.delete(b)
    }
    for (const map of [ours, fresh]) {
      map.set(i, i)
      // Some used again: to the back, as the in-process store does with a log it counts on.
      if (i % 3 === 0 && map.has(i - 7)) {
        map.delete(i - 7)
        map.set(i - 7, i)
      }
    }
  }
  t.equal(evicted.length, 4 * SIZE)
  t.strictSame(evicted.filter(([a, b]) => a !== b), [], 'the same entry each time')
  t.strictSame([...ours.keys()], [...fresh.keys()], 'the same entries kept, in the same order')
})
