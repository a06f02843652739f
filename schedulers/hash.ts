/**
 * The hash functions of the kernel's hashing schedulers, on 32-bit numbers, allocation-free.
 *
 *  - hash32(v, bits): include/linux/hash.h hash_32() — multiply by GOLDEN_RATIO_32 (0x61C88647)
 *    modulo 2^32 and keep the top `bits` bits. sh, dh, lblc and lblcr hash with it in modern
 *    kernels (5.x/6.x). Older kernels (4.x) used `(v * 2654435761) & mask`, whose low bits depend
 *    only on the low bits of v (the IPv4 client's last octet, for sh): different buckets.
 *  - mh hashes with the kernel's hsiphash(): net/siphash.ts hsiphash4.
 */

/** include/linux/hash.h GOLDEN_RATIO_32. */
const GOLDEN_RATIO_32 = 0x61c88647;

export function hash32(v: number, bits: number): number {
  return Math.imul(v, GOLDEN_RATIO_32) >>> (32 - bits);
}
