// Draws the inbox's app icons (public/inbox/icon-192.png, icon-512.png, icon.svg) with no
// dependencies: a blue square (full bleed, so it also works as a maskable icon) with a white
// inbox tray and arrow inside the central safe zone. Run `node scripts/make-icons.mjs` after
// changing the drawing; the results are committed.
import { writeFileSync } from 'node:fs'
import { deflateSync } from 'node:zlib'

const OUT = new URL('../public/inbox/', import.meta.url)
const TOP = [0x4a, 0x82, 0xff]
const BOTTOM = [0x2a, 0x57, 0xe0]
const STROKE = 0.052
// polylines in a 0..1 square, drawn as round-capped strokes
const PATHS = [
  [[0.27, 0.53], [0.39, 0.53], [0.43, 0.61], [0.57, 0.61], [0.61, 0.53], [0.73, 0.53]],
  [[0.27, 0.53], [0.33, 0.33], [0.4, 0.33]],
  [[0.73, 0.53], [0.67, 0.33], [0.6, 0.33]],
  [[0.27, 0.53], [0.27, 0.71], [0.73, 0.71], [0.73, 0.53]],
  [[0.5, 0.24], [0.5, 0.47]],
  [[0.42, 0.4], [0.5, 0.48], [0.58, 0.4]],
]

function segmentDistance(px, py, [ax, ay], [bx, by]) {
  const dx = bx - ax
  const dy = by - ay
  const t = Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
  return Math.hypot(px - (ax + t * dx), py - (ay + t * dy))
}

function coverage(px, py) {
  let best = Infinity
  for (const path of PATHS) {
    for (let i = 1; i < path.length; i++) best = Math.min(best, segmentDistance(px, py, path[i - 1], path[i]))
  }
  return best <= STROKE / 2 ? 1 : 0
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
  return c >>> 0
})

function crc32(bytes) {
  let c = 0xffffffff
  for (const byte of bytes) c = CRC_TABLE[(c ^ byte) & 0xff] ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

function chunk(type, data) {
  const head = Buffer.alloc(8)
  head.writeUInt32BE(data.length, 0)
  head.write(type, 4, 'ascii')
  const crc = Buffer.alloc(4)
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0)
  return Buffer.concat([head, data, crc])
}

function png(size) {
  const SS = 4 // supersampling per axis, for smooth edges
  const raw = Buffer.alloc(size * (size * 3 + 1))
  for (let y = 0; y < size; y++) {
    raw[y * (size * 3 + 1)] = 0 // filter: none
    const mix = y / (size - 1)
    const bg = TOP.map((top, i) => top + (BOTTOM[i] - top) * mix)
    for (let x = 0; x < size; x++) {
      let hits = 0
      for (let sy = 0; sy < SS; sy++) {
        for (let sx = 0; sx < SS; sx++) hits += coverage((x + (sx + 0.5) / SS) / size, (y + (sy + 0.5) / SS) / size)
      }
      const a = hits / (SS * SS)
      const at = y * (size * 3 + 1) + 1 + x * 3
      for (let i = 0; i < 3; i++) raw[at + i] = Math.round(bg[i] * (1 - a) + 255 * a)
    }
  }
  const header = Buffer.alloc(13)
  header.writeUInt32BE(size, 0)
  header.writeUInt32BE(size, 4)
  header[8] = 8 // bit depth
  header[9] = 2 // truecolour
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(raw, { level: 9 })),
    chunk('IEND', Buffer.alloc(0)),
  ])
}

function svg() {
  const hex = (rgb) => `#${rgb.map((v) => v.toString(16).padStart(2, '0')).join('')}`
  const lines = PATHS.map((path) => `<polyline points="${path.map(([x, y]) => `${x * 100},${y * 100}`).join(' ')}"/>`)
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">
<defs><linearGradient id="g" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="${hex(TOP)}"/><stop offset="1" stop-color="${hex(BOTTOM)}"/></linearGradient></defs>
<rect width="100" height="100" rx="22" fill="url(#g)"/>
<g fill="none" stroke="#fff" stroke-width="${STROKE * 100}" stroke-linecap="round" stroke-linejoin="round">
${lines.join('\n')}
</g>
</svg>
`
}

for (const size of [192, 512]) writeFileSync(new URL(`icon-${size}.png`, OUT), png(size))
writeFileSync(new URL('icon.svg', OUT), svg())
console.log('wrote public/inbox/icon-192.png, icon-512.png, icon.svg')
