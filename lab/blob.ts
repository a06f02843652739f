/**
 * Deterministic test content: word i of a blob is a hash of (seed, i), so any range can be
 * produced independently and a receiver can check a transfer without the sender's copy.
 */
import { createHash } from 'node:crypto';

export function blobChunk(seed: number, offset: number, len: number): Buffer {
  const start = Math.floor(offset / 4);
  const words = Math.ceil((offset + len) / 4) - start;
  const buf = Buffer.allocUnsafe(words * 4);
  for (let w = 0; w < words; w++) {
    let h = Math.imul((start + w) ^ seed, 0x9e3779b1);
    h ^= h >>> 15;
    h = Math.imul(h, 0x85ebca77);
    h ^= h >>> 13;
    buf.writeInt32LE(h | 0, w * 4);
  }
  const skip = offset - start * 4;
  return buf.subarray(skip, skip + len);
}

/** sha256 (hex) of the first `total` bytes of blob `seed`. */
export function blobSha256(seed: number, total: number): string {
  const h = createHash('sha256');
  for (let off = 0; off < total; off += 1 << 20) h.update(blobChunk(seed, off, Math.min(1 << 20, total - off)));
  return h.digest('hex');
}
