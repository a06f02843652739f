/**
 * A dataplane worker thread: owns one queue of the TUN device, reads packets in batches, runs
 * each through the PacketProcessor (./core.ts; the contract is ./verdict.ts) and writes the results back in one batch — through io_uring
 * (one io_uring_enter per batch) or poll + read + write (docs/io_uring.md). Receives new
 * service snapshots from the control thread between batches. Never imports fastify, pino,
 * prom-client or ioredis; reports through shared counters only.
 */
import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import * as L from '../conntrack/layout';
import { ConnTable } from '../conntrack/table';
import { CaptureTap } from './capture';
import { VNET_HLEN } from '../net/packet';
import { PacketProcessor } from './core';
import { applyDelta, isDelta, type CompiledService, type Snapshot, type SnapshotDelta } from './snapshot';
import { tunAddon, type IoPath, type UringHandle } from './tun';
import { DROP, FORWARD, MAX_OUT, OutRegion } from './verdict';

export interface WorkerInit {
  id: number;
  fd: number;
  table: SharedArrayBuffer;
  realServers: SharedArrayBuffer;
  sched: SharedArrayBuffer;
  counters: SharedArrayBuffer;
  snapshot: Snapshot;
  batch: number;
  /** Bytes per packet slot: ≥ the device MTU (64 KB + header with offloads). */
  slot: number;
  /** The queue carries virtio_net_hdr + offloads (GSO super-packets, partial checksums). */
  offload: boolean;
  maxRealServers: number;
  /** Worker → control rings (sync events, parked packets). */
  ring: SharedArrayBuffer;
  /** Flow sampling: shared by all workers (layout.ts CAP_*). */
  capture: SharedArrayBuffer;
  /** Snapshots arrive here; ctl[CTL_SNAPSHOT_VERSION] says a new one is waiting. */
  snapshotPort: MessagePort;
  ctl: SharedArrayBuffer;
  /** The I/O path the owner chose (dataplane.io after probing); io_uring falls back to poll if the ring cannot be set up. */
  io: IoPath;
  /** uvs's steering program steers the device (its 64-bit key, the number of queues), else null. This worker reads queue `id`. */
  steer: { k0: number; k1: number; queues: number } | null;
}

/** Control words shared with the owner (Int32). */
export const CTL_SNAPSHOT_VERSION = 0;
export const CTL_WORDS = 4;

export type WorkerMessage = { type: 'stop' } | { type: 'crash' };

/** Poll timeout: how long an idle worker waits before looking at its messages again. */
const IDLE_POLL_MS = 50;
/**
 * How long a worker stays in one event-loop turn before it yields (messages, V8's foreground
 * tasks). A yield is not free: the turn out and back took 0.1–0.5 ms in most yields
 * (perf/LOG.md, 2026-12-01 issue 16 profile) — a stall of the queue; nothing sends the worker
 * messages in normal operation (stop and restarts use terminate()), so it yields once a second.
 */
const YIELD_MS = 1000;
/** The chain-length gauge covers this window and the one before it (C_CHAIN_MAX). */
const CHAIN_WINDOW_MS = 10_000;

function main(init: WorkerInit): void {
  const tun = tunAddon();
  const table = new ConnTable(init.table, init.realServers, init.id + 1);
  const counters = new Float64Array(init.counters);
  const { batch, slot, fd } = init;
  const V = init.offload ? VNET_HLEN : 0;
  // Slots [0, batch) receive packets (virtio header first with offloads); out slot i, twice as
  // large, holds what is generated for packet i — one packet, or a super-packet's segments.
  const outSlot = 2 * slot;
  const outBase = batch * slot;
  // The io_uring ring keeps pointers into buf, lens, slots and io for the worker's life: each gets
  // an ArrayBuffer of its own, whose backing store V8 never moves (a typed array of ≤ 64 bytes
  // made with a length may live on the V8 heap, which the GC compacts).
  const buf = new Uint8Array(new ArrayBuffer(batch * slot + batch * outSlot));
  const lens = new Int32Array(new ArrayBuffer(batch * 4));
  // Packet i of a batch is in receive slot slots[i]: i itself on the poll path; on the io_uring
  // path whichever buffer the kernel took from the ring.
  const slots = new Int32Array(new ArrayBuffer(batch * 4));
  for (let i = 0; i < batch; i++) slots[i] = i;
  // io_uring write results (packets, bytes, errors), taken after each wait; io[IO_CLOCK] the wall
  // clock in ms, left there by every uringWait (poll path: clockInto after each read). The loop's
  // only clock: Date.now() allocates a heap number per call (a runtime call even in optimized
  // code), and at one or two calls per loop turn a busy worker scavenged every few seconds.
  const io = new Float64Array(new ArrayBuffer(4 * 8));
  const IO_CLOCK = 3;
  // ConnTable.now() is Date.now() − the table's epoch (shared words); the same from io[IO_CLOCK].
  const t32 = new Int32Array(init.table);
  const epoch = (t32[L.H_EPOCH_LO]! >>> 0) + t32[L.H_EPOCH_HI]! * 0x100000000;
  const clockNow = (): number => (io[IO_CLOCK]! - epoch) | 0;
  // Write list: up to a batch of packets, plus one input's worth of segments before a flush.
  const wcap = batch + MAX_OUT;
  const offs = new Int32Array(wcap);
  const wlens = new Int32Array(wcap);
  const proc = new PacketProcessor(table, counters, new Int32Array(init.sched), init.maxRealServers, init.snapshot, init.offload);
  const out = new OutRegion(buf);
  proc.setRing(init.ring);
  if (init.steer) proc.setSteering(init.steer.k0, init.steer.k1, init.id, init.steer.queues);
  const tap = new CaptureTap(init.capture, init.id);
  let running = true;
  const ctl = new Int32Array(init.ctl);
  let seenVersion = init.snapshot.version;
  /** The snapshot in use: deltas are applied to it. */
  let current = init.snapshot;
  /** Services of a delta sent in parts, until its last part. */
  const parts: CompiledService[] = [];
  // A configuration change must apply to the very next batch — not after the poll that may be
  // holding this thread — so the owner bumps a shared version word after posting, and the worker
  // takes the snapshot synchronously when it sees the word change (one atomic load per batch).
  const takeSnapshots = (): void => {
    let m: { message: Snapshot | SnapshotDelta } | undefined;
    while ((m = receiveMessageOnPort(init.snapshotPort) as { message: Snapshot | SnapshotDelta } | undefined)) {
      const x = m.message;
      // A delta (lb/snapshot.ts) patches the snapshot this worker holds; a whole one replaces it.
      if (isDelta(x)) {
        if (x.more) {
          for (const svc of x.set) parts.push(svc);
          continue;
        }
        if (parts.length) x.set = parts.splice(0).concat(x.set);
        if (x.version > current.version) proc.setSnapshot((current = applyDelta(current, x)));
      } else {
        parts.length = 0;
        proc.setSnapshot((current = x));
      }
    }
    seenVersion = Atomics.load(ctl, CTL_SNAPSHOT_VERSION);
  };

  parentPort!.on('message', (m: WorkerMessage) => {
    if (m.type === 'stop') running = false;
    else if (m.type === 'crash') throw new Error(`worker ${init.id} crashed on request`);
  });

  // Connection-table chain figures (conntrack/table.ts): the longest walk of this and the previous
  // window, and the walks past CHAIN_ALARM — a few stores per read, never per packet.
  let windowStart = table.now();
  let chainPrev = 0;
  const publishChains = (now: number): void => {
    if (((now - windowStart) | 0) >= CHAIN_WINDOW_MS) {
      chainPrev = table.chainWindow();
      windowStart = now;
    }
    const peak = table.longestWalk();
    counters[L.C_CHAIN_MAX] = chainPrev > peak ? chainPrev : peak;
    counters[L.C_LONG_CHAINS] = table.longWalks();
  };

  // The io_uring path when asked for and the ring can be set up; else the poll/read path.
  let ring: UringHandle | null = null;
  let ioReason = '';
  if (init.io === 'io_uring') {
    try {
      ring = tun.uringOpen(fd, buf, lens, slots, io, slot, batch, outSlot);
    } catch (e) {
      ioReason = (e as Error).message;
    }
  }

  let w = 0;
  /** Writes the queued packets to the device in one call and counts them. */
  const flush = (): void => {
    if (w === 0) return;
    if (ring) {
      // Queued on the ring; sent by the next wait, counted when their completions come (takeIo).
      tun.uringWrite(ring, offs, wlens, w);
      w = 0;
      return;
    }
    const written = tun.writeBatch(fd, buf, offs, wlens, w);
    const ok = written < 0 ? 0 : written;
    // writeBatch zeroes the length of every packet it could not write (a hard error stops it
    // early: those after it were not written either).
    let txBytes = 0;
    let counted = 0;
    for (let i = 0; i < w && counted < ok; i++) {
      if (wlens[i]! > 0) {
        txBytes += wlens[i]! - V;
        counted++;
      }
    }
    counters[L.C_TX_PACKETS] = counters[L.C_TX_PACKETS]! + ok;
    counters[L.C_TX_BYTES] = counters[L.C_TX_BYTES]! + txBytes;
    counters[L.C_TX_ERRORS] = counters[L.C_TX_ERRORS]! + (w - ok);
    w = 0;
  };

  /** The clock of the last batch (table-relative ms). */
  let batchNow = 0;
  /** Runs one batch of n packets read into buf through the processor and writes the results. */
  const processBatch = (n: number): void => {
    batchNow = clockNow();
    proc.setTime(batchNow);
    // Flow sampling: one shared-word load a batch; nothing more while no capture runs.
    const capturing = tap.on() !== 0;
    const wallMs = capturing ? io[IO_CLOCK]! : 0;
    let rxBytes = 0;
    for (let i = 0; i < n; i++) {
      const s = slots[i]!;
      const off = s * slot;
      const len = lens[i]!;
      rxBytes += len - V;
      const o = outBase + s * outSlot;
      out.off = o + V;
      out.end = o + outSlot;
      let v: number;
      if (capturing && tap.begin(buf, off + V, len - V, wallMs)) {
        v = proc.process(buf, off + V, len - V, out);
        tap.end(v, out.reason, out.svc, out.rs, out.state, out.proto);
      } else {
        v = proc.process(buf, off + V, len - V, out);
      }
      if (v === DROP) continue;
      if (v === FORWARD) {
        offs[w] = off;
        wlens[w] = len;
        w++;
      } else {
        // More than one packet for one (segments, a PROXY header ahead of data): L.C_TX_EXTRA.
        if (out.count > 1) counters[L.C_TX_EXTRA] = counters[L.C_TX_EXTRA]! + out.count - 1;
        if (w + out.count > wcap) flush();
        for (let k = 0; k < out.count; k++) {
          offs[w] = out.offs[k]!;
          wlens[w] = out.lens[k]!;
          w++;
        }
      }
      if (w > wcap - MAX_OUT) flush();
    }
    counters[L.C_RX_PACKETS] = counters[L.C_RX_PACKETS]! + n;
    counters[L.C_RX_BYTES] = counters[L.C_RX_BYTES]! + rxBytes;
    counters[L.C_BATCHES]!++;
    flush();
  };

  /** Adds the io_uring write results reaped by the last wait to the counters. */
  const takeIo = (): void => {
    if (io[0]! + io[2]! === 0) return;
    counters[L.C_TX_PACKETS] = counters[L.C_TX_PACKETS]! + io[0]!;
    counters[L.C_TX_BYTES] = counters[L.C_TX_BYTES]! + io[1]! - io[0]! * V;
    counters[L.C_TX_ERRORS] = counters[L.C_TX_ERRORS]! + io[2]!;
    io[0] = 0;
    io[1] = 0;
    io[2] = 0;
  };

  // The worker stays in one event-loop turn for up to YIELD_MS, going straight from one device
  // read to the next (a read finds waiting packets at once, or waits in poll): an event-loop turn
  // per wake-up costs a setImmediate, libuv's own epoll_wait and an extra read. Nothing in here
  // needs the event loop — snapshots are taken synchronously when the shared version word moves,
  // and terminate() interrupts JS — so it yields only to stay responsive to messages.
  // io_uring: one io_uring_enter per turn of this loop submits the last batch's writes, returns
  // its slots and waits for (or, after a full batch, only takes) the next packets.
  let lastEmpty = true;
  const loop = (): void => {
    if (!running) {
      if (ring) tun.uringClose(ring);
      ring = null;
      parentPort!.postMessage({ type: 'stopped' });
      return;
    }
    tun.clockInto(io, IO_CLOCK);
    const until = io[IO_CLOCK]! + YIELD_MS;
    for (;;) {
      let n: number;
      if (ring) {
        n = tun.uringWait(ring, IDLE_POLL_MS, lastEmpty);
        takeIo();
      } else {
        n = tun.readBatch(fd, buf, lens, batch, slot, IDLE_POLL_MS, lastEmpty);
        tun.clockInto(io, IO_CLOCK);
      }
      if (n < 0) {
        parentPort!.postMessage({ type: 'readError', errno: -n });
        setTimeout(loop, 100);
        return;
      }
      if (Atomics.load(ctl, CTL_SNAPSHOT_VERSION) !== seenVersion) takeSnapshots();
      if (n > 0) processBatch(n);
      publishChains(n > 0 ? batchNow : clockNow());
      lastEmpty = n < batch;
      if (io[IO_CLOCK]! >= until) break;
    }
    // Writes of the last batch must not wait for the event-loop turn.
    if (ring) tun.uringSubmit(ring);
    setImmediate(loop);
  };
  parentPort!.postMessage({ type: 'ready', io: ring ? 'io_uring' : 'poll', ioReason });
  loop();
}

if (parentPort && workerData) main(workerData as WorkerInit);
