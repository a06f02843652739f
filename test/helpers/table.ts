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

/** findIn under the bucket lock, as the control thread calls it. */
export function findIn(t: ConnTable, proto: number, c: number, cp: number, v: number, hi: ArrayLike<number> | null = null): number {
  const b = t.bucketIn(proto, c, cp, v, hi);
  t.lockBucket(b);
  const e = t.findIn(b, proto, c, cp, v, hi);
  t.unlockBucket(b);
  return e;
}

/** findOut under the bucket lock. */
export function findOut(t: ConnTable, proto: number, d: number, dp: number, l: number, hi: ArrayLike<number> | null = null): number {
  const b = t.bucketOut(proto, d, dp, l, hi);
  t.lockBucket(b);
  const e = t.findOut(b, proto, d, dp, l, hi);
  t.unlockBucket(b);
  return e;
}
