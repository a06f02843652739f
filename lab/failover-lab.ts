/**
 * The two-node lab: a client behind a router that sends VIP traffic to lb1 (or lb2 after a
 * failover), two LB nodes running uvsd, three real servers and a Redis server on a shared
 * server-side switch. The real servers' default gateway (10.201.10.1) is a floating address that
 * the active LB node holds, as keepalived's VRRP would move it.
 *
 *   <p>-cl 10.201.1.2 ── <p>-rt ──10.201.2.0/24── <p>-lb1 ─┐
 *                               └─10.201.3.0/24── <p>-lb2 ─┤  <p>-sw (bridge)  10.201.10.0/24
 *                                                          ├── <p>-rs1..3  .21–.23 (gw .1)
 *                                                          └── <p>-rd      .5 (redis-server)
 *
 * IPv6 beside it: fd00:201:N::/64 for the same links (client ::2, router ::1, LB uplinks ::2,
 * switch fd00:201:10::/64 with the servers at ::21–::23 and the floating gateway ::1), the VIP
 * range fd00:200::/64 routed like 10.200.0.0/24.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { Lab, LAB_VIP6_CIDR, LAB_VIP_CIDR, sh, sleep } from './lab';

const ROOT = join(__dirname, '..', '..');
export const GATEWAY = '10.201.10.1';
export const REDIS_ADDR = '10.201.10.5';
export const GATEWAY6 = 'fd00:201:10::1';

export type LbNode = 'lb1' | 'lb2';

export class FailoverLab {
  readonly prefix: string;
  readonly dir: string;
  readonly ns: { cl: string; rt: string; lb1: string; lb2: string; sw: string; rd: string; rs: string[] };
  readonly clientAddr = '10.201.1.2';
  readonly clientAddr6 = 'fd00:201:1::2';
  readonly rsAddrs = ['10.201.10.21', '10.201.10.22', '10.201.10.23'];
  readonly rsAddrs6 = ['fd00:201:10::21', 'fd00:201:10::22', 'fd00:201:10::23'];
  readonly lbUplink: Record<LbNode, string> = { lb1: '10.201.2.2', lb2: '10.201.3.2' };
  readonly lbUplink6: Record<LbNode, string> = { lb1: 'fd00:201:2::2', lb2: 'fd00:201:3::2' };
  private readonly uvsd: Partial<Record<LbNode, ChildProcess>> = {};
  private redis: ChildProcess | null = null;
  active: LbNode = 'lb1';

  constructor(prefix: string) {
    if (!/^[a-z0-9]{1,8}$/.test(prefix)) throw new Error(`failover lab prefix must be 1–8 characters of a-z0-9, got ${JSON.stringify(prefix)}`);
    this.prefix = prefix;
    this.dir = join('/run/uvs-lab', prefix);
    this.ns = { cl: `${prefix}-cl`, rt: `${prefix}-rt`, lb1: `${prefix}-lb1`, lb2: `${prefix}-lb2`, sw: `${prefix}-sw`, rd: `${prefix}-rd`, rs: [1, 2, 3].map((i) => `${prefix}-rs${i}`) };
  }

  socket(n: LbNode): string {
    return join(this.dir, `${n}.sock`);
  }

  private ip(ns: string, args: string[]): string {
    return sh('ip', ['-n', ns, ...args]);
  }

  private veth(a: string, nsA: string, b: string, nsB: string): void {
    sh('ip', ['link', 'add', a, 'netns', nsA, 'type', 'veth', 'peer', 'name', b, 'netns', nsB]);
  }

  private addr(ns: string, dev: string, cidr: string, cidr6?: string): void {
    this.ip(ns, ['addr', 'add', cidr, 'dev', dev]);
    if (cidr6) this.ip(ns, ['addr', 'add', cidr6, 'dev', dev, 'nodad']);
    this.ip(ns, ['link', 'set', dev, 'up']);
  }

  up(): void {
    this.down();
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const p = this.prefix;
    const n = this.ns;
    for (const ns of [n.cl, n.rt, n.lb1, n.lb2, n.sw, n.rd, ...n.rs]) {
      sh('ip', ['netns', 'add', ns]);
      this.ip(ns, ['link', 'set', 'lo', 'up']);
      // A failover takes a node's links down and up again: keep their IPv6 addresses meanwhile.
      sh('ip', ['netns', 'exec', ns, 'sysctl', '-qw', 'net.ipv6.conf.all.keep_addr_on_down=1']);
    }
    // client — router — lb1 / lb2
    this.veth(`${p}c0`, n.cl, `${p}c1`, n.rt);
    this.addr(n.cl, `${p}c0`, `${this.clientAddr}/24`, `${this.clientAddr6}/64`);
    this.addr(n.rt, `${p}c1`, '10.201.1.1/24', 'fd00:201:1::1/64');
    this.ip(n.cl, ['route', 'add', 'default', 'via', '10.201.1.1']);
    this.ip(n.cl, ['-6', 'route', 'add', 'default', 'via', 'fd00:201:1::1']);
    for (const [lb, net] of [['lb1', 2], ['lb2', 3]] as const) {
      this.veth(`${p}u${net}a`, n.rt, `${p}u${net}b`, n[lb]);
      this.addr(n.rt, `${p}u${net}a`, `10.201.${net}.1/24`, `fd00:201:${net}::1/64`);
      this.addr(n[lb], `${p}u${net}b`, `10.201.${net}.2/24`, `fd00:201:${net}::2/64`);
      this.ip(n[lb], ['route', 'add', 'default', 'via', `10.201.${net}.1`]);
      this.ip(n[lb], ['-6', 'route', 'add', 'default', 'via', `fd00:201:${net}::1`]);
    }
    sh('ip', ['netns', 'exec', n.rt, 'sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
    this.ip(n.rt, ['route', 'add', LAB_VIP_CIDR, 'via', this.lbUplink.lb1]);
    this.ip(n.rt, ['-6', 'route', 'add', LAB_VIP6_CIDR, 'via', this.lbUplink6.lb1]);
    // the server-side switch
    this.ip(n.sw, ['link', 'add', 'br0', 'type', 'bridge']);
    this.ip(n.sw, ['link', 'set', 'br0', 'up']);
    const port = (ns: string, dev: string, cidr: string, i: number, cidr6?: string) => {
      this.veth(`${p}s${i}`, n.sw, dev, ns);
      this.ip(n.sw, ['link', 'set', `${p}s${i}`, 'master', 'br0', 'up']);
      this.addr(ns, dev, cidr, cidr6);
    };
    port(n.lb1, `${p}lb1s`, '10.201.10.11/24', 1, 'fd00:201:10::11/64');
    port(n.lb2, `${p}lb2s`, '10.201.10.12/24', 2, 'fd00:201:10::12/64');
    port(n.rd, `${p}rds`, `${REDIS_ADDR}/24`, 3);
    n.rs.forEach((ns, i) => {
      port(ns, `${p}r${i + 1}s`, `${this.rsAddrs[i]}/24`, 4 + i, `${this.rsAddrs6[i]}/64`);
      this.ip(ns, ['route', 'add', 'default', 'via', GATEWAY]);
      this.ip(ns, ['-6', 'route', 'add', 'default', 'via', GATEWAY6]);
    });
    this.ip(n.lb1, ['addr', 'add', `${GATEWAY}/24`, 'dev', `${p}lb1s`]);
    this.ip(n.lb1, ['addr', 'add', `${GATEWAY6}/64`, 'dev', `${p}lb1s`, 'nodad']);
    // real services and Redis
    n.rs.forEach((ns, i) => {
      const log = openSync(join(this.dir, `rs${i + 1}.log`), 'a');
      this.spawn(ns, process.execPath, [join(ROOT, 'dist', 'lab', 'servers.js'), '--name', `rs${i + 1}`], { stdio: ['ignore', log, log], detached: true }).unref();
    });
    this.startRedis();
  }

  startRedis(): void {
    const log = openSync(join(this.dir, 'redis.log'), 'a');
    this.redis = this.spawn(this.ns.rd, 'redis-server', ['--port', '6379', '--bind', REDIS_ADDR, '--save', '', '--appendonly', 'no', '--protected-mode', 'no'], { stdio: ['ignore', log, log] });
  }

  /** Kills Redis (SIGKILL), as a crash would. */
  killRedis(): void {
    this.redis?.kill('SIGKILL');
    this.redis = null;
  }

  async waitRedis(timeoutMs = 10000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        if (this.exec(this.ns.rd, 'redis-cli', ['-h', REDIS_ADDR, 'ping']).trim() === 'PONG') return;
      } catch {
        /* not yet */
      }
      if (Date.now() > deadline) throw new Error('redis-server did not come up');
      await sleep(100);
    }
  }

  async waitServers(timeoutMs = 10000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const a of this.rsAddrs) {
      for (;;) {
        try {
          this.exec(this.ns.lb1, 'curl', ['-s', '-m', '1', `http://${a}:8080/`]);
          break;
        } catch {
          if (Date.now() > deadline) throw new Error(`real server ${a} did not come up`);
          await sleep(100);
        }
      }
    }
    await this.waitRedis(timeoutMs);
  }

  down(): void {
    new Lab({ prefix: this.prefix }).down(); // same prefix rule: kills every process, deletes every namespace
    if (existsSync(this.dir)) rmSync(this.dir, { recursive: true, force: true });
  }

  exec(ns: string, cmd: string, args: string[], timeoutMs = 60000): string {
    return execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs, maxBuffer: 64 << 20 });
  }

  spawn(ns: string, cmd: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
    return spawn('ip', ['netns', 'exec', ns, cmd, ...args], { stdio: 'ignore', ...opts });
  }

  config(node: LbNode, services: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      // UVS_LAB_IO=poll|io_uring: the worker I/O path (dataplane.io), as in lab.ts.
      dataplane: { device: 'uvs0', vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR], workers: 2, tableSize: 65536, ...(process.env.UVS_LAB_IO ? { io: process.env.UVS_LAB_IO } : {}) },
      api: { socket: this.socket(node) },
      stateFile: join(this.dir, `${node}.state.json`),
      redis: { url: `redis://${REDIS_ADDR}:6379`, nodeId: node, countsInterval: 0.5, parkTimeout: 1 },
      log: { level: 'info' },
      services,
      ...extra,
    };
  }

  async startUvsd(node: LbNode, cfg: Record<string, unknown>, timeoutMs = 15000): Promise<ChildProcess> {
    const file = join(this.dir, `${node}.yaml`);
    writeFileSync(file, stringify(cfg));
    const log = openSync(join(this.dir, `${node}.log`), 'a');
    rmSync(this.socket(node), { force: true }); // a killed uvsd leaves its socket behind
    const child = this.spawn(this.ns[node], process.execPath, [join(ROOT, 'dist', 'control', 'uvsd.js'), '--config', file], { stdio: ['ignore', log, log] });
    this.uvsd[node] = child;
    const deadline = Date.now() + timeoutMs;
    while (!existsSync(this.socket(node))) {
      if (child.exitCode !== null) throw new Error(`uvsd ${node} exited with ${child.exitCode}; see ${join(this.dir, `${node}.log`)}`);
      if (Date.now() > deadline) throw new Error(`uvsd ${node} did not start; see ${join(this.dir, `${node}.log`)}`);
      await sleep(50);
    }
    return child;
  }

  async stopUvsd(node: LbNode): Promise<void> {
    const c = this.uvsd[node];
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const done = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await done;
  }

  /**
   * The active node dies: uvsd gets SIGKILL and the node's links go down. The router sends the
   * VIP range to the other node, which also takes over the servers' gateway address (the real
   * servers forget the old MAC, as a gratuitous ARP makes them). Returns when traffic is switched.
   */
  async failover(): Promise<LbNode> {
    const dead = this.active;
    const live: LbNode = dead === 'lb1' ? 'lb2' : 'lb1';
    const c = this.uvsd[dead];
    if (c && c.exitCode === null && c.signalCode === null) {
      const done = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await done;
    }
    for (const dev of [`${this.prefix}u${dead === 'lb1' ? 2 : 3}b`, `${this.prefix}${dead}s`]) this.ip(this.ns[dead], ['link', 'set', dev, 'down']);
    this.switchTo(live);
    return live;
  }

  /** Points the router and the servers' gateway at `node` (both links of it up). */
  switchTo(node: LbNode): void {
    const other: LbNode = node === 'lb1' ? 'lb2' : 'lb1';
    this.revive(node);
    sh('ip', ['-n', this.ns[other], 'addr', 'del', `${GATEWAY}/24`, 'dev', `${this.prefix}${other}s`], true);
    sh('ip', ['-n', this.ns[other], 'addr', 'del', `${GATEWAY6}/64`, 'dev', `${this.prefix}${other}s`], true);
    sh('ip', ['-n', this.ns[node], 'addr', 'add', `${GATEWAY}/24`, 'dev', `${this.prefix}${node}s`], true);
    sh('ip', ['-n', this.ns[node], 'addr', 'add', `${GATEWAY6}/64`, 'dev', `${this.prefix}${node}s`, 'nodad'], true);
    this.ip(this.ns.rt, ['route', 'replace', LAB_VIP_CIDR, 'via', this.lbUplink[node]]);
    this.ip(this.ns.rt, ['-6', 'route', 'replace', LAB_VIP6_CIDR, 'via', this.lbUplink6[node]]);
    for (const ns of this.ns.rs) {
      sh('ip', ['-n', ns, 'neigh', 'flush', 'all'], true);
      sh('ip', ['-n', ns, '-6', 'neigh', 'flush', 'all'], true);
    }
    this.active = node;
  }

  /** Brings a dead node's links back (without the gateway address or traffic). */
  revive(node: LbNode): void {
    const net = node === 'lb1' ? 2 : 3;
    for (const dev of [`${this.prefix}u${net}b`, `${this.prefix}${node}s`]) this.ip(this.ns[node], ['link', 'set', dev, 'up']);
    // A link going down took its routes with it.
    this.ip(this.ns[node], ['route', 'replace', 'default', 'via', `10.201.${net}.1`]);
    this.ip(this.ns[node], ['-6', 'route', 'replace', 'default', 'via', `fd00:201:${net}::1`]);
  }
}
