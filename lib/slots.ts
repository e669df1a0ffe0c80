// Redis Cluster's hash slots: a key's slot is the CRC16 (XMODEM) of its hash tag, modulo 16384. The ban index
// (lib/stores/ban-index.ts) keeps one sorted set per slot, named by a short tag that hashes to that slot, so
// the decision script can write an identity's ban and its index entry in one call: same slot, same node.

export const SLOTS = 16384

const CRC16 = new Uint16Array(256)
for (let i = 0; i < 256; i++) {
  let crc = i << 8
  for (let bit = 0; bit < 8; bit++) crc = (crc & 0x8000) !== 0 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  CRC16[i] = crc
}

/** The slot of a hash tag of ASCII characters (an identity's hash, a slot's tag), as Redis Cluster computes it. */
export function slotOf (tag: string): number {
  let crc = 0
  for (let i = 0; i < tag.length; i++) crc = ((crc << 8) & 0xffff) ^ CRC16[((crc >> 8) ^ tag.charCodeAt(i)) & 0xff]!
  return crc & (SLOTS - 1)
}

/**
 * The slot of a key, as Redis Cluster computes it: its hash tag's (the text between its first `{` and the next `}`, when
 * not empty), else the whole key's.
 */
export function keySlot (key: string): number {
  const open = key.indexOf('{')
  const close = open === -1 ? -1 : key.indexOf('}', open + 1)
  return slotOf(close > open + 1 ? key.slice(open + 1, close) : key)
}

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'
let tags: readonly string[] | undefined

/**
 * For each slot, the first of the strings of one, two, then three alphanumeric characters that hashes to it
 * (three are enough for all 16384). Built on first use, about 20 ms, and only by a store on a Redis Cluster.
 * None is 22 characters long or holds a colon, so it never names an identity or a shared budget.
 */
export function slotTags (): readonly string[] {
  if (tags !== undefined) return tags
  const found: string[] = new Array<string>(SLOTS)
  let left = SLOTS
  // Every string of one length before the next, so each slot gets its shortest tag.
  for (let length = 1, count = ALPHABET.length; left > 0; length++, count *= ALPHABET.length) {
    for (let n = 0; n < count && left > 0; n++) {
      let tag = ''
      for (let rest = n, i = 0; i < length; i++, rest = Math.floor(rest / ALPHABET.length)) tag = ALPHABET[rest % ALPHABET.length]! + tag
      const slot = slotOf(tag)
      if (found[slot] === undefined) {
        found[slot] = tag
        left--
      }
    }
  }
  tags = Object.freeze(found)
  return tags
}
