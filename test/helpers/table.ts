/** A fresh connection table for unit tests (control thread's owner id), with its real-server region. */
import * as L from '../../conntrack/layout';
import { TCP_DEFAULT_TIMEOUTS } from '../../conntrack/state';
import { FlowKey } from '../../conntrack/flow';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';

export const TABLE_TIMEOUTS = { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300 };

/** The table tests' IPv4 flow: client C, virtual V, real server D, full-NAT local P; ports C:40000 → V:80, D:8080 → 40000. */
export const FLOW = {
  C: 0x0a000002,
  V: 0x0a600001,
  D: 0x0a0b0002,
  P: 0x0a0c0001,
  CP: (40000 << 16) | 80,
  DP: (8080 << 16) | 40000,
};

/** `available`: the 8 real-server slots marked available with weight 1 (else all words 0). */
export function freshTable(capacity = 1024, available = false): { t: ConnTable; rs: Int32Array } {
  const region = createRealServerRegion(8);
  const t = new ConnTable(ConnTable.create(capacity, TABLE_TIMEOUTS), region, L.OWNER_CONTROL);
  const rs = new Int32Array(region);
  if (available) {
    for (let s = 0; s < 8; s++) {
      rs[s * L.RS_WORDS + L.RS_FLAGS] = L.RSF_AVAILABLE;
      rs[s * L.RS_WORDS + L.RS_WEIGHT] = 1;
    }
  }
  return { t, rs };
}

/** A worker's lookup key (readFlow and friends): protocol, source, ports, destination, IPv6 high words. */
export function key(proto: number, src: number, ports: number, dst: number, hi: ArrayLike<number> | null = null): FlowKey {
  const k = new FlowKey();
  k.proto = proto;
  k.src = src;
  k.ports = ports;
  k.dst = dst;
  if (hi) for (let i = 0; i < L.HI_WORDS; i++) k.hi[i] = hi[i]!;
  return k;
}

/** find(b) under bucket b's lock, as the control thread looks a flow up. */
function locked(t: ConnTable, b: number, find: (b: number) => number): number {
  t.lockBucket(b);
  const e = find(b);
  t.unlockBucket(b);
  return e;
}

/** findIn under the bucket lock. */
export function findIn(t: ConnTable, proto: number, c: number, cp: number, v: number, hi: ArrayLike<number> | null = null): number {
  return locked(t, t.bucketIn(proto, c, cp, v, hi), (b) => t.findIn(b, proto, c, cp, v, hi));
}

/** findOut under the bucket lock. */
export function findOut(t: ConnTable, proto: number, d: number, dp: number, l: number, hi: ArrayLike<number> | null = null): number {
  return locked(t, t.bucketOut(proto, d, dp, l, hi), (b) => t.findOut(b, proto, d, dp, l, hi));
}
