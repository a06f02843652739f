/** mulberry32: a small seeded generator for the tests' scenarios (uint32 per call), independent of uvs's own. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** mulberry32 drawing integers in [0, n). */
export function rngBelow(seed: number): (n: number) => number {
  const next = mulberry32(seed);
  return (n) => next() % n;
}
