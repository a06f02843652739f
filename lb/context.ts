/**
 * The state the packet path shares, in one object a worker allocates once (like the kernel's
 * skb + struct ip_vs_iphdr, plus the netns_ipvs the handlers reach through it): the worker's
 * table, counters, configuration snapshot and clock, and the current packet as parsed — family,
 * header offsets, addresses and ports, offload state, its table key, its flow, and the caller's
 * output region (./verdict.ts). The path's files (./core.ts, ./xmit.ts, ./tunnel.ts,
 * ./icmp.ts, ./offload.ts) are plain functions over it; nothing here is per packet but stores.
 */
import { FlowKey, FlowView } from '../conntrack/flow';
import * as L from '../conntrack/layout';
import type { Drop } from '../conntrack/layout';
import type { ConnTable } from '../conntrack/table';
import { HalfSipHash } from '../net/siphash';
import type { Snapshot } from './snapshot';
import { DROP, OutRegion, REPLY } from './verdict';

/**
 * Per-source token buckets for generated packets: a fixed array indexed by a keyed hash of the
 * source (sources sharing a slot share its budget, so no source ever gets more than one slot's
 * worth, and spoofing many sources cannot evict anyone's). 4096 slots × 2 words = 32 KiB a worker.
 */
export const GEN_PEER_SLOTS = 4096;

/** Slots of the full-NAT memo of full pools (./xmit.ts). */
export const FULLNAT_MEMO_SLOTS = 64;

/** Before the first packet: a region nothing fits in. */
const NO_REGION = new OutRegion(new Uint8Array(0));

export class PacketContext {
  // ── the worker's ─────────────────────────────────────────────────────────────────────────
  readonly table: ConnTable;
  /** This worker's counters (conntrack/layout.ts C_*, per real server and service). */
  readonly counters: Float64Array;
  readonly maxRealServers: number;
  /** Bytes of virtio_net_hdr before every packet: P.VNET_HLEN with device offloads, else 0. */
  readonly vnet: number;
  /** The configuration the packets are handled by; replaced between batches. */
  snapshot: Snapshot;
  /** Table-relative ms (ConnTable.now), set once per batch. */
  now = 0;
  /** Worker → control rings (conntrack/layout.ts RG_*), or null (no Redis). */
  ring: Int32Array | null = null;
  ringBytes: Uint8Array | null = null;
  /** IP ID of the next IPv4 header this worker builds. */
  ipId = 1;
  /** xorshift32 state (full-NAT ports, the global answer limit's random cost): no Math.random per packet. */
  rnd = 0x9e3779b9;
  /** Keyed hash for what outsiders must not steer (answer-limit slots, the full-NAT memo). */
  readonly hash = new HalfSipHash();
  readonly hashKey = new Int32Array(2);
  /** drop_packet's countdown (kernel drop_counter), this worker's own (./core.ts). */
  dropCounter = 0;
  /** Answer limits (./icmp.ts mayAnswer): [tokens (ms of credit; −1 = never used), last use (ms)] per source slot. */
  readonly peerBuckets = new Int32Array(GEN_PEER_SLOTS * 2).fill(-1);
  /** The worker's global answer bucket (icmp_global): credit and the time it was last refilled; −1 = never used. */
  genCredit = -1;
  genStamp = 0;
  /** Full-NAT (./xmit.ts): (pool address, server) pairs found without a free port, by keyed tag, and until when. */
  readonly fullTags = new Int32Array(FULLNAT_MEMO_SLOTS);
  readonly fullUntil = new Int32Array(FULLNAT_MEMO_SLOTS);
  /** SYN proxy (./synproxy.ts): the cookie's minute counter and our TCP timestamp clock (Unix ms, 32 bits), set per batch; a flow's SP words. */
  spMinute = 0;
  tsNow = 0;
  readonly spW = new Int32Array(L.SP_WORDS);
  /**
   * Queue steering by uvs's program (lb/steering.ts, docs/steering.md): its 64-bit key, this
   * worker's queue and the device's number of queues; steerQueues ≤ 1 when the program does not
   * steer. steerPrefix: full-NAT's port choice hashes a 4-tuple's prefix once per SYN.
   */
  steerK0 = 0;
  steerK1 = 0;
  readonly steerPrefix = new HalfSipHash();
  steerQueue = 0;
  steerQueues = 0;
  /**
   * The current SYN replaces a full-NAT TCP connection in TIME_WAIT (its client reused the port),
   * whose view `flow` still holds: the new connection keeps its real server and pool address and
   * port where it can (./core.ts newFlow, ./xmit.ts insertFullnat). Set per packet.
   */
  keepFlow = false;

  // ── the current packet ───────────────────────────────────────────────────────────────────
  /** The caller's region: generated packets go there, and what the packet got. */
  out: OutRegion = NO_REGION;
  /** IPv6: addresses are their low words here, the rest in key.hi and pa (conntrack/flow.ts). */
  v6 = false;
  /** The L4 checksum is partial (virtio NEEDS_CSUM): the pseudo-header sum, P.fixPartial32 applies. */
  partial = false;
  /** gso_size of a TCP GSO super-packet, else 0. */
  gsoSize = 0;
  /** Offsets: the IP header (its virtio header, with offloads, just before), the L4 header; IP total length. */
  off = 0;
  l4 = 0;
  totlen = 0;
  /** IP protocol, | L.PROTO_V6 for IPv6 (the table's E_PROTO). */
  proto = 0;
  /** Ports as on the wire; the addresses (IPv6: the last word) are saddr and daddr below. */
  sport = 0;
  dport = 0;
  /** What the state machine reads (ConnTable.touch): TCP the flags, SCTP the chunk event, UDP 0. */
  ev = 0;
  /** IPv6 addresses in full: source words 0..3, destination 4..7. */
  readonly pa = new Int32Array(8);
  /** Client and virtual address folded to 32 bits, as the kernel's schedulers hash IPv6. */
  cfold = 0;
  vfold = 0;
  /** The packet's table key (a client's packet: client→server, hi[0..5]; a server's: hi[6..11]). */
  readonly key = new FlowKey();
  /** Its connection as the table's lookup or insert left it. */
  readonly flow = new FlowView();

  /** saddr, daddr: int32 words behind accessors, as conntrack/flow.ts explains (WORDS): an address as a plain field is a boxed double. */
  private readonly addrs = new Int32Array(2);
  get saddr(): number {
    return this.addrs[0]!;
  }
  set saddr(v: number) {
    this.addrs[0] = v;
  }
  get daddr(): number {
    return this.addrs[1]!;
  }
  set daddr(v: number) {
    this.addrs[1] = v;
  }

  constructor(table: ConnTable, counters: Float64Array, maxRealServers: number, snapshot: Snapshot, vnet: number) {
    this.table = table;
    this.counters = counters;
    this.maxRealServers = maxRealServers;
    this.snapshot = snapshot;
    this.vnet = vnet;
  }
}

/** Counts a dropped packet by reason. */
export function drop(c: PacketContext, reason: Drop): number {
  c.out.reason = reason;
  c.counters[L.C_DROP_BASE + reason]!++;
  return DROP;
}

/** One packet of len bytes was built at out.off: the answer (its virtio header before it). */
export function reply(c: PacketContext, len: number): number {
  const out = c.out;
  out.offs[0] = out.off - c.vnet;
  out.lens[0] = len + c.vnet;
  out.count = 1;
  return REPLY;
}

/** Copies b[from, from+len) to out.buf[to] (memmove when they are one buffer, as in workers). */
export function copyOut(c: PacketContext, b: Uint8Array, from: number, to: number, len: number): void {
  const x = c.out.buf;
  if (b === x) x.copyWithin(to, from, from + len);
  else for (let i = 0; i < len; i++) x[to + i] = b[from + i]!;
}

/** The next IPv4 ID this worker uses. */
export function nextIpId(c: PacketContext): number {
  const id = c.ipId;
  c.ipId = (id + 1) & 0xffff;
  return id;
}

/** The next number of the worker's xorshift32 stream. */
export function nextRandom(c: PacketContext): number {
  let x = c.rnd;
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  c.rnd = x;
  return x;
}

/** Queues entry e for a Redis write; a full ring loses the event (counted), never blocks. */
export function pushSync(c: PacketContext, e: number): void {
  const r = c.ring;
  if (r === null) return;
  const tail = r[L.RG_SYNC_TAIL]!;
  if (((tail - Atomics.load(r, L.RG_SYNC_HEAD)) | 0) >= L.SYNC_RING_SLOTS) {
    c.counters[L.C_SYNC_RING_FULL]!++;
    return;
  }
  r[L.syncRingOffset() + (tail & (L.SYNC_RING_SLOTS - 1))] = e;
  Atomics.store(r, L.RG_SYNC_TAIL, (tail + 1) | 0);
}

/** Client → server counters of a real server and its service (ip_vs_in_stats). */
export function countIn(c: PacketContext, rsSlot: number, svcSlot: number, bytes: number): void {
  c.out.rs = rsSlot;
  c.out.svc = svcSlot;
  const n = c.counters;
  const rb = L.rsCounterBase(rsSlot);
  const sb = L.svcCounterBase(c.maxRealServers, svcSlot);
  n[rb + L.RSC_INPKTS]!++;
  n[rb + L.RSC_INBYTES] = n[rb + L.RSC_INBYTES]! + bytes;
  n[sb + L.RSC_INPKTS]!++;
  n[sb + L.RSC_INBYTES] = n[sb + L.RSC_INBYTES]! + bytes;
}

/** Server → client counters of a real server and its service (ip_vs_out_stats). */
export function countOut(c: PacketContext, rsSlot: number, svcSlot: number, bytes: number): void {
  c.out.rs = rsSlot;
  c.out.svc = svcSlot;
  const n = c.counters;
  const rb = L.rsCounterBase(rsSlot);
  const sb = L.svcCounterBase(c.maxRealServers, svcSlot);
  n[rb + L.RSC_OUTPKTS]!++;
  n[rb + L.RSC_OUTBYTES] = n[rb + L.RSC_OUTBYTES]! + bytes;
  n[sb + L.RSC_OUTPKTS]!++;
  n[sb + L.RSC_OUTBYTES] = n[sb + L.RSC_OUTBYTES]! + bytes;
}
