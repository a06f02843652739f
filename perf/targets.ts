/**
 * What the generators are pointed at. Every target balances the same backends in the LB
 * namespace of the same lab (or, for `direct`, is not there at all):
 *
 *   service             port     backends (masq / DNAT / proxy)
 *   sockperf UDP        11111    rr over rs1..rs3 :11111   (one flow lands on one of them)
 *   sockperf TCP        11111    rr over rs1..rs3 :11111
 *   HTTP                80       rr over rs1..rs3 :8080    (lab/servers.js)
 *   iperf3              5201     rs1:5201 only            (iperf3's control and data connections
 *                                                         must reach the same server)
 *   UDP discard         11112    rr over rs1..rs3 :11112   (uvs scaling runs; nothing listens, the
 *                                                         real servers count the datagrams)
 *
 * VIPs: uvs 10.200.0.10 (routed into its TUN device), ctun 10.200.0.50 (routed into the C TUN
 * forwarder's device, perf/peers/ctun.c), nftables 10.200.0.20 (DNAT in prerouting), HAProxy
 * 10.200.0.30 and nginx 10.200.0.40 (addresses added to lo in the LB namespace while the proxy
 * runs). Configuration files go into the lab directory; the proxies run in the foreground
 * inside the LB namespace and are stopped by teardown (and, failing that, by Lab.down()).
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { apiCall } from '../control/client';
import type { Lab } from '../lab/lab';
import { NGINX_STREAM_MODULE, nginxStreamBuiltIn } from './deps';
import { run, runOk, sleep, spawnTracked, stopProcess } from './exec';
import { nsPids, parseConntrackStat, processMemKb } from './probe';

export type TargetName = 'direct' | 'uvs' | 'ctun' | 'nftables' | 'haproxy' | 'nginx';
export const ALL_TARGETS: TargetName[] = ['direct', 'uvs', 'ctun', 'nftables', 'haproxy', 'nginx'];
export const PEERS: TargetName[] = ['direct', 'ctun', 'nftables', 'haproxy', 'nginx'];

export type MeasurementName = 'udp_pps' | 'udp_rr' | 'tcp_rr' | 'tcp_cps' | 'tcp_bulk';
export const ALL_MEASUREMENTS: MeasurementName[] = ['udp_pps', 'udp_rr', 'tcp_rr', 'tcp_cps', 'tcp_bulk'];

export const SP_PORT = 11111;
export const DISCARD_PORT = 11112;
export const HTTP_PORT = 8080;
export const IPERF_PORT = 5201;

export interface Endpoint {
  host: string;
  port: number;
  /**
   * Several hosts behind one endpoint (`direct`'s HTTP: the three real servers, as every LB
   * spreads over them): wrk's threads are divided over them, thread i → spread[i mod n].
   */
  spread?: string[];
}

export interface Endpoints {
  /** sockperf UDP server(s). */
  udp: Endpoint;
  /** sockperf TCP server(s). */
  tcp: Endpoint;
  /** HTTP (lab/servers.js on :8080 of every real server). */
  http: Endpoint;
  iperf: Endpoint;
}

/** The usual endpoints of an LB address: sockperf UDP/TCP, HTTP on 80, iperf3. */
function endpointsAt(host: string): Endpoints {
  return { udp: { host, port: SP_PORT }, tcp: { host, port: SP_PORT }, http: { host, port: 80 }, iperf: { host, port: IPERF_PORT } };
}

export interface Target {
  readonly name: TargetName;
  /** Measurements this target cannot do, with the reason. */
  readonly unsupported: Partial<Record<MeasurementName, string>>;
  endpoints(): Endpoints;
  setup(): Promise<void>;
  /** After its runs, before teardown: what went wrong with the method itself (null: nothing). */
  check?(): Promise<string | null>;
  teardown(): Promise<void>;
}

export interface TargetEnv {
  lab: Lab;
  /** Worker threads/processes for every LB (uvs workers, haproxy nbthread, nginx worker_processes). */
  workers: number;
  log: (s: string) => void;
  /** uvsd's worker I/O path (dataplane.io); absent: its default (auto). */
  uvsIo?: 'auto' | 'io_uring' | 'poll';
  uvsSteering?: 'auto' | 'ebpf' | 'automq';
  /** uvsd's forwarding for every service; absent: masq. fullnat: the pool address FULLNAT_POOL. */
  uvsForwarding?: 'masq' | 'fullnat';
  /**
   * --profile: uvsd runs with `--perf-basic-prof-only-functions` (JS names for perf record) and
   * `--trace-gc` (every GC with its pause, copied to `<dir>/uvsd-<n>/uvsd.log`).
   */
  profileDir?: string;
  /** --profile-v8: and with `node --cpu-prof` (one .cpuprofile per thread in `<dir>/uvsd-<n>/`). */
  profileV8?: boolean;
}

const ROOT = join(__dirname, '..', '..');

const VIP = { uvs: '10.200.0.10', nftables: '10.200.0.20', haproxy: '10.200.0.30', nginx: '10.200.0.40', ctun: '10.200.0.50' } as const;
/** uvsd's full-NAT pool address (--uvs-forwarding fullnat): routed into its device by uvsd, the real servers reach it through their default route. */
const FULLNAT_POOL = '10.200.99.1';

/**
 * Every target's connections leave the client from an address of their own (issue 16). The
 * client's TCP timestamps start at a keyed offset (per address pair since Linux 4.13; per 4-tuple
 * on the 6.18 kernel seen 2026-12-02 — either way unrelated between targets), and
 * direct, uvs, ctun and nftables all reach the real servers with the client's own address and
 * port: with one client address, a target reusing a client port whose 4-tuple a real server
 * still holds in TIME_WAIT (60 s) from another target — the 28 232 ports go round in seconds at
 * thousands of connections a second — sends an older timestamp whenever its offset is lower, the
 * server rejects the SYN (PAWS, TcpExt PAWSTimewait), and the connection waits a 1 s SYN
 * retransmit. That cost 10–21 % of those targets' connections, depending on which target ran
 * before. With an address per target, a 4-tuple in TIME_WAIT was always made by the same target
 * (the same offset, newer timestamps), so the server takes the new SYN.
 */
export const CLIENT_SOURCE: Record<TargetName, string> = {
  direct: '10.200.1.10',
  uvs: '10.200.1.11',
  ctun: '10.200.1.12',
  nftables: '10.200.1.13',
  haproxy: '10.200.1.14',
  nginx: '10.200.1.15',
};

/**
 * Adds the targets' client addresses (CLIENT_SOURCE) to the client's veth and routes each
 * target's destinations — its VIP; for `direct` the real servers — from its own address.
 */
export async function routeClientSources(lab: Lab): Promise<void> {
  const dev = `${lab.prefix}c0`;
  const ip = (a: string[]) => runOk('ip', ['-n', lab.clientNs, ...a], { timeoutMs: 5000 });
  const gw = '10.200.1.1';
  for (const name of ALL_TARGETS) {
    const src = CLIENT_SOURCE[name];
    await ip(['addr', 'replace', `${src}/32`, 'dev', dev]);
    const dsts = name === 'direct' ? lab.rsAddrs : [VIP[name]];
    for (const d of dsts) await ip(['route', 'replace', `${d}/32`, 'via', gw, 'dev', dev, 'src', src]);
  }
}

/**
 * The same TCP settings in every namespace of the lab, written out rather than left to the
 * kernel's defaults: the client's port range (28 232 ports), TCP timestamps on, and TIME_WAIT
 * reuse for outgoing connections (tcp_tw_reuse=1: a port whose 4-tuple the client holds in
 * TIME_WAIT is taken again after 1 s, its timestamps newer). Through a proxy, wrk closes first (it
 * has the whole response before the proxy's FIN), so the client holds a TIME_WAIT socket per
 * connection; with the kernel's default (2: loopback only) they filled the even ports connect()
 * tries first, and once a proxy target had made ~14 k connections within 60 s every connect()
 * scanned them all — its connections/s fell to 330–4 000 (perf/LOG.md, 2026-12-02).
 */
export const LAB_SYSCTLS = ['net.ipv4.ip_local_port_range=32768 60999', 'net.ipv4.tcp_tw_reuse=1', 'net.ipv4.tcp_timestamps=1'];

export async function setLabSysctls(lab: Lab): Promise<void> {
  for (const ns of [lab.clientNs, lab.lbNs, ...lab.rsNs]) await runOk('sysctl', ['-qw', ...LAB_SYSCTLS], { ns, timeoutMs: 5000 });
}

export async function setForwarding(lab: Lab): Promise<void> {
  await runOk('sysctl', ['-qw', 'net.ipv4.ip_forward=1'], { ns: lab.lbNs, timeoutMs: 5000 });
}

/** Waits until every port listed listens on addr in the LB namespace (ss), or throws. */
async function waitListening(lab: Lab, addr: string, tcp: number[], udp: number[], timeoutMs = 8000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const t = (await run('ss', ['-Hltn'], { ns: lab.lbNs, timeoutMs: 5000 })).stdout;
    const u = (await run('ss', ['-Hlun'], { ns: lab.lbNs, timeoutMs: 5000 })).stdout;
    const ok = tcp.every((p) => t.includes(`${addr}:${p} `)) && udp.every((p) => u.includes(`${addr}:${p} `));
    if (ok) return;
    if (Date.now() > deadline)
      throw new Error(`nothing listens on ${addr} ports tcp ${tcp.join(',')} udp ${udp.join(',')} after ${timeoutMs} ms`);
    await sleep(100);
  }
}

async function addLoAddress(lab: Lab, addr: string): Promise<void> {
  await run('ip', ['-n', lab.lbNs, 'addr', 'del', `${addr}/32`, 'dev', 'lo'], { timeoutMs: 5000 });
  await runOk('ip', ['-n', lab.lbNs, 'addr', 'add', `${addr}/32`, 'dev', 'lo'], { timeoutMs: 5000 });
}

async function delLoAddress(lab: Lab, addr: string): Promise<void> {
  await run('ip', ['-n', lab.lbNs, 'addr', 'del', `${addr}/32`, 'dev', 'lo'], { timeoutMs: 5000 });
}

/** RSS (MB) summed over the processes in the LB namespace (shared pages of nginx's processes count once per process). */
export async function lbRssMb(lab: Lab, except: number[]): Promise<number | null> {
  const pids = await nsPids(lab.lbNs, except);
  if (pids.length === 0) return null;
  let kb = 0;
  for (const p of pids) kb += processMemKb(p)?.rss ?? 0;
  return kb / 1024;
}

// ── direct ────────────────────────────────────────────────────────────────────────────────────
export class DirectTarget implements Target {
  readonly name = 'direct' as const;
  readonly unsupported = {};
  constructor(private readonly env: TargetEnv) {}
  endpoints(): Endpoints {
    const rs = this.env.lab.rsAddrs;
    return {
      udp: { host: rs[0]!, port: SP_PORT },
      tcp: { host: rs[0]!, port: SP_PORT },
      // Short connections go to the three real servers, as through every LB: one single-threaded
      // HTTP server would be this figure's limit (it got a third of the CPU the LBs' three get).
      http: { host: rs[0]!, port: HTTP_PORT, spread: rs },
      iperf: { host: rs[0]!, port: IPERF_PORT },
    };
  }
  async setup(): Promise<void> {
    await setForwarding(this.env.lab); // plain kernel routing through the LB node, nothing else
  }
  async teardown(): Promise<void> {}
}

// ── uvs ───────────────────────────────────────────────────────────────────────────────────────
export class UvsTarget implements Target {
  readonly name = 'uvs' as const;
  readonly unsupported = {};
  tableSize = 65536;
  workers: number;
  constructor(private readonly env: TargetEnv) {
    this.workers = env.workers;
  }
  static readonly vip = VIP.uvs;
  endpoints(): Endpoints {
    return endpointsAt(VIP.uvs);
  }
  discard(): Endpoint {
    return { host: VIP.uvs, port: DISCARD_PORT };
  }
  async setup(): Promise<void> {
    const lab = this.env.lab;
    const rr = (port: number) => lab.rsAddrs.map((address) => ({ address, port }));
    const fwd = this.env.uvsForwarding ?? 'masq';
    const services = [
      { name: 'sockperf-udp', protocol: 'udp', address: VIP.uvs, port: SP_PORT, scheduler: 'rr', realServers: rr(SP_PORT) },
      { name: 'sockperf-tcp', protocol: 'tcp', address: VIP.uvs, port: SP_PORT, scheduler: 'rr', realServers: rr(SP_PORT) },
      { name: 'http', protocol: 'tcp', address: VIP.uvs, port: 80, scheduler: 'rr', realServers: rr(HTTP_PORT) },
      {
        name: 'iperf3',
        protocol: 'tcp',
        address: VIP.uvs,
        port: IPERF_PORT,
        scheduler: 'rr',
        realServers: [{ address: lab.rsAddrs[0]!, port: IPERF_PORT }],
      },
      { name: 'discard', protocol: 'udp', address: VIP.uvs, port: DISCARD_PORT, scheduler: 'rr', realServers: rr(DISCARD_PORT) },
    ].map((s) => ({ ...s, forwarding: fwd }));
    const cfg = lab.config(services, {
      log: { level: 'warn' },
      dataplane: {
        workers: this.workers,
        tableSize: this.tableSize,
        ...(this.env.uvsIo ? { io: this.env.uvsIo } : {}),
        ...(this.env.uvsSteering ? { steering: this.env.uvsSteering } : {}),
        ...(fwd === 'fullnat' ? { fullnat: { addresses: [FULLNAT_POOL] } } : {}),
      },
    });
    const file = lab.writeConfig(cfg, 'uvs-perf.yaml');
    const prof = this.env.profileDir;
    this.cpuProfDir = prof ? join(prof, `uvsd-${++UvsTarget.starts}`) : null;
    const uvsdLog = join(lab.dir, 'uvsd.log');
    this.logFrom = existsSync(uvsdLog) ? statSync(uvsdLog).size : 0;
    await lab.startUvsd(
      file,
      undefined,
      this.cpuProfDir
        ? [
            ...(this.env.profileV8 ? ['--cpu-prof', '--cpu-prof-dir', this.cpuProfDir] : []),
            '--perf-basic-prof-only-functions',
            '--trace-gc',
          ]
        : [],
    );
    // Ready when every worker has its queue.
    const deadline = Date.now() + 10000;
    for (;;) {
      const st = await apiCall<{ workers: { ready: boolean }[] }>(lab.socket, 'GET', '/v1/stats').catch(() => null);
      if (st?.status === 200 && st.body.workers.length === this.workers && st.body.workers.every((w) => w.ready)) break;
      if (Date.now() > deadline) throw new Error('uvsd workers not ready after 10 s');
      await sleep(50);
    }
  }
  /** The uvsd process: `ip netns exec` execs it, so the child's pid is node's. */
  get pid(): number | null {
    return this.env.lab.uvsdProcess?.pid ?? null;
  }
  /** With --profile: where this start's GC log (and with --profile-v8 its .cpuprofile files) go. */
  cpuProfDir: string | null = null;
  private logFrom = 0;
  private static starts = 0;
  async stats(): Promise<{
    table: { entries: number; capacity: number };
    packets: Record<string, number>;
    drops: Record<string, number>;
  } | null> {
    const r = await apiCall<{
      table: { entries: number; capacity: number };
      packets: Record<string, number>;
      drops: Record<string, number>;
    }>(this.env.lab.socket, 'GET', '/v1/stats').catch(() => null);
    return r?.status === 200 ? r.body : null;
  }
  async teardown(): Promise<void> {
    const pid = this.pid;
    const code = await this.env.lab.stopUvsd();
    if (code !== 0 && code !== null) this.env.log(`uvsd exited with ${code}`);
    // --perf-basic-prof's symbol map, read by perf script right after each measurement.
    if (this.cpuProfDir && pid) rmSync(`/tmp/perf-${pid}.map`, { force: true });
    // --trace-gc's lines (and anything else this uvsd logged) beside its profiles.
    if (this.cpuProfDir) {
      mkdirSync(this.cpuProfDir, { recursive: true });
      writeFileSync(join(this.cpuProfDir, 'uvsd.log'), readFileSync(join(this.env.lab.dir, 'uvsd.log')).subarray(this.logFrom));
    }
  }
}

// ── ctun: the minimal C TUN forwarder (perf/peers/ctun.c) ─────────────────────────────────────
/**
 * The reference a TUN-based LB is compared against: stateless NAT in C, one packet per read() and
 * write(), one thread per queue. Set up exactly parallel to uvsd's dataplane (lb/dataplane.ts):
 * a multi-queue TUN device with one queue per worker, MTU 1500, rp_filter 0 and send_redirects 0
 * on it, ip_forward 1, the VIP routed into it, and for every (real server, port, protocol) a
 * policy rule `from RIP ipproto P sport RPORT lookup TABLE` whose table routes into the device,
 * so that the servers' replies come back through it. Its own table and rule priority, so that it
 * can never touch uvsd's (4711).
 */
export class CtunTarget implements Target {
  readonly name = 'ctun' as const;
  readonly unsupported = {};
  static readonly device = 'ctun0';
  static readonly table = 4712;
  static readonly source = join(ROOT, 'perf', 'peers', 'ctun.c');
  private child: ChildProcess | null = null;
  constructor(private readonly env: TargetEnv) {}
  endpoints(): Endpoints {
    return endpointsAt(VIP.ctun);
  }
  /** The services, as ctun's arguments and as reply rules. */
  services(): { proto: 'tcp' | 'udp'; vport: number; rs: Endpoint[] }[] {
    const rs = this.env.lab.rsAddrs;
    const all = (port: number) => rs.map((host) => ({ host, port }));
    return [
      { proto: 'udp', vport: SP_PORT, rs: all(SP_PORT) },
      { proto: 'tcp', vport: SP_PORT, rs: all(SP_PORT) },
      { proto: 'tcp', vport: 80, rs: all(HTTP_PORT) },
      { proto: 'tcp', vport: IPERF_PORT, rs: [{ host: rs[0]!, port: IPERF_PORT }] },
    ];
  }
  /** Compiles ctun.c into the lab directory (once per run: the directory lives as long as the lab). */
  async build(): Promise<string> {
    const bin = join(this.env.lab.dir, 'ctun');
    if (!existsSync(bin)) await runOk('cc', ['-O2', '-Wall', '-pthread', '-o', bin, CtunTarget.source], { timeoutMs: 60000 });
    return bin;
  }
  async setup(): Promise<void> {
    const lab = this.env.lab;
    const ns = lab.lbNs;
    const dev = CtunTarget.device;
    const t = String(CtunTarget.table);
    const bin = await this.build();
    await this.removeRouting();
    const args = [
      '-d',
      dev,
      '-v',
      VIP.ctun,
      '-q',
      String(this.env.workers),
      ...this.services().map((s) => `${s.proto}:${s.vport}=${s.rs.map((r) => `${r.host}:${r.port}`).join(',')}`),
    ];
    const log = openSync(join(lab.dir, 'ctun.log'), 'w');
    this.child = spawnTracked(bin, args, ns, log);
    closeSync(log);
    // The device exists once ctun has opened its queues ("ready" in its log).
    const deadline = Date.now() + 5000;
    while (!readFileSync(join(lab.dir, 'ctun.log'), 'utf8').includes('ready')) {
      if (this.child.exitCode !== null || Date.now() > deadline)
        throw new Error(`ctun did not start: ${readFileSync(join(lab.dir, 'ctun.log'), 'utf8').trim() || 'no output'}`);
      await sleep(20);
    }
    const ip = (a: string[]) => runOk('ip', ['-n', ns, ...a], { timeoutMs: 5000 });
    await ip(['link', 'set', 'dev', dev, 'mtu', '1500', 'up']);
    await runOk('sysctl', ['-qw', `net.ipv4.conf.${dev}.rp_filter=0`, `net.ipv4.conf.${dev}.send_redirects=0`, 'net.ipv4.ip_forward=1'], {
      ns,
      timeoutMs: 5000,
    });
    await ip(['route', 'replace', `${VIP.ctun}/32`, 'dev', dev]);
    await ip(['route', 'replace', 'default', 'dev', dev, 'table', t]);
    for (const s of this.services()) {
      for (const r of s.rs)
        await ip(['rule', 'add', 'pref', t, 'from', `${r.host}/32`, 'ipproto', s.proto, 'sport', String(r.port), 'lookup', t]);
    }
  }
  /** ctun's counters, from its log (written when it stops). */
  counters(): string | null {
    try {
      return (
        /ctun: (in \d+ out \d+ dropped \d+ write-errors \d+)/.exec(readFileSync(join(this.env.lab.dir, 'ctun.log'), 'utf8'))?.[1] ?? null
      );
    } catch {
      return null;
    }
  }
  private async removeRouting(): Promise<void> {
    const ns = this.env.lab.lbNs;
    const t = String(CtunTarget.table);
    for (let i = 0; i < 1000 && (await run('ip', ['-n', ns, 'rule', 'show', 'pref', t], { timeoutMs: 5000 })).stdout.trim() !== ''; i++) {
      await run('ip', ['-n', ns, 'rule', 'del', 'pref', t], { timeoutMs: 5000 });
    }
    await run('ip', ['-n', ns, 'route', 'flush', 'table', t], { timeoutMs: 5000 });
    await run('ip', ['-n', ns, 'route', 'del', `${VIP.ctun}/32`], { timeoutMs: 5000 });
  }
  async teardown(): Promise<void> {
    if (this.child) await stopProcess(this.child);
    this.child = null;
    const c = this.counters();
    if (c) this.env.log(`ctun: ${c}`);
    await this.removeRouting();
    await run('ip', ['-n', this.env.lab.lbNs, 'link', 'del', CtunTarget.device], { timeoutMs: 5000 }); // gone with its last queue already
  }
}

// ── nftables DNAT ─────────────────────────────────────────────────────────────────────────────
export class NftTarget implements Target {
  readonly name = 'nftables' as const;
  readonly unsupported = {};
  constructor(private readonly env: TargetEnv) {}
  endpoints(): Endpoints {
    return endpointsAt(VIP.nftables);
  }
  ruleset(): string {
    const rs = this.env.lab.rsAddrs;
    const map = rs.map((a, i) => `${i} : ${a}`).join(', ');
    const mapPort = rs.map((a, i) => `${i} : ${a} . ${HTTP_PORT}`).join(', ');
    const v = VIP.nftables;
    return [
      'table ip uvsperf {',
      '  chain prerouting {',
      '    type nat hook prerouting priority dstnat; policy accept;',
      `    ip daddr ${v} udp dport ${SP_PORT} dnat to numgen inc mod ${rs.length} map { ${map} }`,
      `    ip daddr ${v} tcp dport ${SP_PORT} dnat to numgen inc mod ${rs.length} map { ${map} }`,
      `    ip daddr ${v} tcp dport 80 dnat ip to numgen inc mod ${rs.length} map { ${mapPort} }`,
      `    ip daddr ${v} tcp dport ${IPERF_PORT} dnat to ${rs[0]}`,
      '  }',
      '}',
      '',
    ].join('\n');
  }
  private ctBefore: Record<string, number> = {};
  /** Conntrack in the LB namespace: entries now, the table's size, and the per-CPU counters summed. */
  async conntrack(): Promise<{ count: number; max: number; stat: Record<string, number> }> {
    const cat = (f: string) => run('cat', [f], { ns: this.env.lab.lbNs, timeoutMs: 5000 }).then((r) => r.stdout);
    return {
      count: Number(await cat('/proc/sys/net/netfilter/nf_conntrack_count')),
      max: Number(await cat('/proc/sys/net/netfilter/nf_conntrack_max')),
      stat: parseConntrackStat(await cat('/proc/net/stat/nf_conntrack')),
    };
  }
  async setup(): Promise<void> {
    const lab = this.env.lab;
    await setForwarding(lab);
    const file = join(lab.dir, 'nftables.conf');
    writeFileSync(file, this.ruleset());
    await run('nft', ['delete', 'table', 'ip', 'uvsperf'], { ns: lab.lbNs, timeoutMs: 5000 });
    await runOk('nft', ['-f', file], { ns: lab.lbNs, timeoutMs: 10000 });
    this.ctBefore = (await this.conntrack()).stat;
  }
  /**
   * The conntrack table must hold every connection of the runs: an entry stays 120 s in TIME_WAIT,
   * and a full table drops new connections (drop, early_drop). Its size is the kernel's, global
   * (nf_conntrack_max cannot be set from a namespace), so it is checked rather than set.
   */
  async check(): Promise<string | null> {
    const ct = await this.conntrack();
    const d = (k: string) => (ct.stat[k] ?? 0) - (this.ctBefore[k] ?? 0);
    this.env.log(
      `nftables: conntrack holds ${ct.count} of ${ct.max} entries; drop ${d('drop')}, early_drop ${d('early_drop')}, insert_failed ${d('insert_failed')} during its runs`,
    );
    if (d('drop') + d('early_drop') + d('insert_failed') > 0 || ct.count > 0.9 * ct.max) {
      return `conntrack table (${ct.max} entries) too small for the runs: ${ct.count} entries, drop ${d('drop')}, early_drop ${d('early_drop')}, insert_failed ${d('insert_failed')}`;
    }
    return null;
  }
  async teardown(): Promise<void> {
    // The nat table pulls conntrack into the LB namespace: remove it so no other target pays for it.
    await run('nft', ['delete', 'table', 'ip', 'uvsperf'], { ns: this.env.lab.lbNs, timeoutMs: 5000 });
  }
}

// ── HAProxy (mode tcp) ────────────────────────────────────────────────────────────────────────
export class HaproxyTarget implements Target {
  readonly name = 'haproxy' as const;
  readonly unsupported = {
    udp_pps: 'HAProxy 2.x (community edition) has no UDP load balancing',
    udp_rr: 'HAProxy 2.x (community edition) has no UDP load balancing',
  };
  private child: ChildProcess | null = null;
  constructor(private readonly env: TargetEnv) {}
  endpoints(): Endpoints {
    return endpointsAt(VIP.haproxy);
  }
  config(): string {
    const rs = this.env.lab.rsAddrs;
    const v = VIP.haproxy;
    const servers = (port: number, only?: number) =>
      rs
        .filter((_a, i) => only === undefined || i === only)
        .map((a, i) => `  server rs${i + 1} ${a}:${port}`)
        .join('\n');
    return `# written by uvs perf; runs in the lab's LB namespace only
global
  nbthread ${this.env.workers}
  maxconn 8000

defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s

listen sockperf_tcp
  bind ${v}:${SP_PORT}
  balance roundrobin
${servers(SP_PORT)}

listen http
  bind ${v}:80
  balance roundrobin
${servers(HTTP_PORT)}

listen iperf3
  bind ${v}:${IPERF_PORT}
${servers(IPERF_PORT, 0)}
`;
  }
  async setup(): Promise<void> {
    const lab = this.env.lab;
    await addLoAddress(lab, VIP.haproxy);
    const file = join(lab.dir, 'haproxy.cfg');
    writeFileSync(file, this.config());
    await runOk('haproxy', ['-c', '-q', '-f', file], { ns: lab.lbNs, timeoutMs: 10000 });
    const log = openSync(join(lab.dir, 'haproxy.log'), 'a');
    this.child = spawnTracked('haproxy', ['-db', '-f', file], lab.lbNs, log);
    closeSync(log);
    await waitListening(lab, VIP.haproxy, [SP_PORT, 80, IPERF_PORT], []);
  }
  async teardown(): Promise<void> {
    if (this.child) await stopProcess(this.child);
    this.child = null;
    await delLoAddress(this.env.lab, VIP.haproxy);
  }
}

// ── nginx stream (TCP and UDP) ────────────────────────────────────────────────────────────────
export class NginxTarget implements Target {
  readonly name = 'nginx' as const;
  readonly unsupported = {};
  private child: ChildProcess | null = null;
  constructor(private readonly env: TargetEnv) {}
  endpoints(): Endpoints {
    return endpointsAt(VIP.nginx);
  }
  config(): string {
    const lab = this.env.lab;
    const rs = lab.rsAddrs;
    const v = VIP.nginx;
    const up = (port: number, n = rs.length) =>
      rs
        .slice(0, n)
        .map((a) => `server ${a}:${port};`)
        .join(' ');
    const load = nginxStreamBuiltIn() ? '' : `load_module ${NGINX_STREAM_MODULE};\n`;
    return `# written by uvs perf; runs in the lab's LB namespace only (nginx -c this -p ${lab.dir})
${load}worker_processes ${this.env.workers};
daemon off;
pid ${join(lab.dir, 'nginx.pid')};
error_log ${join(lab.dir, 'nginx-error.log')} warn;
events { worker_connections 4096; }
stream {
  upstream sockperf { ${up(SP_PORT)} }
  upstream http { ${up(HTTP_PORT)} }
  upstream iperf3 { ${up(IPERF_PORT, 1)} }
  server { listen ${v}:${SP_PORT} udp reuseport; proxy_pass sockperf; proxy_timeout 30s; }
  server { listen ${v}:${SP_PORT}; proxy_pass sockperf; }
  server { listen ${v}:80; proxy_pass http; }
  server { listen ${v}:${IPERF_PORT}; proxy_pass iperf3; }
}
`;
  }
  async setup(): Promise<void> {
    const lab = this.env.lab;
    await addLoAddress(lab, VIP.nginx);
    const file = join(lab.dir, 'nginx.conf');
    const err = join(lab.dir, 'nginx-error.log');
    writeFileSync(file, this.config());
    await runOk('nginx', ['-t', '-q', '-c', file, '-e', err, '-p', lab.dir], { ns: lab.lbNs, timeoutMs: 10000 });
    const log = openSync(join(lab.dir, 'nginx.log'), 'a');
    this.child = spawnTracked('nginx', ['-c', file, '-e', err, '-p', lab.dir], lab.lbNs, log);
    closeSync(log);
    await waitListening(lab, VIP.nginx, [SP_PORT, 80, IPERF_PORT], [SP_PORT]);
  }
  async teardown(): Promise<void> {
    if (this.child) await stopProcess(this.child, 5000);
    this.child = null;
    await delLoAddress(this.env.lab, VIP.nginx);
  }
}

export function makeTarget(name: TargetName, env: TargetEnv): Target {
  switch (name) {
    case 'direct':
      return new DirectTarget(env);
    case 'uvs':
      return new UvsTarget(env);
    case 'ctun':
      return new CtunTarget(env);
    case 'nftables':
      return new NftTarget(env);
    case 'haproxy':
      return new HaproxyTarget(env);
    case 'nginx':
      return new NginxTarget(env);
  }
}
