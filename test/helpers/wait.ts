/**
 * Waiting for a condition instead of sleeping a fixed time: on this kind of shared, loaded
 * machine a fixed sleep is either too short (a flaky failure) or too long (a slow suite). The
 * deadlines are generous on purpose; a condition that holds returns at once.
 */
import type { ChildProcess } from 'node:child_process';

export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 20000, stepMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** Resolves once the child prints a stdout line matching `re` (its stdout must be a pipe); keeps draining after. */
export function waitForLine(child: ChildProcess, re: RegExp, what: string, timeoutMs = 20000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what}: the process exited (${code}) first; output: ${buf.slice(-500)}`));
    });
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const line = buf.split('\n').find((l) => re.test(l));
      if (line !== undefined) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve(line);
      }
    });
  });
}

/**
 * For a test that needs a tool (redis-server, nc, …): skip it on a developer machine without the
 * tool, but fail under CI (CI=true), where a missing tool means the run checked less than it says.
 */
export function needTool(available: boolean, tool: string): false | string {
  if (available) return false;
  if (process.env.CI === 'true') throw new Error(`${tool} is required when CI=true (a skipped test would pass silently)`);
  return `${tool} not installed`;
}
