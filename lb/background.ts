/**
 * A command run beside the control thread, never instead of it: spawned (not execFileSync), at
 * nice 10 (its work — thousands of rules or set elements, seconds of the kernel's time in its
 * context — goes behind the control thread and the dataplane workers when the CPUs are busy),
 * its input written and its output collected. Never rejects: a command that cannot start has
 * code null and the reason in stderr.
 *
 * The spawn itself happens on a thread of its own: starting a process copies the calling
 * process's page tables (libuv forks), which at 10,000 services × 10 servers (500 MB resident)
 * held the calling thread 15–70 ms per command — the control thread, every few seconds, for the
 * periodic checks of the node's rules (perf/SCALE.md). On the spawner thread only it waits.
 */
import { spawn } from 'node:child_process';
import { setPriority } from 'node:os';
import { Worker } from 'node:worker_threads';

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs one command to its end; the spawner thread's whole job (also used where no thread can start). */
export function runHere(cmd: string, args: string[], input?: string): Promise<Ran> {
  return new Promise((resolve) => {
    let p: ReturnType<typeof spawn>;
    try {
      p = spawn(cmd, args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    } catch (e) {
      resolve({ code: null, stdout: '', stderr: (e as Error).message });
      return;
    }
    try {
      if (p.pid) setPriority(p.pid, 10);
    } catch {
      /* gone already */
    }
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    p.stdout!.on('data', (b: Buffer) => out.push(b));
    p.stderr!.on('data', (b: Buffer) => err.push(b));
    p.on('error', (e) => resolve({ code: null, stdout: '', stderr: e.message }));
    p.on('close', (code) => resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') }));
    if (input !== undefined) {
      p.stdin!.on('error', () => undefined); // gone early: its exit code says why
      p.stdin!.end(input);
    }
  });
}

interface Ask {
  id: number;
  cmd: string;
  args: string[];
  input?: string;
}

/** The spawner thread: runHere for every message, its answer posted back with the message's id. */
const SPAWNER = `
const { parentPort, workerData } = require('node:worker_threads');
const { runHere } = require(workerData.module);
parentPort.on('message', (m) => void runHere(m.cmd, m.args, m.input).then((r) => parentPort.postMessage({ id: m.id, ...r })));
`;

let spawner: Worker | null = null;
let nextId = 1;
const waiting = new Map<number, (r: Ran) => void>();

function thread(): Worker | null {
  if (spawner) return spawner;
  try {
    const w = new Worker(SPAWNER, { eval: true, workerData: { module: __filename } });
    w.unref(); // never what keeps the process alive
    w.on('message', (m: Ran & { id: number }) => {
      const done = waiting.get(m.id);
      waiting.delete(m.id);
      done?.({ code: m.code, stdout: m.stdout, stderr: m.stderr });
    });
    // A thread that died answers nothing more: what waits is answered, the next command starts a new one.
    const gone = (why: string) => {
      if (spawner !== w) return;
      spawner = null;
      for (const [id, done] of waiting) {
        waiting.delete(id);
        done({ code: null, stdout: '', stderr: `the spawner thread ${why}` });
      }
    };
    w.on('error', (e) => gone(`failed: ${e.message}`));
    w.on('exit', (code) => gone(`exited (${code})`));
    spawner = w;
    return w;
  } catch {
    return null;
  }
}

export function runBackground(cmd: string, args: string[], input?: string): Promise<Ran> {
  const w = thread();
  if (!w) return runHere(cmd, args, input);
  return new Promise((resolve) => {
    const id = nextId++;
    waiting.set(id, resolve);
    w.ref(); // while a command runs, its answer is awaited
    w.postMessage({ id, cmd, args, ...(input !== undefined ? { input } : {}) } satisfies Ask);
  }).finally(() => {
    if (waiting.size === 0) spawner?.unref();
  }) as Promise<Ran>;
}
