/**
 * A command run beside the control thread, never instead of it: spawned (not execFileSync), at
 * nice 10 (its work — thousands of rules or set elements, seconds of the kernel's time in its
 * context — goes behind the control thread and the dataplane workers when the CPUs are busy),
 * its input written and its output collected. Never rejects: a command that cannot start has
 * code null and the reason in stderr.
 */
import { spawn } from 'node:child_process';
import { setPriority } from 'node:os';

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runBackground(cmd: string, args: string[], input?: string): Promise<Ran> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
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
