/**
 * A PacketProcessor over the real table, service model and schedulers, with no device: the
 * packet path as data for unit tests. One place builds it, so every test file sees the same
 * wiring as a worker.
 */
import * as L from '../../conntrack/layout';
import { SCTP_STATE_KEYS } from '../../conntrack/sctp-state';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';
import { TCP_DEFAULT_TIMEOUTS } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { ServiceModel } from '../../control/services';
import { VNET_HLEN } from '../../net/packet';
import { PacketProcessor, REPLY } from '../../lb/processor';

export interface ProcessorOptions {
  /** Device offloads: packets are given with their virtio header first. */
  offload?: boolean;
  capacity?: number;
  outBytes?: number;
}

/** Builds the processor for a configuration document (validated as uvsd validates it). */
export function makeProcessor(doc: Record<string, unknown>, o: ProcessorOptions = {}) {
  const capacity = o.capacity ?? 1024;
  const dataplane = { workers: 1, tableSize: capacity, maxRealServers: 16, maxServices: 8, ...(doc.dataplane as Record<string, unknown>) };
  const cfg = validateConfig({ ...doc, dataplane });
  const rsSab = createRealServerRegion(16);
  const schedSab = new SharedArrayBuffer(8 * L.SCHED_WORDS * 4);
  const model = new ServiceModel(rsSab, schedSab, 16, 8);
  const timeouts = { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300, sctp: SCTP_STATE_KEYS.map((k) => cfg.timeouts.sctp[k]!) };
  const table = new ConnTable(ConnTable.create(capacity, timeouts), rsSab, 1);
  const counters = new Float64Array(L.counterWords(16, 8));
  const out = new Uint8Array(o.outBytes ?? 8192);
  const proc = new PacketProcessor(table, counters, new Int32Array(schedSab), 16, model.apply(cfg), out, o.offload ?? false);
  proc.now = table.now();
  const V = o.offload ? VNET_HLEN : 0;
  /** Runs one packet (with offloads: virtio header first); a generated answer is copied out. */
  const run = (pkt: Uint8Array) => {
    proc.outOff = V;
    proc.outEnd = out.length;
    const v = proc.process(pkt, V, pkt.length - V);
    return { v, pkt, reply: v === REPLY && proc.outCount === 0 ? out.slice(V, V + proc.outLen) : null };
  };
  const drops = (name: (typeof L.DROP_NAMES)[number]) => counters[L.C_DROP_BASE + L.DROP_NAMES.indexOf(name)];
  /** Sets the route MTU uvsd would have read for every real server. */
  const setMtu = (mtu: number) => {
    for (const r of model.rsSlotAddrs()) Atomics.store(model.rs, r.slot * L.RS_WORDS + L.RS_MTU, mtu);
  };
  return { cfg, model, table, counters, out, proc, run, drops, setMtu, rs: new Int32Array(rsSab) };
}
