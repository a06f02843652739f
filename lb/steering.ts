/**
 * The queue-steering key of lb/native/steer.c, in TypeScript: which queue the device gives a
 * packet the kernel sends into it. The eBPF program is what runs; this is its specification,
 * checked against the kernel by test/integration/steering.test.ts, and documented in
 * docs/steering.md.
 *
 *   - TCP, UDP, SCTP (IPv4 not a later fragment; IPv6 with the transport header right after the
 *     fixed one): key = the endpoint with the higher port — a connection's client (ephemeral
 *     port) in both directions of masq; equal ports: both addresses xor'ed, and the port.
 *   - other IPv4/IPv6 packets: both addresses xor'ed (IPv6: each folded to 32 bits by xor).
 *   - anything else: 0.
 *   h = (((addr ^ seed) · 0x9e3779b1) ^ port) · 0x85ebca6b  (32 bits); value = h >>> 16;
 *   queue = value mod queues (the kernel's tun_ebpf_select_queue).
 * The kernel runs the program; steeringValue/steeringQueue are its specification and not for the
 * packet path. steeringHash is also used there, allocation-free: full-NAT picks pool ports whose
 * server→client packets the program steers to the worker's own queue (lb/xmit.ts).
 */

function w32(b: Uint8Array, o: number): number {
  return ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
}
function w16(b: Uint8Array, o: number): number {
  return (b[o]! << 8) | b[o + 1]!;
}
function fold6(b: Uint8Array, o: number): number {
  return (w32(b, o) ^ w32(b, o + 4) ^ w32(b, o + 8) ^ w32(b, o + 12)) >>> 0;
}

/** The program's value for the key (addr, port): addr a 32-bit word (IPv6: folded by xor). */
export function steeringHash(addr: number, port: number, seed: number): number {
  let h = Math.imul((addr ^ seed) >>> 0, 0x9e3779b1) >>> 0;
  h = Math.imul((h ^ port) >>> 0, 0x85ebca6b) >>> 0;
  return h >>> 16;
}

const PORTED = new Set([6, 17, 132]);

/** The program's return value for the IP packet in b (its first byte the IP header). */
export function steeringValue(b: Uint8Array, seed: number): number {
  const v = b[0]! & 0xf0;
  if (v === 0x40) {
    const laterFragment = (w16(b, 6) & 0x1fff) !== 0;
    const pair = (w32(b, 12) ^ w32(b, 16)) >>> 0;
    if (laterFragment || !PORTED.has(b[9]!)) return steeringHash(pair, 0, seed);
    const l4 = (b[0]! & 0x0f) * 4;
    const sp = w16(b, l4);
    const dp = w16(b, l4 + 2);
    if (sp > dp) return steeringHash(w32(b, 12), sp, seed);
    if (dp > sp) return steeringHash(w32(b, 16), dp, seed);
    return steeringHash(pair, sp, seed);
  }
  if (v === 0x60) {
    const pair = (fold6(b, 8) ^ fold6(b, 24)) >>> 0;
    if (!PORTED.has(b[6]!)) return steeringHash(pair, 0, seed);
    const sp = w16(b, 40);
    const dp = w16(b, 42);
    if (sp > dp) return steeringHash(fold6(b, 8), sp, seed);
    if (dp > sp) return steeringHash(fold6(b, 24), dp, seed);
    return steeringHash(pair, sp, seed);
  }
  return 0;
}

/** The queue of that packet on a device with `queues` queues. */
export function steeringQueue(b: Uint8Array, seed: number, queues: number): number {
  return steeringValue(b, seed) % queues;
}
