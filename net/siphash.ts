/**
 * The kernel's keyed hashes (lib/siphash.c), on 32-bit numbers, allocation-free.
 *
 *  - hsiphash4(v, key): hsiphash() of the 4 bytes of v on a 64-bit kernel, where hsiphash is
 *    SipHash-1-3 with 64-bit keys truncated to 32 bits (one compression round, three finalization
 *    rounds); the bytes are read little-endian, i.e. the value v itself (x86-64). The mh scheduler
 *    hashes with it. 32-bit kernels use HalfSipHash instead: different numbers.
 *  - HalfSipHash (class): that 32-bit kernels' hsiphash, HalfSipHash-1-3, streaming over 32-bit
 *    words — the connection table's keyed bucket hash and the dataplane's per-source limits.
 *
 * 64-bit arithmetic is done on hi/lo pairs of uint32 in locals: BigInt would allocate per call.
 */

/** A SipHash key as four uint32 words: k0 high, k0 low, k1 high, k1 low. */
export type SipKey = readonly [number, number, number, number];

/** Initial SipHash state for a key: v0..v3 as hi/lo pairs (8 words). Computed once per key. */
export function sipInit(key: SipKey): Uint32Array {
  const [k0h, k0l, k1h, k1l] = key;
  return Uint32Array.of(
    (0x736f6d65 ^ k0h) >>> 0,
    (0x70736575 ^ k0l) >>> 0,
    (0x646f7261 ^ k1h) >>> 0,
    (0x6e646f6d ^ k1l) >>> 0,
    (0x6c796765 ^ k0h) >>> 0,
    (0x6e657261 ^ k0l) >>> 0,
    (0x74656462 ^ k1h) >>> 0,
    (0x79746573 ^ k1l) >>> 0,
  );
}

/** hsiphash() of the 4-byte value v (little-endian bytes) under the key `s` from sipInit(). */
export function hsiphash4(s: Uint32Array, v: number): number {
  let v0h = s[0]!,
    v0l = s[1]!,
    v1h = s[2]!,
    v1l = s[3]!,
    v2h = s[4]!,
    v2l = s[5]!,
    v3h = s[6]!,
    v3l = s[7]!;
  const bl = v >>> 0;
  const bh = 0x04000000; // length 4 in the top byte
  v3h = (v3h ^ bh) >>> 0;
  v3l = (v3l ^ bl) >>> 0;
  let lo = 0,
    th = 0,
    tl = 0;
  for (let round = 0; round < 4; round++) {
    if (round === 1) {
      v0h = (v0h ^ bh) >>> 0;
      v0l = (v0l ^ bl) >>> 0;
      v2l = (v2l ^ 0xff) >>> 0;
    }
    // v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32)
    lo = (v0l + v1l) >>> 0;
    v0h = (v0h + v1h + (lo < v0l ? 1 : 0)) >>> 0;
    v0l = lo;
    th = ((v1h << 13) | (v1l >>> 19)) >>> 0;
    tl = ((v1l << 13) | (v1h >>> 19)) >>> 0;
    v1h = (th ^ v0h) >>> 0;
    v1l = (tl ^ v0l) >>> 0;
    th = v0h;
    v0h = v0l;
    v0l = th;
    // v2 += v3; v3 = rotl(v3, 16); v3 ^= v2
    lo = (v2l + v3l) >>> 0;
    v2h = (v2h + v3h + (lo < v2l ? 1 : 0)) >>> 0;
    v2l = lo;
    th = ((v3h << 16) | (v3l >>> 16)) >>> 0;
    tl = ((v3l << 16) | (v3h >>> 16)) >>> 0;
    v3h = (th ^ v2h) >>> 0;
    v3l = (tl ^ v2l) >>> 0;
    // v0 += v3; v3 = rotl(v3, 21); v3 ^= v0
    lo = (v0l + v3l) >>> 0;
    v0h = (v0h + v3h + (lo < v0l ? 1 : 0)) >>> 0;
    v0l = lo;
    th = ((v3h << 21) | (v3l >>> 11)) >>> 0;
    tl = ((v3l << 21) | (v3h >>> 11)) >>> 0;
    v3h = (th ^ v0h) >>> 0;
    v3l = (tl ^ v0l) >>> 0;
    // v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32)
    lo = (v2l + v1l) >>> 0;
    v2h = (v2h + v1h + (lo < v2l ? 1 : 0)) >>> 0;
    v2l = lo;
    th = ((v1h << 17) | (v1l >>> 15)) >>> 0;
    tl = ((v1l << 17) | (v1h >>> 15)) >>> 0;
    v1h = (th ^ v2h) >>> 0;
    v1l = (tl ^ v2l) >>> 0;
    th = v2h;
    v2h = v2l;
    v2l = th;
  }
  return (v0l ^ v1l ^ v2l ^ v3l) >>> 0;
}

/**
 * HalfSipHash-1-3 (lib/siphash.c, `hsiphash` on 32-bit kernels; Aumasson & Bernstein's
 * HalfSipHash with one compression and three finalization rounds): a keyed 32-bit hash the kernel
 * uses for hash tables keyed by what the network sends. 64-bit key (k0, k1), 32-bit words, so
 * every operation stays in int32 — no hi/lo pairs, unlike hsiphash4 above.
 *
 * Streaming, allocation-free: begin(k0, k1), then word(m) per 4 message bytes (little-endian, as
 * the kernel reads them on x86), then end(b) with b = (total length in bytes) << 24 | the 0–3
 * remaining bytes. One instance per thread (it keeps the state between calls).
 */
export class HalfSipHash {
  private v0 = 0;
  private v1 = 0;
  private v2 = 0;
  private v3 = 0;

  begin(k0: number, k1: number): void {
    this.v0 = k0 | 0;
    this.v1 = k1 | 0;
    this.v2 = 0x6c796765 ^ k0;
    this.v3 = 0x74656462 ^ k1;
  }

  /** Absorbs the message word m: v3 ^= m, one HSIPROUND, v0 ^= m (the round on locals, no call). */
  word(m: number): void {
    let v0 = this.v0,
      v1 = this.v1,
      v2 = this.v2,
      v3 = this.v3 ^ m;
    // HSIPROUND
    v0 = (v0 + v1) | 0;
    v1 = (v1 << 5) | (v1 >>> 27);
    v1 ^= v0;
    v0 = (v0 << 16) | (v0 >>> 16);
    v2 = (v2 + v3) | 0;
    v3 = (v3 << 8) | (v3 >>> 24);
    v3 ^= v2;
    v0 = (v0 + v3) | 0;
    v3 = (v3 << 7) | (v3 >>> 25);
    v3 ^= v0;
    v2 = (v2 + v1) | 0;
    v1 = (v1 << 13) | (v1 >>> 19);
    v1 ^= v2;
    v2 = (v2 << 16) | (v2 >>> 16);
    this.v0 = v0 ^ m;
    this.v1 = v1;
    this.v2 = v2;
    this.v3 = v3;
  }

  /**
   * Finalizes with the length/tail word b: absorbed like a message word, then v2 ^= 0xff and
   * three more HSIPROUNDs, all on locals. Returns the hash as uint32.
   */
  end(b: number): number {
    let v0 = this.v0,
      v1 = this.v1,
      v2 = this.v2,
      v3 = this.v3 ^ b;
    for (let r = 0; r < 4; r++) {
      // HSIPROUND
      v0 = (v0 + v1) | 0;
      v1 = (v1 << 5) | (v1 >>> 27);
      v1 ^= v0;
      v0 = (v0 << 16) | (v0 >>> 16);
      v2 = (v2 + v3) | 0;
      v3 = (v3 << 8) | (v3 >>> 24);
      v3 ^= v2;
      v0 = (v0 + v3) | 0;
      v3 = (v3 << 7) | (v3 >>> 25);
      v3 ^= v0;
      v2 = (v2 + v1) | 0;
      v1 = (v1 << 13) | (v1 >>> 19);
      v1 ^= v2;
      v2 = (v2 << 16) | (v2 >>> 16);
      if (r === 0) {
        v0 ^= b;
        v2 ^= 0xff;
      }
    }
    return (v1 ^ v3) >>> 0;
  }

  /**
   * word(m) then end(b), leaving the state as it was: a prefix absorbed once and finished with
   * several different last words (the full-NAT port choice, lb/steering.ts). All on locals.
   */
  wordEnd(m: number, b: number): number {
    let v0 = this.v0,
      v1 = this.v1,
      v2 = this.v2,
      v3 = this.v3;
    for (let r = 0; r < 5; r++) {
      // r 0: absorb m; r 1: absorb b (the first round of end()); 2–4: finalization.
      const x = r === 0 ? m : r === 1 ? b : 0;
      v3 ^= x;
      // HSIPROUND
      v0 = (v0 + v1) | 0;
      v1 = (v1 << 5) | (v1 >>> 27);
      v1 ^= v0;
      v0 = (v0 << 16) | (v0 >>> 16);
      v2 = (v2 + v3) | 0;
      v3 = (v3 << 8) | (v3 >>> 24);
      v3 ^= v2;
      v0 = (v0 + v3) | 0;
      v3 = (v3 << 7) | (v3 >>> 25);
      v3 ^= v0;
      v2 = (v2 + v1) | 0;
      v1 = (v1 << 13) | (v1 >>> 19);
      v1 ^= v2;
      v2 = (v2 << 16) | (v2 >>> 16);
      v0 ^= x;
      if (r === 1) v2 ^= 0xff;
    }
    return (v1 ^ v3) >>> 0;
  }
}
