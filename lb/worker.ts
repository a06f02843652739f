/**
 * A dataplane worker thread: owns one queue of the TUN device, reads packets in batches, runs
 * each through the PacketProcessor and writes the results back in one batch. Receives new
 * service snapshots from the control thread between batches. Never imports fastify, pino,
 * prom-client or ioredis; reports through shared counters only.
 */
import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import * as L from '../conntrack/layout';
import { ConnTable } from '../conntrack/table';
import { DROP, FORWARD, PacketProcessor } from './processor';
import type { Snapshot } from './snapshot';
import { tunAddon } from './tun';

export interface WorkerInit {
  id: number;
  fd: number;
  table: SharedArrayBuffer;
  realServers: SharedArrayBuffer;
  sched: SharedArrayBuffer;
  counters: SharedArrayBuffer;
  snapshot: Snapshot;
  batch: number;
  /** Bytes per packet slot: ≥ the device MTU. */
  slot: number;
  maxRealServers: number;
  /** Worker → control rings (sync events, parked packets). */
  ring: SharedArrayBuffer;
  /** Snapshots arrive here; ctl[CTL_SNAPSHOT_VERSION] says a new one is waiting. */
  snapshotPort: MessagePort;
  ctl: SharedArrayBuffer;
}

/** Control words shared with the owner (Int32). */
export const CTL_SNAPSHOT_VERSION = 0;
export const CTL_WORDS = 4;

export type WorkerMessage = { type: 'stop' } | { type: 'crash' };

/** Poll timeout: how long an idle worker waits before looking at its messages again. */
const IDLE_POLL_MS = 50;
/** Batches a worker handles back to back before it yields to its event loop (messages, stop). */
const BUSY_ROUNDS = 64;

function main(init: WorkerInit): void {
  const tun = tunAddon();
  const table = new ConnTable(init.table, init.realServers, init.id + 1);
  const counters = new Float64Array(init.counters);
  const { batch, slot, fd } = init;
  // Slots [0, batch) receive packets; slot batch + i holds the packet generated for packet i.
  const buf = new Uint8Array(2 * batch * slot);
  const lens = new Int32Array(batch);
  const offs = new Int32Array(batch);
  const wlens = new Int32Array(batch);
  const proc = new PacketProcessor(table, counters, new Int32Array(init.sched), init.maxRealServers, init.snapshot, buf);
  proc.setRing(init.ring);
  let running = true;
  const ctl = new Int32Array(init.ctl);
  let seenVersion = init.snapshot.version;
  // A configuration change must apply to the very next batch — not after the poll that may be
  // holding this thread — so the owner bumps a shared version word after posting, and the worker
  // takes the snapshot synchronously when it sees the word change (one atomic load per batch).
  const takeSnapshots = (): void => {
    let m: { message: Snapshot } | undefined;
    while ((m = receiveMessageOnPort(init.snapshotPort) as { message: Snapshot } | undefined)) proc.setSnapshot(m.message);
    seenVersion = Atomics.load(ctl, CTL_SNAPSHOT_VERSION);
  };

  parentPort!.on('message', (m: WorkerMessage) => {
    if (m.type === 'stop') running = false;
    else if (m.type === 'crash') throw new Error(`worker ${init.id} crashed on request`);
  });

  /** Runs one batch of n packets read into buf through the processor and writes the results. */
  const processBatch = (n: number): void => {
    proc.now = table.now();
    let w = 0;
    let rxBytes = 0;
    for (let i = 0; i < n; i++) {
      const off = i * slot;
      const len = lens[i]!;
      rxBytes += len;
      proc.outOff = (batch + i) * slot;
      const v = proc.process(buf, off, len);
      if (v === DROP) continue;
      if (v === FORWARD) {
        offs[w] = off;
        wlens[w] = len;
      } else {
        offs[w] = proc.outOff;
        wlens[w] = proc.outLen;
      }
      w++;
    }
    counters[L.C_RX_PACKETS] = counters[L.C_RX_PACKETS]! + n;
    counters[L.C_RX_BYTES] = counters[L.C_RX_BYTES]! + rxBytes;
    counters[L.C_BATCHES]!++;
    if (w > 0) {
      const written = tun.writeBatch(fd, buf, offs, wlens, w);
      const ok = written < 0 ? 0 : written;
      let txBytes = 0;
      for (let i = 0; i < ok; i++) txBytes += wlens[i]!;
      counters[L.C_TX_PACKETS] = counters[L.C_TX_PACKETS]! + ok;
      counters[L.C_TX_BYTES] = counters[L.C_TX_BYTES]! + txBytes;
      counters[L.C_TX_ERRORS] = counters[L.C_TX_ERRORS]! + (w - ok);
    }
  };

  const loop = (): void => {
    if (!running) {
      parentPort!.postMessage({ type: 'stopped' });
      return;
    }
    let n = tun.readBatch(fd, buf, lens, batch, slot, IDLE_POLL_MS);
    if (n < 0) {
      parentPort!.postMessage({ type: 'readError', errno: -n });
      setTimeout(loop, 100);
      return;
    }
    // While packets keep coming, stay in this turn (bounded, so messages are seen within
    // BUSY_ROUNDS batches): an event-loop turn per batch costs more than the batch itself.
    for (let round = 0; n > 0; round++) {
      if (Atomics.load(ctl, CTL_SNAPSHOT_VERSION) !== seenVersion) takeSnapshots();
      processBatch(n);
      if (round + 1 >= BUSY_ROUNDS) break;
      n = tun.readBatch(fd, buf, lens, batch, slot, 0);
    }
    if (Atomics.load(ctl, CTL_SNAPSHOT_VERSION) !== seenVersion) takeSnapshots();
    setImmediate(loop);
  };
  parentPort!.postMessage({ type: 'ready' });
  loop();
}

if (parentPort && workerData) main(workerData as WorkerInit);
