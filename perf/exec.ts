/**
 * Child processes for the benchmark: every command runs bounded in time (a hard kill after its
 * timeout), inside a namespace when asked (`ip netns exec` execs the command, so the child's pid
 * is the command's), in a process group of its own (signals go to the whole group: trafgen, for
 * one, forks its senders), and is remembered until it exits so that Ctrl-C can stop exactly the
 * processes this run started.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  ms: number;
}

export interface RunOptions {
  /** Run inside this network namespace. */
  ns?: string;
  /** Hard limit: SIGKILL after this many ms (default 60 s). */
  timeoutMs?: number;
  /** Send SIGINT after this many ms (for generators that run until interrupted, e.g. trafgen). */
  interruptAfterMs?: number;
  /** Called with the child right after it was spawned. */
  onSpawn?: (c: ChildProcess) => void;
}

const live = new Set<ChildProcess>();

/** Signals a child's whole process group (it was spawned detached, so it leads one). */
export function signalGroup(c: ChildProcess, sig: NodeJS.Signals): void {
  if (!c.pid) return;
  try {
    process.kill(-c.pid, sig);
  } catch {
    try {
      c.kill(sig);
    } catch {
      /* gone */
    }
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export function run(cmd: string, args: string[], o: RunOptions = {}): Promise<RunResult> {
  const argv = o.ns ? ['netns', 'exec', o.ns, cmd, ...args] : args;
  const file = o.ns ? 'ip' : cmd;
  const started = Date.now();
  return new Promise((resolve) => {
    let child: ChildProcess;
    try {
      child = spawn(file, argv, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    } catch (e) {
      resolve({ code: null, signal: null, stdout: '', stderr: (e as Error).message, timedOut: false, ms: 0 });
      return;
    }
    live.add(child);
    o.onSpawn?.(child);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outLen = 0;
    child.stdout!.on('data', (d: Buffer) => {
      if (outLen < 16 << 20) out.push(d);
      outLen += d.length;
    });
    child.stderr!.on('data', (d: Buffer) => {
      if (err.length < 4096) err.push(d);
    });
    let timedOut = false;
    const hard = setTimeout(() => {
      timedOut = true;
      signalGroup(child, 'SIGKILL');
    }, o.timeoutMs ?? 60000);
    const soft = o.interruptAfterMs !== undefined ? setTimeout(() => signalGroup(child, 'SIGINT'), o.interruptAfterMs) : null;
    const finish = (code: number | null, signal: NodeJS.Signals | null, extra = '') => {
      clearTimeout(hard);
      if (soft) clearTimeout(soft);
      live.delete(child);
      resolve({
        code,
        signal,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8') + extra,
        timedOut,
        ms: Date.now() - started,
      });
    };
    child.on('error', (e) => finish(null, null, e.message));
    child.on('close', (code, signal) => finish(code, signal));
  });
}

/** Like run, but throws with the command's stderr when it fails or times out. */
export async function runOk(cmd: string, args: string[], o: RunOptions = {}): Promise<string> {
  const r = await run(cmd, args, o);
  if (r.code !== 0 || r.timedOut) {
    const why = r.timedOut ? `timed out after ${r.ms} ms` : `exit ${r.code ?? r.signal}`;
    const tail = (r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ');
    throw new Error(`${cmd} ${args.join(' ')}: ${why}${tail ? `: ${tail}` : ''}`);
  }
  return r.stdout;
}

/** Long-lived processes started with spawnTracked (servers, LB daemons), by pid. */
export function spawnTracked(cmd: string, args: string[], ns: string | undefined, stdio: 'ignore' | number = 'ignore'): ChildProcess {
  const argv = ns ? ['netns', 'exec', ns, cmd, ...args] : args;
  const child = spawn(ns ? 'ip' : cmd, argv, { stdio: ['ignore', stdio, stdio], detached: true });
  live.add(child);
  child.on('exit', () => live.delete(child));
  child.on('error', () => live.delete(child));
  return child;
}

/** Kills every process this run started and that is still running (by pid). */
export function killLive(signal: NodeJS.Signals = 'SIGKILL'): void {
  for (const c of live) signalGroup(c, signal);
}

/** Resolves when every process this run started has exited, or after ms. */
export async function waitLive(ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (live.size > 0 && Date.now() < deadline) await sleep(50);
}

/** Stops one process: SIGTERM, then SIGKILL after graceMs; resolves when it has exited. */
export async function stopProcess(c: ChildProcess, graceMs = 3000): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const done = new Promise<void>((r) => c.once('exit', () => r()));
  c.kill('SIGTERM');
  const t = setTimeout(() => signalGroup(c, 'SIGKILL'), graceMs);
  await done;
  clearTimeout(t);
}
