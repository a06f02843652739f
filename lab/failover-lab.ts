/**
 * The multi-node lab: a client behind a router, N LB nodes running uvsd (two by default), three
 * real servers and a Redis server. The LB nodes share two segments, each a bridge in the switch
 * namespace, so that addresses can float between them as they do on real LANs:
 *
 *   <p>-cl 10.201.1.2 ── <p>-rt 10.201.1.1
 *                        <p>-rt 10.201.2.1 ─┐ br-front (in <p>-sw)   10.201.2.0/24
 *                                           ├── <p>-lb1 .11  ┐ VRRP: next hop .2, the address the
 *                                           ├── <p>-lb2 .12  ┘ router sends the VIP ranges to
 *                                           └── (<p>-lbN .10+N)
 *                                             br-back (in <p>-sw)    10.201.10.0/24
 *                                           ├── <p>-lb1 .11, <p>-lb2 .12   VRRP: gateway .1
 *                                           ├── <p>-rs1..3 .21–.23 (default via .1)
 *                                           └── <p>-rd .5 (redis-server)
 *
 * IPv6 beside it: fd00:201:1::/64 client link, fd00:201:2::/64 front (router ::1, next hop ::2,
 * node i ::10+i), fd00:201:10::/64 back (gateway ::1, servers ::21–::23); VIP range fd00:200::/64.
 *
 * Who holds the next hop and the gateway is decided by real keepalived (startKeepalived), one
 * per LB namespace with its own config, pid files and notify FIFO in the lab's directory: one
 * VRRPv3 instance per family in a sync group, 100 ms adverts, a track script asking uvsd's /healthz
 * over its root-only API socket.
 * The lab only kills things (uvsd, or a whole node: its links down and every process in it) and
 * watches keepalived's state changes; it never moves an address itself.
 *
 * More nodes (for ECMP later): `nodes: N` adds lbN on both bridges at .10+N; a router with BGP
 * would peer with the nodes' own front addresses on the same br-front, no topology change.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { chmodSync, constants, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { ConnectionsResponse } from '../control/api-types';
import { apiCall } from '../control/client';
import { keepLogs, Lab, LAB_VIP6_CIDR, LAB_VIP_CIDR, sh, sleep, waitUvsd } from './lab';

const ROOT = join(__dirname, '..', '..');
export const GATEWAY = '10.201.10.1';
export const GATEWAY6 = 'fd00:201:10::1';
/** The router's next hop for the VIP ranges (VRRP-held on br-front). */
export const NEXT_HOP = '10.201.2.2';
export const NEXT_HOP6 = 'fd00:201:2::2';
export const REDIS_ADDR = '10.201.10.5';
const ROUTER_FRONT = '10.201.2.1';
const ROUTER_FRONT6 = 'fd00:201:2::1';

export type LbNode = `lb${number}`;

/** What makes a node die in `kill`: its uvsd only (the node lives), or the whole node. */
export type KillKind = 'uvsd' | 'node';

/**
 * VRRP timing. 100 ms adverts (VRRPv3 counts centiseconds): a backup declares the master dead
 * after 3 adverts plus its skew, (256 − priority) / 256 of one advert — 326 ms for the lab's lb2 (priority 190).
 * The track script runs every second (keepalived's floor: `interval` is whole seconds) with a 1 s
 * curl timeout; one failure faults the node (nothing accepts on a dead uvsd's socket, so the
 * detection is 0–1 s after the death, plus the script's start).
 */
export interface KeepalivedTiming {
  advertSeconds: number;
  scriptInterval: number;
  scriptFall: number;
  scriptRise: number;
}
export const LAB_VRRP: KeepalivedTiming = { advertSeconds: 0.1, scriptInterval: 1, scriptFall: 1, scriptRise: 1 };

/** A keepalived state change, as its notify FIFO reported it, with the time the lab read it. */
export interface VrrpEvent {
  at: number;
  kind: 'INSTANCE' | 'GROUP';
  name: string;
  state: string;
}

export interface KeepalivedOptions {
  routerId: string;
  priority: number;
  /** Interface toward the router (advertisements go out here) and toward the real servers. */
  front: string;
  back: string;
  nextHop: string;
  nextHop6: string;
  gateway: string;
  gateway6: string;
  /** CIDR prefix lengths of the two segments. */
  prefix4: number;
  prefix6: number;
  /**
   * uvsd's admin API socket (`api.socket`): the track script asks /healthz there, where only uvsd
   * can answer (a squatter on the healthz TCP port cannot: docs/failover.md).
   */
  apiSocket: string;
  notifyFifo?: string;
  vrid4?: number;
  vrid6?: number;
  timing?: KeepalivedTiming;
}

/** The track script's command: uvsd's /healthz over its root-only API socket (as examples/keepalived). */
export function trackScriptCommand(apiSocket: string): string {
  return `/usr/bin/curl -sf -m 1 -o /dev/null --unix-socket ${apiSocket} http://localhost/healthz`;
}

/**
 * keepalived.conf for one node of a uvs pair (examples/keepalived/keepalived.conf is this with
 * comments). Both nodes start BACKUP with `nopreempt`: the first to win stays master until it
 * fails, so a node that returns does not pull the flows back (each move costs a blackout, even
 * with every flow adopted). The two instances (one per family: a VRRP instance carries one
 * family) are a sync group, so they move together.
 */
export function keepalivedConfig(o: KeepalivedOptions): string {
  const t = o.timing ?? LAB_VRRP;
  const inst = (name: string, vrid: number, addrs: string[]) => `vrrp_instance ${name} {
    state BACKUP
    nopreempt
    interface ${o.front}
    virtual_router_id ${vrid}
    priority ${o.priority}
    version 3
    advert_int ${t.advertSeconds}
    track_interface {
        ${o.back}
    }
    track_script {
        uvsd_healthz
    }
    virtual_ipaddress {
${addrs.map((a) => `        ${a}`).join('\n')}
    }
}
`;
  return `# generated by uvs lab/failover-lab.ts
global_defs {
    router_id ${o.routerId}
    enable_script_security
    script_user root
    vrrp_garp_master_delay 1
    vrrp_garp_master_repeat 3
${o.notifyFifo ? `    notify_fifo ${o.notifyFifo}\n` : ''}}

vrrp_script uvsd_healthz {
    script "${trackScriptCommand(o.apiSocket)}"
    interval ${t.scriptInterval}
    timeout ${t.scriptInterval + 1}
    fall ${t.scriptFall}
    rise ${t.scriptRise}
    init_fail
}

vrrp_sync_group uvs {
    group {
        uvs_v4
        uvs_v6
    }
}

${inst('uvs_v4', o.vrid4 ?? 51, [`${o.nextHop}/${o.prefix4} dev ${o.front}`, `${o.gateway}/${o.prefix4} dev ${o.back}`])}
${inst('uvs_v6', o.vrid6 ?? 52, [`${o.nextHop6}/${o.prefix6} dev ${o.front}`, `${o.gateway6}/${o.prefix6} dev ${o.back}`])}`;
}

export class FailoverLab {
  readonly prefix: string;
  readonly dir: string;
  readonly nodes: LbNode[];
  /** Namespaces of the client, router, switch, Redis and real servers; an LB node's: nodeNs(). */
  readonly ns: { cl: string; rt: string; sw: string; rd: string; rs: string[] };
  readonly clientAddr = '10.201.1.2';
  readonly clientAddr6 = 'fd00:201:1::2';
  readonly rsAddrs = ['10.201.10.21', '10.201.10.22', '10.201.10.23'];
  readonly rsAddrs6 = ['fd00:201:10::21', 'fd00:201:10::22', 'fd00:201:10::23'];
  private readonly uvsd: Partial<Record<LbNode, ChildProcess>> = {};
  private readonly keepalived: Partial<Record<LbNode, ChildProcess>> = {};
  private readonly fifos: Partial<Record<LbNode, Socket>> = {};
  /** Every state change keepalived reported, per node, oldest first. */
  readonly events: Partial<Record<LbNode, VrrpEvent[]>> = {};
  private redis: ChildProcess | null = null;
  /** The node that holds the VRRP addresses (as far as the lab last saw). */
  active: LbNode = 'lb1';

  constructor(prefix: string, nodes = 2) {
    if (!/^[a-z0-9]{1,8}$/.test(prefix))
      throw new Error(`failover lab prefix must be 1–8 characters of a-z0-9, got ${JSON.stringify(prefix)}`);
    if (!(nodes >= 2 && nodes <= 9)) throw new Error(`failover lab nodes must be 2–9, got ${nodes}`);
    this.prefix = prefix;
    this.dir = join('/run/uvs-lab', prefix);
    this.nodes = Array.from({ length: nodes }, (_, i) => `lb${i + 1}` as LbNode);
    this.ns = {
      cl: `${prefix}-cl`,
      rt: `${prefix}-rt`,
      sw: `${prefix}-sw`,
      rd: `${prefix}-rd`,
      rs: [1, 2, 3].map((i) => `${prefix}-rs${i}`),
    };
  }

  /** The namespace of LB node n, one of this.nodes. */
  nodeNs(n: LbNode): string {
    if (!this.nodes.includes(n)) throw new Error(`${n} is not a node of this lab (it has ${this.nodes.join(', ')})`);
    return `${this.prefix}-${n}`;
  }

  private index(n: LbNode): number {
    return Number(n.slice(2));
  }

  /** The node's own addresses: front (toward the router) and back (toward the servers). */
  frontAddr(n: LbNode): string {
    return `10.201.2.${10 + this.index(n)}`;
  }
  frontAddr6(n: LbNode): string {
    return `fd00:201:2::${10 + this.index(n)}`;
  }
  backAddr(n: LbNode): string {
    return `10.201.10.${10 + this.index(n)}`;
  }
  backAddr6(n: LbNode): string {
    return `fd00:201:10::${10 + this.index(n)}`;
  }
  /** Interface names inside the node's namespace. */
  frontDev(n: LbNode): string {
    return `${this.prefix}${n}f`;
  }
  backDev(n: LbNode): string {
    return `${this.prefix}${n}s`;
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
    for (const ns of [n.cl, n.rt, n.sw, n.rd, ...n.rs, ...this.nodes.map((x) => this.nodeNs(x))]) {
      sh('ip', ['netns', 'add', ns]);
      this.ip(ns, ['link', 'set', 'lo', 'up']);
      // A node death takes its links down and up again: keep their IPv6 addresses meanwhile. No
      // DAD: keepalived's IPv6 adverts need the link-local address usable at once (a tentative
      // one cannot send), and the lab's addresses are unique by construction.
      sh('ip', [
        'netns',
        'exec',
        ns,
        'sysctl',
        '-qw',
        'net.ipv6.conf.all.keep_addr_on_down=1',
        'net.ipv6.conf.default.accept_dad=0',
        'net.ipv6.conf.all.accept_dad=0',
      ]);
    }
    // client — router
    this.veth(`${p}c0`, n.cl, `${p}c1`, n.rt);
    this.addr(n.cl, `${p}c0`, `${this.clientAddr}/24`, `${this.clientAddr6}/64`);
    this.addr(n.rt, `${p}c1`, '10.201.1.1/24', 'fd00:201:1::1/64');
    this.ip(n.cl, ['route', 'add', 'default', 'via', '10.201.1.1']);
    this.ip(n.cl, ['-6', 'route', 'add', 'default', 'via', 'fd00:201:1::1']);
    // The two segments. No multicast snooping: VRRP's 224.0.0.18 / ff02::12 must reach every port
    // from the first advert on, before any membership report.
    for (const br of ['brf', 'brb']) {
      this.ip(n.sw, ['link', 'add', br, 'type', 'bridge', 'mcast_snooping', '0']);
      this.ip(n.sw, ['link', 'set', br, 'up']);
    }
    const port = (br: 'brf' | 'brb', swDev: string, ns: string, dev: string, cidr: string, cidr6?: string) => {
      this.veth(swDev, n.sw, dev, ns);
      this.ip(n.sw, ['link', 'set', swDev, 'master', br, 'up']);
      this.addr(ns, dev, cidr, cidr6);
    };
    port('brf', `${p}fr`, n.rt, `${p}rf`, `${ROUTER_FRONT}/24`, `${ROUTER_FRONT6}/64`);
    sh('ip', ['netns', 'exec', n.rt, 'sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
    this.ip(n.rt, ['route', 'add', LAB_VIP_CIDR, 'via', NEXT_HOP]);
    this.ip(n.rt, ['-6', 'route', 'add', LAB_VIP6_CIDR, 'via', NEXT_HOP6]);
    // The servers' network is reachable from the client's side too, as on a real LAN (a client
    // packet to a real server's own address — say a RST — reaches it through the LB pair).
    this.ip(n.rt, ['route', 'add', '10.201.10.0/24', 'via', NEXT_HOP]);
    this.ip(n.rt, ['-6', 'route', 'add', 'fd00:201:10::/64', 'via', NEXT_HOP6]);
    for (const lb of this.nodes) {
      const i = this.index(lb);
      port('brf', `${p}f${i}`, this.nodeNs(lb), this.frontDev(lb), `${this.frontAddr(lb)}/24`, `${this.frontAddr6(lb)}/64`);
      port('brb', `${p}b${i}`, this.nodeNs(lb), this.backDev(lb), `${this.backAddr(lb)}/24`, `${this.backAddr6(lb)}/64`);
      this.defaultRoutes(lb);
    }
    port('brb', `${p}bd`, n.rd, `${p}rds`, `${REDIS_ADDR}/24`);
    n.rs.forEach((ns, i) => {
      port('brb', `${p}r${i + 1}`, ns, `${p}r${i + 1}s`, `${this.rsAddrs[i]}/24`, `${this.rsAddrs6[i]}/64`);
      this.ip(ns, ['route', 'add', 'default', 'via', GATEWAY]);
      this.ip(ns, ['-6', 'route', 'add', 'default', 'via', GATEWAY6]);
    });
    // real services and Redis
    n.rs.forEach((ns, i) => {
      const log = openSync(join(this.dir, `rs${i + 1}.log`), 'a');
      this.spawn(ns, process.execPath, [join(ROOT, 'dist', 'lab', 'servers.js'), '--name', `rs${i + 1}`], {
        stdio: ['ignore', log, log],
        detached: true,
      }).unref();
    });
    this.startRedis();
  }

  private defaultRoutes(lb: LbNode): void {
    this.ip(this.nodeNs(lb), ['route', 'replace', 'default', 'via', ROUTER_FRONT]);
    this.ip(this.nodeNs(lb), ['-6', 'route', 'replace', 'default', 'via', ROUTER_FRONT6]);
  }

  startRedis(): void {
    const log = openSync(join(this.dir, 'redis.log'), 'a');
    this.redis = this.spawn(
      this.ns.rd,
      'redis-server',
      ['--port', '6379', '--bind', REDIS_ADDR, '--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
      { stdio: ['ignore', log, log] },
    );
  }

  /** Kills Redis (SIGKILL), as a crash would. */
  killRedis(): void {
    this.redis?.kill('SIGKILL');
    this.redis = null;
  }

  /**
   * Cuts (or restores) one node's path to Redis: an nftables table in the node's namespace drops
   * what it sends to Redis, so its client sees a Redis that does not answer until restored.
   */
  cutRedis(node: LbNode, cut: boolean): void {
    const ns = this.nodeNs(node);
    if (cut) {
      this.exec(ns, 'nft', ['add', 'table', 'ip', 'uvslab_cut']);
      this.exec(ns, 'nft', ['add', 'chain', 'ip', 'uvslab_cut', 'out', '{ type filter hook output priority 0; }']);
      this.exec(ns, 'nft', ['add', 'rule', 'ip', 'uvslab_cut', 'out', 'ip', 'daddr', REDIS_ADDR, 'tcp', 'dport', '6379', 'drop']);
    } else {
      sh('ip', ['netns', 'exec', ns, 'nft', 'delete', 'table', 'ip', 'uvslab_cut'], true);
    }
  }

  async waitRedis(timeoutMs = 10000): Promise<void> {
    await waitFor(
      () => {
        try {
          return this.exec(this.ns.rd, 'redis-cli', ['-h', REDIS_ADDR, 'ping']).trim() === 'PONG';
        } catch {
          return false;
        }
      },
      timeoutMs,
      'redis-server did not come up',
    );
  }

  /** A counter of the client namespace's /proc/net/snmp, e.g. ('Tcp', 'OutRsts'). */
  clientSnmp(group: string, name: string): number {
    const lines = this.exec(this.ns.cl, 'cat', ['/proc/net/snmp'])
      .split('\n')
      .filter((l) => l.startsWith(`${group}: `));
    const names = lines[0]!.split(' ');
    return Number(lines[1]!.split(' ')[names.indexOf(name)]);
  }

  /** redis-cli in the Redis namespace (port 6379 unless given); its output, trimmed. */
  redisCli(args: string[], port = 6379): string {
    return this.exec(this.ns.rd, 'redis-cli', ['-h', REDIS_ADDR, '-p', String(port), ...args]).trim();
  }

  async waitServers(timeoutMs = 10000): Promise<void> {
    for (const a of this.rsAddrs) {
      await waitFor(
        () => {
          try {
            this.exec(this.nodeNs('lb1'), 'curl', ['-s', '-m', '1', `http://${a}:8080/`]);
            return true;
          } catch {
            return false;
          }
        },
        timeoutMs,
        `real server ${a} did not come up`,
      );
    }
    await this.waitRedis(timeoutMs);
  }

  down(): void {
    // keepalived's state changes as the lab read them, beside the logs test/run.sh shows on a failure.
    for (const [node, ev] of Object.entries(this.events)) {
      if (existsSync(this.dir) && ev?.length)
        writeFileSync(
          join(this.dir, `${node}.vrrp-events.log`),
          ev.map((e) => `${new Date(e.at).toISOString()} ${e.kind} ${e.name} ${e.state}`).join('\n') + '\n',
        );
    }
    keepLogs(this.dir, this.prefix);
    for (const f of Object.values(this.fifos)) f?.destroy();
    for (const k of Object.keys(this.fifos)) delete this.fifos[k as LbNode];
    new Lab({ prefix: this.prefix }).down(); // same prefix rule: kills every process, deletes every namespace
    if (existsSync(this.dir)) rmSync(this.dir, { recursive: true, force: true });
  }

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

  config(node: LbNode, services: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      // UVS_LAB_IO=poll|io_uring: the worker I/O path (dataplane.io), as in lab.ts.
      dataplane: {
        device: 'uvs0',
        vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR],
        workers: 2,
        tableSize: 65536,
        ...(process.env.UVS_LAB_IO ? { io: process.env.UVS_LAB_IO } : {}),
      },
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
    const child = this.spawn(this.nodeNs(node), process.execPath, [join(ROOT, 'dist', 'control', 'uvsd.js'), '--config', file], {
      stdio: ['ignore', log, log],
    });
    this.uvsd[node] = child;
    await waitUvsd(child, this.socket(node), join(this.dir, `${node}.log`), node, timeoutMs);
    return child;
  }

  async stopUvsd(node: LbNode): Promise<void> {
    await stop(this.uvsd[node], 'SIGTERM');
  }

  /** SIGKILL of uvsd alone: the node and its keepalived live on. Returns when it is gone. */
  async killUvsd(node: LbNode): Promise<void> {
    await stop(this.uvsd[node], 'SIGKILL');
  }

  // ── keepalived ─────────────────────────────────────────────────────────────────────────────
  keepalivedConfig(node: LbNode, timing: KeepalivedTiming = LAB_VRRP): string {
    return keepalivedConfig({
      routerId: `${this.prefix}-${node}`,
      // lb1 highest: with both starting together it wins the first election.
      priority: 210 - 10 * this.index(node), // 200, 190, …: as the example
      front: this.frontDev(node),
      back: this.backDev(node),
      nextHop: NEXT_HOP,
      nextHop6: NEXT_HOP6,
      gateway: GATEWAY,
      gateway6: GATEWAY6,
      prefix4: 24,
      prefix6: 64,
      apiSocket: this.socket(node),
      notifyFifo: join(this.dir, `${node}.vrrp.fifo`),
      timing,
    });
  }

  /**
   * Starts keepalived in the node's namespace: its own config, pid files and notify FIFO in the
   * lab's directory (several keepalived run on one machine), in the foreground (-n, so the lab
   * owns the process), logging to <node>.keepalived.log. Returns at once; see waitState.
   */
  startKeepalived(node: LbNode, timing: KeepalivedTiming = LAB_VRRP): ChildProcess {
    const d = this.dir;
    const conf = join(d, `${node}.keepalived.conf`);
    writeFileSync(conf, this.keepalivedConfig(node, timing), { mode: 0o600 });
    const fifo = join(d, `${node}.vrrp.fifo`);
    if (!this.fifos[node]) {
      rmSync(fifo, { force: true });
      sh('mkfifo', ['-m', '0600', fifo]);
      chmodSync(fifo, 0o600);
      // O_RDWR: the open never blocks and never sees end-of-file when keepalived exits, so one
      // reader serves every keepalived the node runs.
      const fd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
      const sock = new Socket({ fd, readable: true, writable: false });
      const events = (this.events[node] ??= []);
      let buf = '';
      sock.on('data', (b: Buffer) => {
        const at = Date.now();
        buf += b.toString('utf8');
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          // e.g. INSTANCE "uvs_v4" MASTER 190   /   GROUP "uvs" FAULT
          const m = /^(INSTANCE|GROUP) "([^"]+)" (\w+)/.exec(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          if (m) events.push({ at, kind: m[1] as 'INSTANCE' | 'GROUP', name: m[2]!, state: m[3]! });
        }
      });
      sock.on('error', () => undefined);
      sock.unref(); // a lab left up must not keep its process alive
      this.fifos[node] = sock;
    }
    // A SIGKILLed keepalived leaves its pid files behind; if the kernel has given one of those pids
    // to another process since (the node's new uvsd, say), the next keepalived exits at once with
    // "daemon is already running". A node runs one keepalived, and none runs here: remove them.
    for (const f of [`${node}.keepalived.pid`, `${node}.vrrp.pid`]) rmSync(join(d, f), { force: true });
    const log = openSync(join(d, `${node}.keepalived.log`), 'a');
    const child = this.spawn(
      this.nodeNs(node),
      'keepalived',
      ['-n', '-l', '-D', '-P', '-f', conf, '-p', join(d, `${node}.keepalived.pid`), '-r', join(d, `${node}.vrrp.pid`)],
      { stdio: ['ignore', log, log] },
    );
    this.keepalived[node] = child;
    return child;
  }

  async stopKeepalived(node: LbNode): Promise<void> {
    await stop(this.keepalived[node], 'SIGTERM');
  }

  /** The node's last reported state of both instances when they agree, else null. */
  state(node: LbNode): string | null {
    const ev = this.events[node] ?? [];
    const last = (name: string) => [...ev].reverse().find((e) => e.kind === 'INSTANCE' && e.name === name)?.state ?? null;
    const v4 = last('uvs_v4');
    return v4 !== null && v4 === last('uvs_v6') ? v4 : null;
  }

  /** When both instances of the node last became `state`, at or after `since` (ms), or null. */
  enteredAt(node: LbNode, state: string, since: number): number | null {
    const ev = (this.events[node] ?? []).filter((e) => e.kind === 'INSTANCE' && e.state === state && e.at >= since);
    const v4 = ev.find((e) => e.name === 'uvs_v4');
    const v6 = ev.find((e) => e.name === 'uvs_v6');
    return v4 && v6 ? Math.max(v4.at, v6.at) : null;
  }

  /**
   * Waits until both of the node's instances are in `state`; with `since` (ms), entered at or
   * after it — the notify events of a keepalived that ran on the node before (killed or stopped
   * in an earlier test) must not count as the new one's state.
   */
  async waitState(node: LbNode, state: 'MASTER' | 'BACKUP' | 'FAULT', timeoutMs = 15000, since?: number): Promise<void> {
    try {
      await waitFor(
        () => this.state(node) === state && (since === undefined || this.enteredAt(node, state, since) !== null),
        timeoutMs,
        `keepalived on ${node} did not reach ${state} (last: ${this.state(node)})`,
      );
    } catch (e) {
      // The lab directory is removed with the lab: say here what keepalived said and reported.
      let log = '';
      try {
        log = readFileSync(join(this.dir, `${node}.keepalived.log`), 'utf8')
          .split('\n')
          .slice(-25)
          .join('\n');
      } catch {
        /* no log */
      }
      const ev = (this.events[node] ?? [])
        .slice(-12)
        .map((x) => `${x.kind} ${x.name} ${x.state}`)
        .join('; ');
      const k = this.keepalived[node];
      log += `\nkeepalived child: pid ${k?.pid} exit ${k?.exitCode} signal ${k?.signalCode}; processes in ${this.nodeNs(node)}: ${sh(
        'ip',
        ['netns', 'pids', this.nodeNs(node)],
        true,
      )
        .split('\n')
        .join(' ')}`;
      throw new Error(`${(e as Error).message}; notify events: ${ev}; keepalived log (last lines):\n${log}`);
    }
  }

  /** The VRRP addresses the node holds now (read from the kernel, not from keepalived). */
  heldAddresses(node: LbNode): string[] {
    const out = sh('ip', ['-n', this.nodeNs(node), '-o', 'addr', 'show'], true);
    return [NEXT_HOP, NEXT_HOP6, GATEWAY, GATEWAY6].filter((a) => out.includes(` ${a}/`));
  }

  /**
   * Makes `master` the VRRP master with every other node its backup: keepalived is started on
   * the master first and the others once it holds the addresses (nopreempt keeps it there).
   * uvsd must already run on the nodes (the track script gates them).
   */
  async startVrrp(master: LbNode = 'lb1', timing: KeepalivedTiming = LAB_VRRP, timeoutMs = 20000): Promise<void> {
    const t0 = Date.now();
    this.startKeepalived(master, timing);
    await this.waitState(master, 'MASTER', timeoutMs, t0);
    for (const n of this.nodes) {
      if (n === master) continue;
      const t = Date.now();
      this.startKeepalived(n, timing);
      await this.waitState(n, 'BACKUP', timeoutMs, t);
    }
    await waitFor(
      () => this.heldAddresses(master).length === 4,
      timeoutMs,
      () => {
        const ev = this.nodes.map(
          (n) =>
            `${n}: ${(this.events[n] ?? [])
              .slice(-6)
              .map((x) => `${x.name} ${x.state}`)
              .join(', ')}`,
        );
        return `${master} does not hold the VRRP addresses: ${this.heldAddresses(master).join(' ')}; notify events ${ev.join('; ')}`;
      },
    );
    await this.holdStates(master, timing, timeoutMs);
    this.active = master;
  }

  /**
   * The roles must hold, not be seen once: on a loaded machine a pair can flap (BACKUP → MASTER →
   * BACKUP within seconds, a split brain while adverts are late). Waits until no node's state
   * changed for 10 advert intervals (at least 1 s) with `master` MASTER and the others BACKUP;
   * fails with every node's recent state changes when they do not settle within timeoutMs.
   */
  private async holdStates(master: LbNode, timing: KeepalivedTiming, timeoutMs: number): Promise<void> {
    const quiet = Math.max(1000, timing.advertSeconds * 10_000);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const lastChange = Math.max(0, ...this.nodes.flatMap((n) => (this.events[n] ?? []).map((e) => e.at)));
      const roles = this.nodes.every((n) => this.state(n) === (n === master ? 'MASTER' : 'BACKUP'));
      if (roles && Date.now() - lastChange >= quiet) return;
      if (Date.now() > deadline) {
        const ev = this.nodes.map(
          (n) =>
            `${n}: ${(this.events[n] ?? [])
              .slice(-8)
              .map((x) => `${new Date(x.at).toISOString().slice(11, 23)} ${x.name} ${x.state}`)
              .join(', ')}`,
        );
        throw new Error(`the VRRP roles did not settle (${master} MASTER, the rest BACKUP, ${quiet} ms unchanged): ${ev.join('; ')}`);
      }
      await sleep(50);
    }
  }

  /**
   * The flows a node carries, as "<protocol>/<vport> <client>|<virtual>|<realServer>" (GET
   * /v1/connections; another node's flows it holds as shadows included): TCP ones in ESTABLISHED
   * state — or in any state with `anyState` — and UDP ones.
   */
  async flows(node: LbNode, anyState = false): Promise<string[]> {
    const rows = (await apiCall<ConnectionsResponse>(this.socket(node), 'GET', '/v1/connections?limit=100000')).body.connections;
    return rows
      .filter((c) => c.protocol === 'UDP' || (c.protocol === 'TCP' && (anyState || c.state === 'ESTABLISHED')))
      .map((c) => `${c.protocol.toLowerCase()}/${c.virtual.replace(/^.*:/, '')} ${c.client}|${c.virtual}|${c.realServer}`);
  }

  /**
   * Waits until `from` carries at least `want[k]` flows of each kind k ("tcp/80", "udp/53": TCP
   * ones ESTABLISHED), not counting those in `ignore` (e.g. the ones it had before), and `to`
   * holds every one of them with the same real server: what `to` needs to carry them on when
   * `from` dies. Returns their number.
   *
   * A node writes a new flow's record within one write period (redis-sync.ts: a 50 ms timer, then
   * two Redis round trips, plus event-loop delays — over 85 ms seen on the loaded 2-core machine).
   * A flow whose record never left the dead node cannot be adopted by anyone: on the other node its
   * next packet is mid-flow and Redis has nothing. So a kill tests failover only once this holds.
   * Counting records written or shadows held does not tell: other flows fill the count (the
   * downloads' records in the demo, a readiness probe's shadow in the tunnel test), and both used
   * to kill the master within a new flow's first write period.
   */
  async waitCarried(
    from: LbNode,
    to: LbNode,
    want: Record<string, number>,
    ignore: ReadonlySet<string> = new Set(),
    timeoutMs = 20000,
  ): Promise<number> {
    const kind = (f: string) => f.slice(0, f.indexOf(' '));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const have = (await this.flows(from)).filter((f) => !ignore.has(f) && want[kind(f)] !== undefined);
      const short = Object.entries(want).filter(([k, n]) => have.filter((f) => kind(f) === k).length < n);
      const held = new Set(await this.flows(to, true));
      const missing = have.filter((f) => !held.has(f));
      if (short.length === 0 && missing.length === 0) return have.length;
      if (Date.now() > deadline) {
        throw new Error(
          `${from} carries ${have.length} flows (wanted: ${JSON.stringify(want)})${missing.length ? `; ${to} does not hold ${missing.join(', ')}` : ''}`,
        );
      }
      await sleep(20);
    }
  }

  /**
   * Back to a clean start: keepalived and uvsd stopped on every node, every node's links up and
   * no VRRP address left anywhere (a node killed with SIGKILL keeps them on its downed links).
   */
  async reset(): Promise<void> {
    for (const n of this.nodes) {
      await this.stopKeepalived(n);
      await this.stopUvsd(n);
      this.revive(n);
    }
  }

  /**
   * The whole node dies: its links go down first (nothing it sends after that, not keepalived's
   * goodbye advert either, reaches anyone), then every process in its namespace gets SIGKILL.
   * The others notice by VRRP timeout.
   */
  async killNode(node: LbNode): Promise<number> {
    // Both links in one `ip` process, so they go down together; the cut is timed from just before
    // it (spawning `ip` takes some ms on a busy machine, the link change itself next to nothing).
    const cut = Date.now();
    execFileSync('ip', ['-n', this.nodeNs(node), '-batch', '-'], {
      input: `link set ${this.frontDev(node)} down\nlink set ${this.backDev(node)} down\n`,
      stdio: ['pipe', 'ignore', 'pipe'],
    });
    const kids = [this.uvsd[node], this.keepalived[node]];
    for (const pid of sh('ip', ['netns', 'pids', this.nodeNs(node)], true).split('\n')) {
      if (!pid.trim()) continue;
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await Promise.all(kids.map((c) => stop(c, 'SIGKILL')));
    return cut;
  }

  /**
   * The active node fails — `uvsd`: its uvsd gets SIGKILL (keepalived's track script faults it);
   * `node`: the whole node dies (killNode). Waits until another node's keepalived is MASTER.
   * Returns that node, the kill time (for a node: its links cut) and how long VRRP took (kill → both instances MASTER, as
   * the notify FIFO told, a few ms after the addresses were added).
   */
  async failover(kind: KillKind = 'node', timeoutMs = 15000): Promise<{ node: LbNode; killedAt: number; deadAt: number; vrrpMs: number }> {
    const dead = this.active;
    // The kill's moment: the signal for uvsd (sent at once); for a node, its links' cut. deadAt:
    // when the old node certainly forwarded nothing more — uvsd's exit seen (the process dies when
    // the kernel next runs each of its threads, up to ms after the signal), or the links' cut.
    let killedAt = Date.now();
    let deadAt: number;
    if (kind === 'uvsd') {
      await this.killUvsd(dead);
      deadAt = Date.now();
    } else deadAt = killedAt = await this.killNode(dead);
    let node: LbNode | null = null;
    await waitFor(
      () => (node = this.nodes.find((n) => n !== dead && this.enteredAt(n, 'MASTER', killedAt) !== null) ?? null) !== null,
      timeoutMs,
      `no node took over from ${dead} in ${timeoutMs} ms`,
    );
    const live = node as unknown as LbNode;
    this.active = live;
    return { node: live, killedAt, deadAt, vrrpMs: this.enteredAt(live, 'MASTER', killedAt)! - killedAt };
  }

  /**
   * Brings a dead node's links back, as a rebooted node comes up: without the VRRP addresses it
   * held (a SIGKILLed keepalived leaves them on the downed links), with its routes.
   */
  revive(node: LbNode): void {
    for (const [a, dev] of [
      [`${NEXT_HOP}/24`, this.frontDev(node)],
      [`${NEXT_HOP6}/64`, this.frontDev(node)],
      [`${GATEWAY}/24`, this.backDev(node)],
      [`${GATEWAY6}/64`, this.backDev(node)],
    ] as const) {
      sh('ip', ['-n', this.nodeNs(node), 'addr', 'del', a, 'dev', dev], true);
    }
    for (const dev of [this.frontDev(node), this.backDev(node)]) this.ip(this.nodeNs(node), ['link', 'set', dev, 'up']);
    this.defaultRoutes(node); // a link going down took its routes with it
  }
}

/** Polls `cond` every 20 ms until it holds; throws `what` after timeoutMs. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string | (() => string)): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(typeof what === 'string' ? what : what());
    await sleep(20);
  }
}

async function stop(c: ChildProcess | undefined, sig: NodeJS.Signals): Promise<void> {
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  const done = new Promise((r) => c.once('exit', r));
  c.kill(sig);
  const t = setTimeout(() => c.kill('SIGKILL'), 10000);
  await done;
  clearTimeout(t);
}
