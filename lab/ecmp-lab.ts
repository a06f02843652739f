/**
 * The ECMP lab: LB nodes active-active behind a router that spreads the VIP ranges over them by an
 * L4 hash. Each LB node runs BIRD 2 and uvsd; BIRD announces what uvsd keeps in its announcement
 * table (dataplane.announceTable), the router's BIRD learns it over BGP from every node and
 * installs one multipath route (`merge paths`), and the router's kernel picks a next hop per flow
 * by a hash of its addresses, protocol and ports (see hashPolicy). Forwarding is IPIP / ip6ip6 with
 * direct return: the real servers answer the client through the router, never through an LB.
 *
 *   <p>-cl 10.202.1.2 ── <p>-rt ─┬─ 10.202.21.0/24 ── <p>-lb1 ─┐
 *                                ├─ 10.202.22.0/24 ── <p>-lb2 ─┤
 *                                ├─ 10.202.23.0/24 ── <p>-lb3 ─┤   (a 4th, 10.202.24.0/24, added at run time)
 *                                └──────────────┐              │
 *                               <p>-sw (bridge) 10.202.10.0/24: router .1 (the servers' gateway),
 *                               lbk .1k (tunnel source), <p>-rd .5 (redis), <p>-rs1..3 .21–.23
 *
 * IPv6 beside it: fd00:202:N::/64 for the same links, the switch fd00:202:10::/64 with the same
 * host numbers. VIPs: 10.200.0.0/24 and fd00:200::/64 (lab.ts). BGP: the router is AS 65000, every
 * LB node AS 65001 (one session per family and node), hold 3 s / keepalive 1 s, and BFD at
 * 100 ms × 3 so a dead node's next hop goes in ~0.3 s. The real servers run `uvs decap` (this
 * kernel has no ipip module) and lab/servers.js.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { ConnectionsResponse } from '../control/api-types';
import { apiCall } from '../control/client';
import { hasCommand, keepLogs, Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sh, sleep, waitUvsd } from './lab';

const ROOT = join(__dirname, '..', '..');
export const ECMP_ROUTER = '10.202.10.1';
export const ECMP_REDIS = '10.202.10.5';
/** Kernel table uvsd keeps its announcement in and BIRD learns from (dataplane.announceTable). */
export const ANNOUNCE_TABLE = 4712;
export const MAX_NODES = 4;
const AS_ROUTER = 65000;
const AS_LB = 65001;
/** BGP timers: the smallest hold time RFC 4271 allows (3 s), keepalive a third of it. */
const BGP_TIMERS = 'hold time 3; keepalive time 1; connect delay time 1; connect retry time 1; error wait time 1, 2; bfd on;';
/** BFD: 100 ms probes, down after 3 missed — a silent node is withdrawn in ~0.3 s. */
const BFD = 'protocol bfd { interface "*" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }';

export class EcmpLab {
  readonly prefix: string;
  readonly dir: string;
  readonly ns: { cl: string; rt: string; sw: string; rd: string; rs: string[] };
  readonly clientAddr = '10.202.1.2';
  readonly clientAddr6 = 'fd00:202:1::2';
  readonly rsAddrs = ['10.202.10.21', '10.202.10.22', '10.202.10.23'];
  readonly rsAddrs6 = ['fd00:202:10::21', 'fd00:202:10::22', 'fd00:202:10::23'];
  private readonly procs = new Map<string, ChildProcess>();
  /** Nodes whose namespace exists (1-based). */
  readonly nodes = new Set<number>();
  /**
   * The router's multipath hash. 'l4' (the default here): policy 3 with the fields of the
   * 5-tuple (fib_multipath_hash_fields 0x0037: addresses, protocol, ports) — what policy 1
   * hashes on a real router, whose packets come off a wire. In a namespace lab policy 1 does
   * something else: a packet that crossed a veth still carries its sending socket's hash
   * (skb->l4_hash, from sk_txhash: random per socket, drawn again by TCP at each retransmission
   * timeout), and fib_multipath_hash() uses that instead of the 5-tuple (net/ipv4/route.c,
   * net/ipv6/route.c: "short-circuit if we already have L4 hash present"). Flows are still spread
   * per flow, but `ip route get` cannot tell where, and a flow whose packets time out is moved
   * again. 'policy1' keeps that, for a test that uvs does not depend on it.
   */
  hashPolicy: 'l4' | 'policy1' = 'l4';

  constructor(prefix: string) {
    if (!/^[a-z0-9]{1,8}$/.test(prefix)) throw new Error(`ECMP lab prefix must be 1–8 characters of a-z0-9, got ${JSON.stringify(prefix)}`);
    this.prefix = prefix;
    this.dir = join('/run/uvs-lab', prefix);
    this.ns = {
      cl: `${prefix}-cl`,
      rt: `${prefix}-rt`,
      sw: `${prefix}-sw`,
      rd: `${prefix}-rd`,
      rs: [1, 2, 3].map((i) => `${prefix}-rs${i}`),
    };
  }

  /** Whether BIRD 2 is installed (scripts/ensure-deps.sh installs the bird2 package). */
  static available(): boolean {
    return hasCommand('bird') && hasCommand('birdc');
  }

  nodeNs(k: number): string {
    return `${this.prefix}-lb${k}`;
  }
  socket(k: number): string {
    return join(this.dir, `lb${k}.sock`);
  }
  /** Node k's uplink address (v4, v6): its BGP session and the router's next hop for it. */
  uplink(k: number): [string, string] {
    return [`10.202.${20 + k}.2`, `fd00:202:${20 + k}::2`];
  }
  /** Node k's address on the server switch: its tunnel source. */
  tunnelSource(k: number): [string, string] {
    return [`10.202.10.${10 + k}`, `fd00:202:10::${10 + k}`];
  }

  private ip(ns: string, args: string[]): string {
    return sh('ip', ['-n', ns, ...args]);
  }
  private veth(a: string, nsA: string, b: string, nsB: string): void {
    sh('ip', ['link', 'add', a, 'netns', nsA, 'type', 'veth', 'peer', 'name', b, 'netns', nsB]);
  }
  private addr(ns: string, dev: string, cidr: string, cidr6: string): void {
    this.ip(ns, ['addr', 'add', cidr, 'dev', dev]);
    this.ip(ns, ['addr', 'add', cidr6, 'dev', dev, 'nodad']);
    this.ip(ns, ['link', 'set', dev, 'up']);
  }
  private newNs(ns: string): void {
    sh('ip', ['netns', 'add', ns]);
    this.ip(ns, ['link', 'set', 'lo', 'up']);
    // A node's links go down and up again: keep their IPv6 addresses meanwhile. No reverse-path
    // filter: the router sees the servers' direct replies (source: a VIP routed elsewhere).
    this.sysctl(ns, ['net.ipv6.conf.all.keep_addr_on_down=1', 'net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0']);
  }
  private sysctl(ns: string, kv: string[]): void {
    sh('ip', ['netns', 'exec', ns, 'sysctl', '-qw', ...kv]);
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
  private start(name: string, ns: string, cmd: string, args: string[]): ChildProcess {
    const log = openSync(join(this.dir, `${name}.log`), 'a');
    const p = this.spawn(ns, cmd, args, { stdio: ['ignore', log, log] });
    this.procs.set(name, p);
    return p;
  }
  private async kill(name: string, signal: NodeJS.Signals): Promise<void> {
    const p = this.procs.get(name);
    this.procs.delete(name);
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const done = new Promise((r) => p.once('exit', r));
    p.kill(signal);
    const t = setTimeout(() => p.kill('SIGKILL'), 10000);
    await done;
    clearTimeout(t);
  }

  /** Client, router (BIRD), switch, Redis, real servers, and nodes 1..n (namespaces and links only). */
  up(nodes = 3): void {
    if (!EcmpLab.available()) throw new Error('BIRD 2 is missing (apt-get install bird2, or scripts/ensure-deps.sh)');
    this.down();
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const p = this.prefix;
    const n = this.ns;
    for (const ns of [n.cl, n.rt, n.sw, n.rd, ...n.rs]) this.newNs(ns);
    this.veth(`${p}c0`, n.cl, `${p}c1`, n.rt);
    this.addr(n.cl, `${p}c0`, `${this.clientAddr}/24`, `${this.clientAddr6}/64`);
    this.addr(n.rt, `${p}c1`, '10.202.1.1/24', 'fd00:202:1::1/64');
    this.ip(n.cl, ['route', 'add', 'default', 'via', '10.202.1.1']);
    this.ip(n.cl, ['-6', 'route', 'add', 'default', 'via', 'fd00:202:1::1']);
    // The router forwards both families and hashes each flow's 5-tuple over the next hops.
    this.sysctl(n.rt, ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
    this.setHashPolicy(this.hashPolicy);
    this.ip(n.sw, ['link', 'add', 'br0', 'type', 'bridge']);
    this.ip(n.sw, ['link', 'set', 'br0', 'up']);
    this.switchPort(n.rt, `${p}rts`, 0, `${ECMP_ROUTER}/24`, 'fd00:202:10::1/64');
    this.switchPort(n.rd, `${p}rds`, 1, `${ECMP_REDIS}/24`, 'fd00:202:10::5/64');
    n.rs.forEach((ns, i) => {
      this.switchPort(ns, `${p}r${i + 1}s`, 2 + i, `${this.rsAddrs[i]}/24`, `${this.rsAddrs6[i]}/64`);
      // Direct return: the servers' replies go to the router, never back through an LB node.
      this.ip(ns, ['route', 'add', 'default', 'via', ECMP_ROUTER]);
      this.ip(ns, ['-6', 'route', 'add', 'default', 'via', 'fd00:202:10::1']);
    });
    for (let k = 1; k <= nodes; k++) this.addNode(k);
    writeFileSync(join(this.dir, 'bird-rt.conf'), this.routerBirdConfig());
    this.start('bird-rt', n.rt, 'bird', [
      '-f',
      '-c',
      join(this.dir, 'bird-rt.conf'),
      '-s',
      join(this.dir, 'bird-rt.ctl'),
      '-P',
      join(this.dir, 'bird-rt.pid'),
    ]);
    // Every node that may join (1..MAX_NODES) tunnels from its address on the server switch.
    const directors = Array.from({ length: MAX_NODES }, (_, k) => this.tunnelSource(k + 1))
      .flat()
      .join(',');
    n.rs.forEach((ns, i) => {
      this.start(`rs${i + 1}`, ns, process.execPath, [join(ROOT, 'dist', 'lab', 'servers.js'), '--name', `rs${i + 1}`]);
      this.start(`decap${i + 1}`, ns, process.execPath, [
        join(ROOT, 'dist', 'control', 'uvs.js'),
        'decap',
        '--vips',
        `${LAB_VIP},${LAB_VIP6}`,
        '--directors',
        directors,
      ]);
    });
    this.startRedis();
  }

  /** Sets the router's multipath hash (see hashPolicy); takes effect for the next packet. */
  setHashPolicy(p: 'l4' | 'policy1'): void {
    this.hashPolicy = p;
    const v = p === 'l4' ? ['3', '0x0037'] : ['1', null];
    for (const fam of ['ipv4', 'ipv6']) {
      this.sysctl(this.ns.rt, [
        `net.${fam}.fib_multipath_hash_policy=${v[0]}`,
        ...(v[1] ? [`net.${fam}.fib_multipath_hash_fields=${v[1]}`] : []),
      ]);
    }
  }

  private switchPort(ns: string, dev: string, i: number, cidr: string, cidr6: string): void {
    this.veth(`${this.prefix}s${i}`, this.ns.sw, dev, ns);
    this.ip(this.ns.sw, ['link', 'set', `${this.prefix}s${i}`, 'master', 'br0', 'up']);
    this.addr(ns, dev, cidr, cidr6);
  }

  /** Node k's namespace and links (uplink to the router, port on the switch); nothing runs yet. */
  addNode(k: number): void {
    if (k < 1 || k > MAX_NODES) throw new Error(`node ${k}: the lab has room for nodes 1–${MAX_NODES}`);
    const p = this.prefix;
    const ns = this.nodeNs(k);
    this.newNs(ns);
    this.veth(`${p}u${k}a`, this.ns.rt, `${p}u${k}b`, ns);
    this.addr(this.ns.rt, `${p}u${k}a`, `10.202.${20 + k}.1/24`, `fd00:202:${20 + k}::1/64`);
    const [up4, up6] = this.uplink(k);
    this.addr(ns, `${p}u${k}b`, `${up4}/24`, `${up6}/64`);
    const [ts4, ts6] = this.tunnelSource(k);
    this.switchPort(ns, `${p}l${k}s`, 10 + k, `${ts4}/24`, `${ts6}/64`);
    this.setDefaultRoutes(k);
    writeFileSync(join(this.dir, `bird-lb${k}.conf`), this.nodeBirdConfig(k));
    this.nodes.add(k);
  }

  private setDefaultRoutes(k: number): void {
    this.ip(this.nodeNs(k), ['route', 'replace', 'default', 'via', `10.202.${20 + k}.1`]);
    this.ip(this.nodeNs(k), ['-6', 'route', 'replace', 'default', 'via', `fd00:202:${20 + k}::1`]);
  }

  /** The router's BIRD: a session per family with every possible node; multipath into the kernel. */
  routerBirdConfig(): string {
    const peers: string[] = [];
    for (let k = 1; k <= MAX_NODES; k++) {
      const [a4, a6] = this.uplink(k);
      peers.push(
        `protocol bgp lb${k}v4 from lbs { neighbor ${a4} as ${AS_LB}; ipv4 { import where net ~ [ ${LAB_VIP_CIDR}+ ]; export none; }; }`,
      );
      peers.push(
        `protocol bgp lb${k}v6 from lbs { neighbor ${a6} as ${AS_LB}; ipv6 { import where net ~ [ ${LAB_VIP6_CIDR}+ ]; export none; }; }`,
      );
    }
    return [
      `# uvs ECMP lab router: BGP from every LB node, one multipath route per VIP range.`,
      `router id 10.202.1.1;`,
      `log "${join(this.dir, 'bird-rt.log')}" all;`,
      `protocol device { scan time 10; }`,
      `# merge paths: the best route and every equal one become one kernel route with a next hop each.`,
      `protocol kernel kernel4 { merge paths on; ipv4 { import none; export all; }; }`,
      `protocol kernel kernel6 { merge paths on; ipv6 { import none; export all; }; }`,
      BFD,
      `template bgp lbs { local as ${AS_ROUTER}; ${BGP_TIMERS} }`,
      ...peers,
      '',
    ].join('\n');
  }

  /** Node k's BIRD: learns uvsd's announcement table, announces it to the router. */
  nodeBirdConfig(k: number): string {
    const [a4] = this.uplink(k);
    return [
      `# uvs ECMP lab node lb${k}: announce what uvsd keeps in table ${ANNOUNCE_TABLE} (dataplane.announceTable).`,
      `router id ${a4};`,
      `log "${join(this.dir, `bird-lb${k}.log`)}" all;`,
      `protocol device { scan time 10; }`,
      `# learn: import the routes uvsd put there (proto static); they vanish with uvsd's device.`,
      `protocol kernel announce4 { kernel table ${ANNOUNCE_TABLE}; learn; scan time 2; ipv4 { import all; export none; }; }`,
      `protocol kernel announce6 { kernel table ${ANNOUNCE_TABLE}; learn; scan time 2; ipv6 { import all; export none; }; }`,
      BFD,
      `template bgp up { local as ${AS_LB}; ${BGP_TIMERS} }`,
      `protocol bgp upv4 from up { neighbor 10.202.${20 + k}.1 as ${AS_ROUTER}; ipv4 { import none; export where net ~ [ ${LAB_VIP_CIDR}+ ]; next hop self; }; }`,
      `protocol bgp upv6 from up { neighbor fd00:202:${20 + k}::1 as ${AS_ROUTER}; ipv6 { import none; export where net ~ [ ${LAB_VIP6_CIDR}+ ]; next hop self; }; }`,
      '',
    ].join('\n');
  }

  startBird(k: number): void {
    const b = `bird-lb${k}`;
    this.start(b, this.nodeNs(k), 'bird', [
      '-f',
      '-c',
      join(this.dir, `${b}.conf`),
      '-s',
      join(this.dir, `${b}.ctl`),
      '-P',
      join(this.dir, `${b}.pid`),
    ]);
  }

  /** birdc in the router's (k = 0) or node k's namespace. */
  birdc(k: number, args: string[]): string {
    const b = k === 0 ? 'bird-rt' : `bird-lb${k}`;
    return this.exec(k === 0 ? this.ns.rt : this.nodeNs(k), 'birdc', ['-s', join(this.dir, `${b}.ctl`), ...args], 10000);
  }

  // ── Redis ───────────────────────────────────────────────────────────────────────────────────
  startRedis(): void {
    this.start('redis', this.ns.rd, 'redis-server', [
      '--port',
      '6379',
      '--bind',
      ECMP_REDIS,
      '--save',
      '',
      '--appendonly',
      'no',
      '--protected-mode',
      'no',
    ]);
  }

  readonly clusterPorts = [7000, 7001, 7002];

  /** Three masters on the Redis namespace (slots spread by redis-cli --cluster create). */
  async startRedisCluster(timeoutMs = 20000): Promise<void> {
    for (const port of this.clusterPorts) {
      this.start(`redis${port}`, this.ns.rd, 'redis-server', [
        '--port',
        String(port),
        '--bind',
        ECMP_REDIS,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(this.dir, `nodes-${port}.conf`),
        '--save',
        '',
        '--appendonly',
        'no',
        '--protected-mode',
        'no',
      ]);
    }
    for (const port of this.clusterPorts) await this.waitRedis(port, timeoutMs);
    this.exec(
      this.ns.rd,
      'redis-cli',
      ['--cluster', 'create', ...this.clusterPorts.map((p) => `${ECMP_REDIS}:${p}`), '--cluster-yes'],
      30000,
    );
    const deadline = Date.now() + timeoutMs;
    while (!this.exec(this.ns.rd, 'redis-cli', ['-h', ECMP_REDIS, '-p', '7000', 'cluster', 'info']).includes('cluster_state:ok')) {
      if (Date.now() > deadline) throw new Error('the Redis cluster did not form');
      await sleep(200);
    }
  }

  async waitRedis(port = 6379, timeoutMs = 10000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        if (this.exec(this.ns.rd, 'redis-cli', ['-h', ECMP_REDIS, '-p', String(port), 'ping']).trim() === 'PONG') return;
      } catch {
        /* not yet */
      }
      if (Date.now() > deadline) throw new Error(`redis-server :${port} did not come up`);
      await sleep(100);
    }
  }

  /** Keys in the Redis (single server) or one cluster master. */
  redisKeys(port = 6379): number {
    return Number(this.exec(this.ns.rd, 'redis-cli', ['-h', ECMP_REDIS, '-p', String(port), 'dbsize']).trim());
  }

  /** Waits until every real server answers (echo and decap up) and Redis does. */
  async waitServers(timeoutMs = 15000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const a of this.rsAddrs) {
      for (;;) {
        try {
          this.exec(this.ns.rt, 'curl', ['-s', '-m', '1', `http://${a}:8080/`]);
          break;
        } catch {
          if (Date.now() > deadline) throw new Error(`real server ${a} did not come up`);
          await sleep(100);
        }
      }
    }
    await this.waitRedis(6379, timeoutMs);
  }

  // ── uvsd ────────────────────────────────────────────────────────────────────────────────────
  /**
   * uvsd's configuration for node k: the given services, tunnel sources of its own, the
   * announcement table, Redis (single server, or `cluster` for the three masters).
   */
  config(k: number, services: unknown[], o: { cluster?: boolean; redis?: boolean } = {}): Record<string, unknown> {
    const [ts4, ts6] = this.tunnelSource(k);
    const redisBase = { nodeId: `lb${k}`, countsInterval: 0.5, parkTimeout: 1 };
    const redis =
      o.redis === false
        ? {}
        : {
            redis: o.cluster
              ? { ...redisBase, cluster: this.clusterPorts.map((port) => ({ host: ECMP_REDIS, port })) }
              : { ...redisBase, url: `redis://${ECMP_REDIS}:6379` },
          };
    return {
      // One worker: four uvsd instances share the lab machine's cores with everything else.
      dataplane: {
        vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR],
        workers: 1,
        tableSize: 65536,
        tunnelSource: ts4,
        tunnelSource6: ts6,
        announceTable: ANNOUNCE_TABLE,
      },
      api: { socket: this.socket(k) },
      stateFile: join(this.dir, `lb${k}.state.json`),
      log: { level: 'info' },
      services,
      ...redis,
    };
  }

  async startUvsd(k: number, cfg: Record<string, unknown>, timeoutMs = 20000): Promise<ChildProcess> {
    const file = join(this.dir, `lb${k}.yaml`);
    writeFileSync(file, stringify(cfg));
    rmSync(this.socket(k), { force: true }); // a killed uvsd leaves its socket behind
    const child = this.start(`uvsd-lb${k}`, this.nodeNs(k), process.execPath, [join(ROOT, 'dist', 'control', 'uvsd.js'), '--config', file]);
    await waitUvsd(child, this.socket(k), join(this.dir, `uvsd-lb${k}.log`), `lb${k}`, timeoutMs);
    return child;
  }

  /** uvsd stops gracefully (SIGTERM): it withdraws, removes its device and routes, exits. */
  stopUvsd(k: number): Promise<void> {
    return this.kill(`uvsd-lb${k}`, 'SIGTERM');
  }

  /** Only uvsd dies (SIGKILL); the node, its links and BIRD live on. */
  killUvsd(k: number): Promise<void> {
    return this.kill(`uvsd-lb${k}`, 'SIGKILL');
  }

  uvsdRunning(k: number): boolean {
    const p = this.procs.get(`uvsd-lb${k}`);
    return !!p && p.exitCode === null && p.signalCode === null;
  }

  /**
   * Node k dies as a machine does: its links go down first (so not even a TCP FIN or RST of its
   * BGP sessions gets out), then uvsd and BIRD get SIGKILL. The router learns it from BFD.
   */
  async killNode(k: number): Promise<void> {
    for (const dev of [`${this.prefix}u${k}b`, `${this.prefix}l${k}s`]) this.ip(this.nodeNs(k), ['link', 'set', dev, 'down']);
    await Promise.all([this.kill(`uvsd-lb${k}`, 'SIGKILL'), this.kill(`bird-lb${k}`, 'SIGKILL')]);
  }

  /**
   * Node k hangs (a kernel stuck, a VM paused): uvsd and BIRD get SIGSTOP and the links stay up,
   * so nothing tells the router but BFD's silence. killNode() ends it.
   */
  freezeNode(k: number): void {
    for (const name of [`uvsd-lb${k}`, `bird-lb${k}`]) this.procs.get(name)?.kill('SIGSTOP');
  }

  /** A killed node's links come back (nothing runs on it until started again). */
  reviveNode(k: number): void {
    for (const dev of [`${this.prefix}u${k}b`, `${this.prefix}l${k}s`]) this.ip(this.nodeNs(k), ['link', 'set', dev, 'up']);
    this.setDefaultRoutes(k); // the link going down took them
  }

  /** Stops node k's uvsd and BIRD and deletes its namespace (a node leaving the lab for good). */
  async removeNode(k: number): Promise<void> {
    await Promise.all([this.kill(`uvsd-lb${k}`, 'SIGKILL'), this.kill(`bird-lb${k}`, 'SIGKILL')]);
    sh('ip', ['netns', 'del', this.nodeNs(k)], true);
    this.nodes.delete(k);
  }

  // ── the router's view ───────────────────────────────────────────────────────────────────────
  /** The nodes the router's kernel spreads the VIP range over now (sorted). */
  nexthops(v6 = false): number[] {
    const out = sh('ip', ['-n', this.ns.rt, '-j', ...(v6 ? ['-6'] : []), 'route', 'show', v6 ? LAB_VIP6_CIDR : LAB_VIP_CIDR], true);
    if (!out.trim()) return [];
    const routes = JSON.parse(out) as { gateway?: string; dev?: string; nexthops?: { gateway?: string; dev?: string }[] }[];
    const devs = routes.flatMap((r) => (r.nexthops ?? [r]).map((h) => h.dev ?? ''));
    return devs
      .map((d) => new RegExp(`^${this.prefix}u(\\d)a$`).exec(d))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort();
  }

  /** Waits until the router spreads the VIP range over exactly `want` nodes; returns the ms it took. */
  async waitNexthops(want: number[], v6 = false, timeoutMs = 30000): Promise<number> {
    const t0 = Date.now();
    const key = [...want].sort().join(',');
    for (;;) {
      const now = this.nexthops(v6).join(',');
      if (now === key) return Date.now() - t0;
      if (Date.now() - t0 > timeoutMs)
        throw new Error(`router next hops for ${v6 ? LAB_VIP6_CIDR : LAB_VIP_CIDR}: [${now}], wanted [${key}]`);
      await sleep(20);
    }
  }

  /**
   * The node the router's kernel sends each of these client flows to (source ports, TCP to
   * vip:port), asked of the kernel itself: `ip route get … iif … ipproto tcp sport … dport …`
   * runs the same multipath hash as a forwarded packet (with hashPolicy 'l4' only: see there).
   */
  nodeOfFlows(sports: number[], dport: number, v6 = false): number[] {
    if (sports.length === 0) return [];
    const vip = v6 ? LAB_VIP6 : LAB_VIP;
    const src = v6 ? this.clientAddr6 : this.clientAddr;
    const cmds = sports.map((s) => `route get ${vip} from ${src} iif ${this.prefix}c1 ipproto tcp sport ${s} dport ${dport}\n`).join('');
    const out = execFileSync('ip', ['-n', this.ns.rt, ...(v6 ? ['-6'] : []), '-force', '-batch', '-'], {
      input: cmds,
      encoding: 'utf8',
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    const re = new RegExp(`dev ${this.prefix}u(\\d)a`);
    return out
      .split('\n')
      .filter((l) => /^\S/.test(l) && l.includes(vip))
      .map((l) => Number(re.exec(l)?.[1] ?? 0));
  }

  /**
   * Which node carries each of these client flows (source ports) now, from the nodes themselves:
   * the one whose entry of its own (not a shadow) saw the flow's latest packet, within the last
   * 1.5 s (ESTABLISHED: a 900 s timer, re-armed by each packet). Waits until every port has one, at
   * most waitMs: a moved flow shows up once its next packet has been adopted. 0 = none.
   */
  async carriers(ks: number[], ports: number[], waitMs = 5000): Promise<number[]> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      // port → [node, expiresIn]: a flow that moved is still recent on the node it left for a
      // moment; the node that saw its latest packet carries it.
      const at = new Map<number, [number, number]>();
      for (const k of ks) {
        const r = await apiCall<ConnectionsResponse>(this.socket(k), 'GET', '/v1/connections?limit=100000');
        for (const x of r.body.connections ?? []) {
          if (x.shadow || x.state !== 'ESTABLISHED' || x.expiresIn < 900 - 1.5) continue;
          const port = Number(x.client.slice(x.client.lastIndexOf(':') + 1));
          if ((at.get(port)?.[1] ?? -1) < x.expiresIn) at.set(port, [k, x.expiresIn]);
        }
      }
      const out = ports.map((p) => at.get(p)?.[0] ?? 0);
      if (!out.includes(0) || Date.now() > deadline) return out;
      await sleep(200);
    }
  }

  /** Stops everything and deletes every namespace of the lab. Never throws. */
  down(): void {
    for (const p of this.procs.values()) {
      try {
        p.kill('SIGKILL');
      } catch {
        /* gone */
      }
    }
    this.procs.clear();
    keepLogs(this.dir, this.prefix);
    new Lab({ prefix: this.prefix }).down(); // same prefix rule: kills every process in the namespaces, deletes them
    if (existsSync(this.dir)) rmSync(this.dir, { recursive: true, force: true });
    this.nodes.clear();
  }
}
