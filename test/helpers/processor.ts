/**
 * A PacketProcessor over the real table, service model and schedulers, with no device: the
 * packet path as data for tests. The one place tests build it, so every test sees the wiring of
 * a worker (lb/worker.ts): the same constructor, an OutRegion it owns, the clock set as a batch
 * sets it.
 */
import * as L from '../../conntrack/layout';
import { SCTP_STATE_KEYS } from '../../conntrack/sctp-state';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';
import { TCP_STATE_NAMES } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { ServiceModel } from '../../control/services';
import { VNET_HLEN } from '../../net/packet';
import { PacketProcessor } from '../../lb/core';
import { OutRegion, REPLY } from '../../lb/verdict';

export interface ProcessorOptions {
  /** Device offloads: packets are given with their virtio header first. */
  offload?: boolean;
  /** Connection-table entries (and `dataplane.tableSize`), default 1024. */
  capacity?: number;
  /** Bytes of the buffer generated packets are built in, default 8192. */
  outBytes?: number;
  /** Worker → control rings (sync events, parked packets), as a worker with Redis has them. */
  ring?: boolean;
  /** Read the table's clock before every packet (a batch per packet) instead of once at creation. */
  liveClock?: boolean;
}

/** What one packet got: the verdict, the packet (rewritten in place), and what was generated. */
export interface Run {
  v: number;
  pkt: Uint8Array;
  /** The one generated packet (REPLY), without its virtio header; null otherwise. */
  reply: Uint8Array | null;
  /** Every generated packet (REPLY), virtio header included, in order. */
  outs: Uint8Array[];
}

/** Builds the processor for a configuration document (validated as uvsd validates it). */
export function makeProcessor(doc: Record<string, unknown>, o: ProcessorOptions = {}) {
  const capacity = o.capacity ?? 1024;
  const dataplane = { workers: 1, tableSize: capacity, maxRealServers: 16, maxServices: 8, ...(doc.dataplane as Record<string, unknown>) };
  const cfg = validateConfig({ ...doc, dataplane });
  const rsSab = createRealServerRegion(16);
  const schedSab = new SharedArrayBuffer(8 * L.SCHED_WORDS * 4);
  const model = new ServiceModel(rsSab, schedSab, 16, 8);
  // The configured timeouts, as uvsd sets them (control/daemon.ts tableTimeouts).
  const timeouts = {
    tcp: TCP_STATE_NAMES.map((n) => cfg.timeouts.tcp[n]!),
    udp: cfg.timeouts.udp,
    sctp: SCTP_STATE_KEYS.map((k) => cfg.timeouts.sctp[k]!),
  };
  const table = new ConnTable(ConnTable.create(capacity, timeouts), rsSab, 1);
  model.now = () => table.now(); // scheduler timers run on the table's clock, as uvsd wires them
  const counters = new Float64Array(L.counterWords(16, 8));
  const out = new Uint8Array(o.outBytes ?? 8192);
  const region = new OutRegion(out);
  const proc = new PacketProcessor(table, counters, new Int32Array(schedSab), 16, model.apply(cfg), o.offload ?? false);
  const ring = o.ring ? new SharedArrayBuffer(L.ringBytes()) : null;
  if (ring) proc.setRing(ring);
  let clock = table.now();
  proc.setTime(clock);
  /** Moves the processor's clock (table-relative ms), as the next batch would. */
  const setNow = (ms: number) => {
    clock = ms;
    proc.setTime(ms);
  };
  const V = o.offload ? VNET_HLEN : 0;
  /** Runs one packet (with offloads: virtio header first) with the region at the start of `out`. */
  const run = (pkt: Uint8Array): Run => {
    if (o.liveClock) setNow(table.now());
    region.off = V;
    region.end = out.length;
    const v = proc.process(pkt, V, pkt.length - V, region);
    const outs: Uint8Array[] = [];
    if (v === REPLY) for (let k = 0; k < region.count; k++) outs.push(out.slice(region.offs[k]!, region.offs[k]! + region.lens[k]!));
    const reply = v === REPLY && region.count === 1 ? outs[0]!.subarray(V) : null;
    return { v, pkt, reply, outs };
  };
  const drops = (name: (typeof L.DROP_NAMES)[number]) => counters[L.C_DROP_BASE + L.DROP_NAMES.indexOf(name)];
  /** Sets the route MTU uvsd would have read for every real server. */
  const setMtu = (mtu: number) => {
    for (const r of model.eachRsSlotAddr()) Atomics.store(model.rs, r.slot * L.RS_WORDS + L.RS_MTU, mtu);
  };
  /** Applies another configuration document (a reload): the model's new snapshot goes to the processor. */
  const apply = (next: Record<string, unknown>) => {
    const c = validateConfig({ ...next, dataplane: { ...dataplane, ...(next.dataplane as Record<string, unknown>) } });
    proc.setSnapshot(model.apply(c));
    return c;
  };
  return {
    cfg,
    model,
    table,
    counters,
    out,
    region,
    proc,
    run,
    drops,
    setMtu,
    setNow,
    now: () => clock,
    apply,
    ring,
    rs: new Int32Array(rsSab),
  };
}
export type Processor = ReturnType<typeof makeProcessor>;

/** The IPv6 lab of the processor tests: one service on VIP6 over RS6, forwarding as given. */
export const VIP6 = 'fd00:96::10';
export const CLIENT6 = '2001:db8:1::100';
export const RS6 = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];

export function setup6(forwarding: string, protocol = 'tcp', offload = true, extra: Record<string, unknown> = {}) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['fd00:96::/64'], tunnelSource6: 'fd00:1::1', fullnat: { addresses: ['fd00:99::1'] } },
      services: [
        {
          protocol,
          address: VIP6,
          port: 80,
          scheduler: 'rr',
          forwarding,
          realServers: RS6.map((a) => (forwarding === 'tunnel' ? { address: a } : { address: a, port: 8080 })),
          ...extra,
        },
      ],
    },
    { offload, outBytes: 1 << 18 },
  );
}

export const payload = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + 3) & 255);
