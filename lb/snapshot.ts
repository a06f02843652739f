/**
 * The service snapshot: what the control thread compiles from the configuration and publishes
 * to every worker (postMessage; a worker switches between batches, never mid-packet). Immutable
 * once published; rebuilt on every configuration change. Mutable scheduler state and connection
 * counts live in shared memory (conntrack/layout.ts), not here.
 */
import type { SchedDest, SchedService } from '../schedulers/types';

export interface CompiledDest extends SchedDest {
  /** Forwarding method, kernel FWD_* value (conntrack/layout.ts). */
  fwd: number;
  /**
   * An IPv6 real server's four address words; `addr` is then their XOR, the 32-bit fold the
   * kernel's schedulers hash (ip_vs_sh_hashkey, ip_vs_mh_hashkey). null for IPv4.
   */
  addr6: Int32Array | null;
  /** PROXY protocol version for its full-NAT TCP flows (net/proxy-protocol.ts PP_*), 0 = none. */
  pp: number;
}

export interface CompiledService extends SchedService {
  /** Service slot: index of its counters and scheduler state. Stable across reloads. */
  slot: number;
  /** IP protocol, | PROTO_V6 (conntrack/layout.ts) for an IPv6 service. */
  proto: number;
  /** IPv4: the VIP. IPv6: its last 32 bits (the lookup key), the rest in addr6. */
  vaddr: number;
  /** An IPv6 VIP's four words, else null. */
  addr6: Int32Array | null;
  vport: number;
  scheduler: string;
  dests: CompiledDest[];
  /** Persistence timeout in ms (ipvsadm -p), 0 = not persistent. */
  persistMs: number;
  /** Persistence netmask (ipvsadm -M) applied to the client address (IPv4). */
  netmask: number;
  /** IPv6: the persistence prefix as four mask words (ipvsadm -M for IPv6 is a prefix length). */
  netmask6: Int32Array | null;
  /**
   * sloppy_tcp / sloppy_sctp for this service (docs/sloppy.md): a TCP segment without SYN (not a
   * RST), an SCTP chunk other than INIT (not an ABORT), with no connection may start one — after
   * Redis, when configured, knew nothing of it (lb/core.ts).
   */
  sloppy: boolean;
}

export interface Snapshot {
  version: number;
  services: CompiledService[];
  /** Open-addressing service index: 4 words a slot [vaddr, proto << 16 | vport, service index + 1, 0]. */
  lookup: Int32Array;
  lookupMask: number;
  /** VIP ranges, pairs [net, mask]: a packet to one of them is inbound. */
  vips: Int32Array;
  /** IPv6 VIP ranges, 8 words each: [net (4), mask (4)]. */
  vips6: Int32Array;
  answerPing: boolean;
  /** A packet of a deleted real server's connection expires it and is handled as new (kernel expire_nodest_conn=1). */
  expireNodestConn: boolean;
  /** A persistence template whose server has weight 0 is not used (kernel expire_quiescent_template). */
  expireQuiescentTemplate: boolean;
  /** Outer source address of IPIP-tunnelled packets (0 = none configured). */
  tunnelSrc: number;
  /** Outer source of ip6ip6-tunnelled packets, four words (all 0 = none configured). */
  tunnelSrc6: Int32Array;
  /** Full-NAT pool: source addresses and the port range allocated on them. */
  fullnatAddrs: Int32Array;
  /** Full-NAT pool's IPv6 addresses, four words each. */
  fullnatAddrs6: Int32Array;
  fullnatPortMin: number;
  fullnatPortMax: number;
  /**
   * PROXY protocol version (net/proxy-protocol.ts PP_*) per real-server slot, 0 = none: read when a
   * full-NAT TCP flow is made; the flow keeps what it got (conntrack/layout.ts E_PP).
   */
  proxyProtocol: Uint8Array;
  /** Redis is configured: park mid-flow packets without an entry for adoption instead of refusing them. */
  adopt: boolean;
  /**
   * Limits on generated packets (lb/icmp.ts mayAnswer): per source, one per genPeerMs with a
   * burst of genPeerBurst (0 ms = none); per worker, genPerSec a second with a burst of genBurst
   * (the configured node-wide values divided among the workers; 0 = none); genKinds has bit
   * 1 << GEN_* set for each limited kind.
   */
  genPeerMs: number;
  genPeerBurst: number;
  genPerSec: number;
  genBurst: number;
  genKinds: number;
}

export const LOOKUP_WORDS = 4;

export function lookupHash(proto: number, vaddr: number, vport: number): number {
  let h = Math.imul(vaddr ^ 0x9e3779b9, 0x85ebca6b);
  h ^= (proto << 16) | vport;
  h = Math.imul(h ^ (h >>> 15), 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/** Builds the service index with load ≤ 1/2 so probes stay short. */
export function buildLookup(services: CompiledService[]): { lookup: Int32Array; lookupMask: number } {
  let size = 16;
  while (size < services.length * 2) size *= 2;
  const lookup = new Int32Array(size * LOOKUP_WORDS);
  const mask = size - 1;
  services.forEach((s, idx) => {
    let h = lookupHash(s.proto, s.vaddr, s.vport) & mask;
    while (lookup[h * LOOKUP_WORDS + 2] !== 0) h = (h + 1) & mask;
    lookup[h * LOOKUP_WORDS] = s.vaddr;
    lookup[h * LOOKUP_WORDS + 1] = (s.proto << 16) | s.vport;
    lookup[h * LOOKUP_WORDS + 2] = idx + 1;
  });
  return { lookup, lookupMask: mask };
}

/**
 * Index into snap.services, or -1. IPv6 (proto with PROTO_V6): vaddr is the VIP's last word and
 * hi[hiOff, hiOff+3) its first three.
 */
export function findService(
  snap: Snapshot,
  proto: number,
  vaddr: number,
  vport: number,
  hi: ArrayLike<number> | null = null,
  hiOff = 0,
): number {
  const lookup = snap.lookup;
  const mask = snap.lookupMask;
  const key = (proto << 16) | vport;
  let h = lookupHash(proto, vaddr, vport) & mask;
  for (;;) {
    const o = h * LOOKUP_WORDS;
    const ref = lookup[o + 2]!;
    if (ref === 0) return -1;
    if (lookup[o] === vaddr && lookup[o + 1] === key) {
      const a6 = snap.services[ref - 1]!.addr6;
      if (a6 === null || (a6[0] === hi![hiOff] && a6[1] === hi![hiOff + 1] && a6[2] === hi![hiOff + 2])) return ref - 1;
    }
    h = (h + 1) & mask;
  }
}

/** Whether the IPv6 address w[off, off+4) is in a VIP range. */
export function inVipRange6(snap: Snapshot, w: ArrayLike<number>, off: number): boolean {
  const v = snap.vips6;
  for (let i = 0; i < v.length; i += 8) {
    if (
      (w[off]! & v[i + 4]!) === v[i] &&
      (w[off + 1]! & v[i + 5]!) === v[i + 1] &&
      (w[off + 2]! & v[i + 6]!) === v[i + 2] &&
      (w[off + 3]! & v[i + 7]!) === v[i + 3]
    )
      return true;
  }
  return false;
}

export function inVipRange(snap: Snapshot, addr: number): boolean {
  const v = snap.vips;
  for (let i = 0; i < v.length; i += 2) if ((addr & v[i + 1]!) === v[i]) return true;
  return false;
}

/**
 * What a worker receives after its first snapshot (issue 37): the services that changed, the
 * slots no longer used, and everything else of the snapshot (the service index, the VIP ranges,
 * the limits: small beside 10,000 services' servers). Services are placed at their slot
 * (`services[svc.slot]`), so an unchanged service keeps its place and needs no copy: a change's
 * cost to publish is its own size, where a whole snapshot cloned per worker took 130 ms at
 * 10,000 services × 10 servers. Values are absolute: applying a delta twice changes nothing.
 */
export interface SnapshotDelta extends Omit<Snapshot, 'services' | 'lookup' | 'lookupMask' | 'proxyProtocol'> {
  kind: 'delta';
  /** Absent: the same as the last snapshot's (the control thread kept the object: 640 KB a worker at 16,384 services). */
  lookup?: Int32Array;
  lookupMask?: number;
  proxyProtocol?: Uint8Array;
  set: CompiledService[];
  clear: number[];
  /** A part: more services of this delta follow; only the last part (without `more`) is applied, with all of them. */
  more?: boolean;
}

function sameWords(a: Int32Array | null, b: Int32Array | null): boolean {
  if (a === b) return true;
  if (a === null || b === null || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Whether a worker holding `a` needs `b` (the dest list and scheduler data are replaced, never changed in place). */
export function sameService(a: CompiledService, b: CompiledService): boolean {
  return (
    a.dests === b.dests &&
    a.data === b.data &&
    a.slot === b.slot &&
    a.proto === b.proto &&
    a.vaddr === b.vaddr &&
    a.vport === b.vport &&
    a.scheduler === b.scheduler &&
    a.schedFlags === b.schedFlags &&
    a.persistMs === b.persistMs &&
    a.netmask === b.netmask &&
    a.sloppy === b.sloppy &&
    a.mhTableSize === b.mhTableSize &&
    sameWords(a.addr6, b.addr6) &&
    sameWords(a.netmask6, b.netmask6)
  );
}

/** The delta that turns a worker's `prev` into `next` (both with services at their slots). */
export function snapshotDelta(prev: Snapshot, next: Snapshot): SnapshotDelta {
  const { services, lookup, lookupMask, proxyProtocol, ...rest } = next;
  const set: CompiledService[] = [];
  const clear: number[] = [];
  const n = Math.max(prev.services.length, services.length);
  for (let i = 0; i < n; i++) {
    const a = prev.services[i];
    const b = services[i];
    if (b === undefined) {
      if (a !== undefined) clear.push(i);
    } else if (a === undefined || !sameService(a, b)) set.push(b);
  }
  return {
    ...rest,
    ...(lookup !== prev.lookup ? { lookup, lookupMask } : {}),
    ...(proxyProtocol !== prev.proxyProtocol ? { proxyProtocol } : {}),
    kind: 'delta',
    set,
    clear,
  };
}

/** A worker's side: `cur` becomes the snapshot the delta was made for (in place; returned). */
export function applyDelta(cur: Snapshot, d: SnapshotDelta): Snapshot {
  const { kind: _k, set, clear, ...rest } = d;
  const services = cur.services;
  for (const i of clear) delete services[i];
  for (const s of set) services[s.slot] = s;
  // The array's length: one past the highest slot in use (clear may have taken the last ones).
  let len = services.length;
  while (len > 0 && services[len - 1] === undefined) len--;
  services.length = len;
  Object.assign(cur, rest);
  return cur;
}

export function isDelta(m: Snapshot | SnapshotDelta): m is SnapshotDelta {
  return (m as SnapshotDelta).kind === 'delta';
}
