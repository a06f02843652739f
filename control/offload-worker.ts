/**
 * The control worker's thread (control/offload.ts starts it): runs jobs (control/offload-jobs.ts)
 * one at a time and answers each with its result. Its only shared state is a read-only view of
 * the connection table; it holds no lock and writes nothing there.
 */
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import * as L from '../conntrack/layout';
import { ConnTable } from '../conntrack/table';
import { packPatch, runJob, type Job } from './offload-jobs';

/**
 * This thread's nice value: its work (seconds of parsing for a 64 MB batch) waits for a CPU behind
 * the control thread and the dataplane workers (nice 0) on a busy machine. setpriority() with a
 * thread id changes that thread only (Linux; its id is the last part of /proc/thread-self).
 */
const WORKER_NICE = 10;
try {
  setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), WORKER_NICE);
} catch {
  /* not Linux, or no /proc: the default priority */
}

const shared = workerData as { table: SharedArrayBuffer; realServers: SharedArrayBuffer } | null;
// Reads only (table.forEach, entry words): the owner id is never used to lock.
const table = shared ? new ConnTable(shared.table, shared.realServers, L.OWNER_CONTROL) : null;

parentPort!.on('message', (m: { id: number; job: Job }) => {
  const t0 = performance.now();
  const result = runJob(m.job, table);
  const ms = performance.now() - t0; // the job alone, without the messages (Offload.lastJobMs)
  // A listing's bytes move to the control thread instead of being copied; a small Buffer may be
  // a slice of Node's shared pool, which must not move: it is copied into its own memory first.
  if ('json' in result) {
    const u = result.json;
    const own = u.byteOffset === 0 && u.byteLength === u.buffer.byteLength ? u : new Uint8Array(u);
    parentPort!.postMessage({ id: m.id, ms, result: { ...result, json: own } }, [own.buffer as ArrayBuffer]);
  } else if ('patch' in result && result.patch.changed.length > 0) {
    // Many changed services: serialized in parts the control thread reads in slices (packPatch).
    const patch = packPatch(result.patch);
    const moved = patch.packed ? [patch.packed.bytes.buffer as ArrayBuffer] : [];
    parentPort!.postMessage({ id: m.id, ms, result: { ...result, patch } }, moved);
  } else parentPort!.postMessage({ id: m.id, ms, result });
});
