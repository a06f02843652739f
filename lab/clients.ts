/**
 * Real clients started inside a lab's client namespace, shared by the integration tests, the
 * demos and the perf harness's failure figures (perf/failures.ts):
 *
 *   blobDownload  curl fetches the lab's /blob (rate-limited) and the bytes are checked end to
 *                 end against blobSha256: a transfer that was cut, stalled or corrupted is "broken"
 *   runTool       one command of lab/tools.ts (load, hold-echo, echo-probe, udp-probe, …), its
 *                 JSON line parsed
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { blobSha256 } from './blob';

const ROOT = join(__dirname, '..', '..');
export const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');

export interface Download {
  seed: number;
  bytes: number;
  /** True when the whole body arrived byte-identical. */
  done: Promise<boolean>;
  /** The same, with curl's exit status (0, or e.g. 56 = connection reset, 28 = timed out). */
  result: Promise<{ ok: boolean; curlExit: number | null }>;
}

/** `curl -m maxSeconds --limit-rate rate http://host:port/blob?bytes=…&seed=… | sha256sum` in ns. */
export function blobDownload(ns: string, host: string, port: number, bytes: number, seed: number, rate: string, maxSeconds = 60): Download {
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}/blob?bytes=${bytes}&seed=${seed}`;
  const script = `curl -s -m ${maxSeconds} --limit-rate ${rate} "${url}" | sha256sum; echo "curl-exit \${PIPESTATUS[0]}"`;
  const p = spawn('ip', ['netns', 'exec', ns, 'bash', '-c', script], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  p.stdout.on('data', (d: Buffer) => (out += d.toString()));
  // 'close', not 'exit': at 'exit' the last of its output may not have been read yet.
  const result = new Promise<{ ok: boolean; curlExit: number | null }>((r) =>
    p.on('close', () => {
      const m = /curl-exit (\d+)/.exec(out);
      r({ ok: out.split(' ')[0] === blobSha256(seed, bytes), curlExit: m ? Number(m[1]) : null });
    }),
  );
  return { seed, bytes, result, done: result.then((x) => x.ok) };
}

export interface ToolRun<T> {
  child: ChildProcess;
  /** Exit code and the tool's JSON line (null when it printed none). */
  result: Promise<{ code: number | null; out: T | null }>;
}

/** Runs `node dist/lab/tools.js ARGS` in ns; SIGKILL after timeoutMs. */
export function runTool<T>(ns: string, args: string[], timeoutMs = 120_000): ToolRun<T> {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, TOOLS, ...args], { stdio: ['ignore', 'pipe', 'ignore'] });
  let text = '';
  child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
  const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const result = new Promise<{ code: number | null; out: T | null }>((resolve) =>
    child.on('close', (code) => {
      clearTimeout(t);
      const line = text.trim().split('\n').pop() ?? '';
      let out: T | null = null;
      try {
        out = line ? (JSON.parse(line) as T) : null;
      } catch {
        out = null;
      }
      resolve({ code, out });
    }),
  );
  return { child, result };
}

/** One stream of `tools streams` at its end. */
export interface EchoStream {
  port: number;
  server: string;
  sent: number;
  echoed: number;
  bad: number;
  error: string | null;
  maxGapMs: number;
  gapAt: number;
  /** Silences longer than 1.5 sending intervals: [began at (epoch ms), length ms]. */
  gaps: [number, number][];
  firstAt: number;
  lastAt: number;
}

export interface EchoStreams {
  /** All connected (or 10 s passed): client ports and the real server each got, in stream order. */
  ready: Promise<{ ready: number; ports: number[]; servers: string[] }>;
  /** Every stream's end. */
  done: Promise<EchoStream[]>;
  child: ChildProcess;
}

/**
 * `tools streams`: COUNT long TCP echo streams from ns to host:port, every echoed byte checked
 * (lab/tools.ts). SIGKILL after seconds + 60 s: bounded whatever happens.
 */
export function echoStreams(
  ns: string,
  host: string,
  port: number,
  count: number,
  seconds: number,
  intervalMs = 100,
  chunk = 500,
  pause: { from: number; seconds: number } | null = null,
): EchoStreams {
  const child = spawn(
    'ip',
    [
      'netns',
      'exec',
      ns,
      process.execPath,
      TOOLS,
      'streams',
      host,
      String(port),
      String(count),
      String(seconds),
      String(intervalMs),
      String(chunk),
      ...(pause ? [String(pause.from), String(pause.seconds)] : []),
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const t = setTimeout(() => child.kill('SIGKILL'), (seconds + 60) * 1000);
  let text = '';
  let readyResolve!: (v: { ready: number; ports: number[]; servers: string[] }) => void;
  const ready = new Promise<{ ready: number; ports: number[]; servers: string[] }>((r) => (readyResolve = r));
  child.stdout!.on('data', (d: Buffer) => {
    text += d.toString();
    const first = text.split('\n')[0]!;
    if (text.includes('\n')) {
      try {
        const o = JSON.parse(first) as { ready?: number; ports: number[]; servers: string[] };
        if (o.ready !== undefined) readyResolve({ ready: o.ready, ports: o.ports, servers: o.servers });
      } catch {
        /* not yet a whole line */
      }
    }
  });
  const done = new Promise<EchoStream[]>((resolve) =>
    child.on('close', () => {
      clearTimeout(t);
      readyResolve({ ready: 0, ports: [], servers: [] }); // no-op when it was already resolved
      const last = text.trim().split('\n').pop() ?? '';
      try {
        resolve((JSON.parse(last) as { streams?: EchoStream[] }).streams ?? []);
      } catch {
        resolve([]);
      }
    }),
  );
  return { ready, done, child };
}

/** One connection of `tools idle-echo` at its end: did its second line come back after the idle time. */
export interface IdleConnection {
  port: number;
  server: string;
  ok: boolean;
  error: string | null;
  /** How long the second echo took (ms), null when it did not come. */
  ms: number | null;
}

export interface IdleConnections {
  /** Every connection had its first exchange (or 10 s passed): how many, their ports and servers. */
  ready: Promise<{ ready: number; ports: number[]; servers: string[] }>;
  /** Each connection sends its second line now and must get it back; resolves with every result. */
  check(): Promise<IdleConnection[]>;
  child: ChildProcess;
}

/**
 * `tools idle-echo`: COUNT TCP connections from ns to host:port that exchange one line and go
 * silent until check() (or maxSeconds). SIGKILL after maxSeconds + 60 s: bounded whatever happens.
 */
export function idleConnections(
  ns: string,
  host: string,
  port: number,
  count: number,
  maxSeconds: number,
  timeoutMs = 10000,
): IdleConnections {
  const child = spawn(
    'ip',
    ['netns', 'exec', ns, process.execPath, TOOLS, 'idle-echo', host, String(port), String(count), String(maxSeconds), String(timeoutMs)],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const t = setTimeout(() => child.kill('SIGKILL'), (maxSeconds + 60) * 1000);
  let text = '';
  let readyResolve!: (v: { ready: number; ports: number[]; servers: string[] }) => void;
  const ready = new Promise<{ ready: number; ports: number[]; servers: string[] }>((r) => (readyResolve = r));
  child.stdout!.on('data', (d: Buffer) => {
    text += d.toString();
    if (!text.includes('\n')) return;
    try {
      const o = JSON.parse(text.split('\n')[0]!) as { ready?: number; ports: number[]; servers: string[] };
      if (o.ready !== undefined) readyResolve({ ready: o.ready, ports: o.ports, servers: o.servers });
    } catch {
      /* not yet a whole line */
    }
  });
  const done = new Promise<IdleConnection[]>((resolve) =>
    child.on('close', () => {
      clearTimeout(t);
      readyResolve({ ready: 0, ports: [], servers: [] }); // no-op when it was already resolved
      const last = text.trim().split('\n').pop() ?? '';
      try {
        resolve((JSON.parse(last) as { idle?: IdleConnection[] }).idle ?? []);
      } catch {
        resolve([]);
      }
    }),
  );
  const check = () => {
    // `ip netns exec` execs the command: the child is node itself.
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGUSR1');
    return done;
  };
  return { ready, check, child };
}
