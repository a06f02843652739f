/**
 * The control worker: one worker thread beside the dataplane's that does, for the control thread,
 * the work whose size a request or a file chooses (control/offload-jobs.ts: parsing, validation,
 * document edits, table walks). The control thread sends a job and goes on answering /healthz and
 * the API; it then applies the result in slices (control/slices.ts). Jobs run one at a time, in
 * the order sent.
 *
 * A job that needs more than WORKER_HEAP_MB of heap kills only this thread (Node's resourceLimits):
 * the request gets 413 and the next job starts a new one. uvsd's other threads are not affected.
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { UvsError } from './errors';
import type { Job, JobResult } from './offload-jobs';

/** The control worker's old-generation heap limit (MB): ten times what the largest accepted batch needs. */
export const WORKER_HEAP_MB = 1024;

export class Offload {
  private worker: Worker | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: JobResult) => void; reject: (e: Error) => void }>();
  private stopped = false;
  /** How long the last job answered ran in the worker (ms), its messages aside. */
  lastJobMs = 0;

  constructor(
    private readonly shared: { table: SharedArrayBuffer; realServers: SharedArrayBuffer } | null,
    private readonly log: Logger,
  ) {}

  private start(): Worker {
    const w = new Worker(join(__dirname, 'offload-worker.js'), {
      workerData: this.shared,
      resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB },
    });
    w.on('message', (m: { id: number; ms: number; result: JobResult }) => {
      this.lastJobMs = m.ms;
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      p?.resolve(m.result);
    });
    const fail = (e: Error) => {
      if (this.worker !== w) return;
      this.worker = null;
      const tooBig = (e as NodeJS.ErrnoException).code === 'ERR_WORKER_OUT_OF_MEMORY';
      if (!this.stopped) this.log.error({ err: e.message, jobs: this.pending.size }, 'control worker died; the next job starts a new one');
      const err = tooBig
        ? new UvsError('UVS_ERR_API_TOO_LARGE', `the request needs more than the control worker's ${WORKER_HEAP_MB} MB of heap`)
        : new UvsError('UVS_ERR_API_INTERNAL', `the control worker stopped: ${e.message}`);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`exit code ${code}`)));
    w.unref();
    return w;
  }

  /** Runs a job on the control worker. `transfer`: buffers to move there instead of copying. */
  run(job: Job, transfer: ArrayBuffer[] = []): Promise<JobResult> {
    if (this.stopped) return Promise.reject(new UvsError('UVS_ERR_API_INTERNAL', 'uvsd is stopping'));
    this.worker ??= this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker!.postMessage({ id, job }, transfer);
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const w = this.worker;
    this.worker = null;
    await w?.terminate();
  }
}
