/**
 * The namespace lab: a client, the load-balancer node and N real servers, each in its own
 * network namespace, all named with one prefix so that `down` finds and removes everything.
 *
 *   <p>-cl  10.200.1.2/24 ──veth── 10.200.1.1/24  <p>-lb  10.200.1x.1/24 ──veth── 10.200.1x.2/24  <p>-rsX
 *          default via .1.1                                                       default via .1x.1
 *
 * VIPs live in 10.200.0.0/24 (routed by uvsd to its TUN device inside <p>-lb). Real servers run
 * lab/servers.js (HTTP 8080, UDP echo 5353, TCP echo 9007) and iperf3 -s (5201). The real servers'
 * default route points at the LB node, as masq needs.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { stringify } from 'yaml';
import { apiCall } from '../control/client';

export const LAB_VIP_CIDR = '10.200.0.0/24';
export const LAB_VIP = '10.200.0.10';
/** IPv6: the VIP range, a VIP in it, and the lab's addresses (client fd00:200:1::2, rs i fd00:200:1i::2). */
export const LAB_VIP6_CIDR = 'fd00:200::/64';
export const LAB_VIP6 = 'fd00:200::10';

export interface LabOptions {
  /** Names every namespace and link; ≤ 9 characters of [a-z0-9]. */
  prefix: string;
  realServers?: number;
  /** Directory for logs, configs and the API socket. */
  dir?: string;
}

const ROOT = join(__dirname, '..', '..');

/** Runs a command; its stdout, or '' when allowFail and it fails (else throws with its stderr). */
export function sh(cmd: string, args: string[], allowFail = false): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (allowFail) return '';
    const err = e as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')}: ${(err.stderr || err.message).trim()}`);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export class Lab {
  readonly prefix: string;
  readonly dir: string;
  readonly clientNs: string;
  readonly lbNs: string;
  readonly rsNs: string[];
  readonly clientAddr = '10.200.1.2';
  readonly clientAddr6 = 'fd00:200:1::2';
  readonly rsAddrs: string[];
  readonly rsAddrs6: string[];
  readonly socket: string;
  private uvsd: ChildProcess | null = null;

  constructor(o: LabOptions) {
    if (!/^[a-z0-9]{1,9}$/.test(o.prefix)) throw new Error(`lab prefix must be 1–9 characters of a-z0-9, got ${JSON.stringify(o.prefix)}`);
    this.prefix = o.prefix;
    this.dir = o.dir ?? join('/run/uvs-lab', o.prefix);
    this.clientNs = `${o.prefix}-cl`;
    this.lbNs = `${o.prefix}-lb`;
    const n = o.realServers ?? 3;
    this.rsNs = Array.from({ length: n }, (_, i) => `${o.prefix}-rs${i + 1}`);
    this.rsAddrs = Array.from({ length: n }, (_, i) => `10.200.${11 + i}.2`);
    this.rsAddrs6 = Array.from({ length: n }, (_, i) => `fd00:200:${11 + i}::2`);
    this.socket = join(this.dir, 'uvsd.sock');
  }

  /** Namespaces of this lab that exist now. */
  static existing(prefix: string): string[] {
    return sh('ip', ['netns', 'list'], true)
      .split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter((n) => n.startsWith(`${prefix}-`));
  }

  up(): void {
    this.down();
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const p = this.prefix;
    for (const ns of [this.clientNs, this.lbNs, ...this.rsNs]) {
      sh('ip', ['netns', 'add', ns]);
      this.ip(ns, ['link', 'set', 'lo', 'up']);
    }
    // client ↔ lb
    sh('ip', ['link', 'add', `${p}c0`, 'netns', this.clientNs, 'type', 'veth', 'peer', 'name', `${p}c1`, 'netns', this.lbNs]);
    this.ip(this.clientNs, ['addr', 'add', `${this.clientAddr}/24`, 'dev', `${p}c0`]);
    this.ip(this.clientNs, ['link', 'set', `${p}c0`, 'up']);
    this.ip(this.clientNs, ['route', 'add', 'default', 'via', '10.200.1.1']);
    this.ip(this.lbNs, ['addr', 'add', '10.200.1.1/24', 'dev', `${p}c1`]);
    this.ip(this.lbNs, ['link', 'set', `${p}c1`, 'up']);
    // IPv6 beside IPv4 (nodad: usable at once).
    this.ip(this.clientNs, ['addr', 'add', `${this.clientAddr6}/64`, 'dev', `${p}c0`, 'nodad']);
    this.ip(this.clientNs, ['-6', 'route', 'add', 'default', 'via', 'fd00:200:1::1']);
    this.ip(this.lbNs, ['addr', 'add', 'fd00:200:1::1/64', 'dev', `${p}c1`, 'nodad']);
    // lb ↔ each real server
    this.rsNs.forEach((ns, i) => {
      const a = `${p}r${i + 1}a`;
      const b = `${p}r${i + 1}b`;
      sh('ip', ['link', 'add', a, 'netns', this.lbNs, 'type', 'veth', 'peer', 'name', b, 'netns', ns]);
      this.ip(this.lbNs, ['addr', 'add', `10.200.${11 + i}.1/24`, 'dev', a]);
      this.ip(this.lbNs, ['link', 'set', a, 'up']);
      this.ip(ns, ['addr', 'add', `${this.rsAddrs[i]}/24`, 'dev', b]);
      this.ip(ns, ['link', 'set', b, 'up']);
      this.ip(ns, ['route', 'add', 'default', 'via', `10.200.${11 + i}.1`]);
      this.ip(this.lbNs, ['addr', 'add', `fd00:200:${11 + i}::1/64`, 'dev', a, 'nodad']);
      this.ip(ns, ['addr', 'add', `${this.rsAddrs6[i]}/64`, 'dev', b, 'nodad']);
      this.ip(ns, ['-6', 'route', 'add', 'default', 'via', `fd00:200:${11 + i}::1`]);
    });
    this.startServers();
  }

  /** Stops every process in the lab's namespaces and deletes them. Never throws. */
  down(): void {
    keepLogs(this.dir, this.prefix);
    const nss = Lab.existing(this.prefix);
    const pids = new Set<number>();
    for (const ns of nss) {
      for (const l of sh('ip', ['netns', 'pids', ns], true).split('\n')) if (l.trim()) pids.add(Number(l));
    }
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
    const deadline = Date.now() + 3000;
    while (Date.now() < deadline && [...pids].some(alive)) execFileSync('sleep', ['0.05']);
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (const ns of nss) sh('ip', ['netns', 'del', ns], true);
    if (existsSync(this.dir)) rmSync(this.dir, { recursive: true, force: true });
    this.uvsd = null;
  }

  ip(ns: string, args: string[]): string {
    return sh('ip', ['-n', ns, ...args]);
  }

  /** Runs a command in a namespace and returns its stdout (throws on a non-zero exit). */
  exec(ns: string, cmd: string, args: string[], timeoutMs = 60000): string {
    return execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: timeoutMs,
      maxBuffer: 64 << 20,
    });
  }

  spawn(ns: string, cmd: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
    return spawn('ip', ['netns', 'exec', ns, cmd, ...args], { stdio: 'ignore', ...opts });
  }

  private serverPids: (number | undefined)[] = [];

  /** Starts lab/servers.js (HTTP, UDP echo, TCP echo) in real-server namespace i (0-based). */
  startServer(i: number): void {
    const log = openSync(join(this.dir, `rs${i + 1}.log`), 'a');
    const p = this.spawn(this.rsNs[i]!, process.execPath, [join(ROOT, 'dist', 'lab', 'servers.js'), '--name', `rs${i + 1}`], {
      stdio: ['ignore', log, log],
      detached: true,
    });
    p.unref();
    this.serverPids[i] = p.pid;
  }

  /** Kills real server i's servers.js (a crashed backend: connections refused from then on). */
  stopServer(i: number): void {
    const pid = this.serverPids[i];
    if (pid !== undefined) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    this.serverPids[i] = undefined;
  }

  private startServers(): void {
    this.rsNs.forEach((ns, i) => {
      this.startServer(i);
      const log = openSync(join(this.dir, `rs${i + 1}.log`), 'a');
      if (hasCommand('iperf3')) {
        this.spawn(ns, 'iperf3', ['-s', '-p', '5201'], { stdio: ['ignore', log, log], detached: true }).unref();
      }
    });
  }

  /** Waits until every real server answers HTTP on 8080 (from the LB node). */
  async waitServers(timeoutMs = 10000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const addr of this.rsAddrs) {
      for (;;) {
        try {
          this.exec(this.lbNs, 'curl', ['-s', '-m', '1', `http://${addr}:8080/`]);
          break;
        } catch {
          if (Date.now() > deadline) throw new Error(`real server ${addr} did not come up`);
          await sleep(100);
        }
      }
    }
  }

  /** A uvsd configuration for this lab. */
  config(services: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
    const { dataplane, ...rest } = extra as { dataplane?: Record<string, unknown> };
    return {
      // UVS_LAB_IO=poll|io_uring runs every lab test on one worker I/O path (dataplane.io).
      dataplane: {
        device: 'uvs0',
        vipCidrs: [LAB_VIP_CIDR],
        workers: 2,
        tableSize: 65536,
        ...(process.env.UVS_LAB_IO ? { io: process.env.UVS_LAB_IO } : {}),
        ...(dataplane ?? {}),
      },
      api: { socket: this.socket },
      stateFile: join(this.dir, 'state.json'),
      log: { level: 'info' },
      services,
      ...rest,
    };
  }

  writeConfig(cfg: unknown, name = 'uvs.yaml'): string {
    const file = join(this.dir, name);
    writeFileSync(file, stringify(cfg));
    return file;
  }

  /**
   * Starts uvsd in the LB namespace (node started with nodeArgs, e.g. --cpu-prof; the whole command
   * behind `wrap`, e.g. setpriv dropping capabilities) and waits for its API socket.
   */
  async startUvsd(configFile: string, timeoutMs = 15000, nodeArgs: string[] = [], wrap: string[] = []): Promise<ChildProcess> {
    const log = openSync(join(this.dir, 'uvsd.log'), 'a');
    rmSync(this.socket, { force: true }); // a killed uvsd leaves its socket behind
    const cmd = [...wrap, process.execPath, ...nodeArgs, join(ROOT, 'dist', 'control', 'uvsd.js'), '--config', configFile];
    const child = this.spawn(this.lbNs, cmd[0]!, cmd.slice(1), {
      stdio: ['ignore', log, log],
    });
    this.uvsd = child;
    await waitUvsd(child, this.socket, join(this.dir, 'uvsd.log'), this.lbNs, timeoutMs);
    return child;
  }

  /** Stops uvsd with SIGTERM and waits for it to remove what it created. */
  async stopUvsd(timeoutMs = 10000): Promise<number | null> {
    const c = this.uvsd;
    // A child killed by a signal has exitCode null and signalCode set: it is gone too, and waiting
    // for its 'exit' (already emitted) would never end — nor would the lab's removal after it.
    if (!c || c.exitCode !== null || c.signalCode !== null) return c?.exitCode ?? null;
    const done = new Promise<number | null>((r) => c.once('exit', (code) => r(code)));
    c.kill('SIGTERM');
    const t = setTimeout(() => c.kill('SIGKILL'), timeoutMs);
    const code = await done;
    clearTimeout(t);
    this.uvsd = null;
    return code;
  }

  get uvsdProcess(): ChildProcess | null {
    return this.uvsd;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Copies a lab's logs (every *.log in its directory: uvsd, keepalived, BIRD, servers, notify
 * histories) to $UVS_LAB_LOGS/<test file>/<prefix>/ before the lab is removed, when that variable
 * is set: test/run.sh sets it and prints the ends of a failed test file's logs. Never throws.
 */
export function keepLogs(dir: string, prefix: string): void {
  const to = process.env.UVS_LAB_LOGS;
  if (!to || !existsSync(dir)) return;
  try {
    const files = readdirSync(dir).filter((f) => f.endsWith('.log'));
    if (files.length === 0) return;
    const at = join(to, basename(process.argv[1] ?? 'lab'), prefix); // node --test runs a process per file
    mkdirSync(at, { recursive: true });
    for (const f of files) copyFileSync(join(dir, f), join(at, f));
  } catch {
    /* best effort: diagnostics only */
  }
}

/** The last `lines` lines of a log file ('' when there is none): what a failure message shows. */
export function logTail(file: string, lines = 40): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Waits until a uvsd just spawned answers its API (GET /v1/stats over `socket`): the socket file
 * appears before the daemon answers on it, and on a busy machine seconds may lie between. Fails at
 * once when the process exits, and every failure shows the end of its log (`log`).
 */
export async function waitUvsd(child: ChildProcess, socket: string, log: string, name: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no socket yet';
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`uvsd ${name} exited (${child.signalCode ?? child.exitCode}) before it answered; ${log}:\n${logTail(log)}`);
    if (existsSync(socket)) {
      try {
        const r = await apiCall(socket, 'GET', '/v1/stats'); // its own 10 s timeout
        if (r.status === 200) return;
        last = `GET /v1/stats answered ${r.status}`;
      } catch (e) {
        last = (e as Error).message;
      }
    }
    if (Date.now() > deadline)
      throw new Error(`uvsd ${name} did not answer its API in ${timeoutMs} ms (${last}); ${log}:\n${logTail(log)}`);
    await sleep(50);
  }
}

export function hasCommand(cmd: string): boolean {
  return sh('sh', ['-c', `command -v ${cmd}`], true).trim() !== '';
}
