/**
 * The dataplane as the control thread sees it: the TUN device with one queue per worker, the
 * routes and rules that bring traffic to it, and the worker pool.
 *
 *   - VIP ranges are routed to the device (main table), so clients' packets reach the workers.
 *   - Masq replies: uvs's nftables table (lb/nftables.ts) marks the real servers' replies and
 *     their ICMP errors with the into-device bit of dataplane.markMask (lb/marks.ts); sets keyed
 *     (RIP, protocol, port) hold the servers, so the node's rules do not grow with them. One rule
 *       fwmark BIT/BIT lookup <routeTable>   (priority rulePriority − 2; table: default dev <device>)
 *     sends them into the device. Packets parked for a Redis lookup are replayed through a raw
 *     socket whose packets carry the same bit, so the same rule sends them into the device
 *     whichever way they go: a client's packet for a VIP would come back by the main table too,
 *     but a real server's reply, addressed to the client, would be forwarded to the client
 *     un-NATed (and the client's RST for it would kill the server's socket — the flow the lookup
 *     was to adopt).
 *       iif <device> lookup main   (priority rulePriority − 1)
 *     routes whatever leaves the device by the main table. Without nftables (no `nft`, no
 *     nf_tables in the kernel) uvsd falls back, with a warning, to one rule per masq real server
 *     at rulePriority (`from RIP ipproto P sport PORT lookup <routeTable>`, and one for its ICMP)
 *     — the old way, whose cost grows with the servers. IPv6 gets the same routes and rules
 *     (`ip -6`) when a VIP range or pool is IPv6.
 *   - Every dataplane.resyncInterval seconds uvsd checks that its routes, rules and table are in
 *     place (another tool's `nft flush ruleset`, `ip rule flush`, a deleted route) and restores
 *     what is missing, counted (uvs_node_repairs_total) and logged.
 *   - Behind both, blackholes with the worst metric (VIP ranges in main, default in <routeTable>):
 *     when a killed uvsd's device vanishes they drop its traffic rather than forward it un-NATed.
 *   - rp_filter is off on the device (packets come out of it with the clients' source addresses,
 *     and tunnelled ones with this node's own: accept_local) and IPv4 forwarding is switched on
 *     (IPv6 forwarding too with IPv6 services), as an IPVS director needs. (A host-wide
 *     net.ipv4.conf.all.rp_filter=1 still wins: the kernel uses the stricter of "all" and the
 *     device's setting.)
 *   - The queues are opened with the kernel's offloads (dataplane.offload): TCP crosses the device
 *     as 64 KB GSO super-packets, checksums left partial.
 *   - The device picks each packet's queue with uvs's steering program (dataplane.steering,
 *     lb/native/steer.c, docs/steering.md): keyed on the client's endpoint, so both directions of
 *     a connection reach one worker, in order; its 64-bit hash key is drawn at each start.
 *
 * Everything is removed on stop(); cleanup() removes leftovers of a daemon that died (the device
 * itself vanishes with the last queue fd, so only routes and rules can be left).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import type { Logger } from 'pino';
import { runBackground, type Ran } from './background';
import { DataplaneError } from './errors';
import { formatCidr, formatIPv6, parseCidr, parseCidr6 } from '../net/addr';
import { hexMark, intoDeviceBit } from './marks';
import {
  elementLines,
  nftCmd,
  nftRun,
  nftTableName,
  removeTableScript,
  ruleKey,
  tableComplete,
  tableScript,
  tableShape,
  type ReplyRule,
} from './nftables';
import { MAX_OUT } from './verdict';
import { steeringKey, steeringTable } from './steering';
import { snapshotDelta, type CompiledService, type Snapshot } from './snapshot';
import { tunAddon, type IoMode, type IoPath, type SteeringMode, type SteeringPath } from './tun';
import { CTL_SNAPSHOT_VERSION, CTL_WORDS, type WorkerInit } from './worker';

export interface DataplaneOptions {
  device: string;
  vipCidrs: string[];
  workers: number;
  mtu: number;
  routeTable: number;
  rulePriority: number;
  /** Bits of the packet mark uvs may use (lb/marks.ts): the lowest routes a packet into the device. */
  markMask: number;
  /** Seconds between checks of the routes, rules and nftables table (repairs). */
  resyncInterval: number;
  batch: number;
  maxRealServers: number;
  /** Full-NAT pool addresses: routed to the device so the real servers' replies come back. */
  fullnatAddrs: string[];
  /**
   * Kernel offloads on the device (IFF_VNET_HDR, TUNSETOFFLOAD csum + TSO): TCP crosses it as
   * GSO super-packets of up to 64 KB with checksums left to the device.
   */
  offload: boolean;
  /** Worker I/O path (`dataplane.io`): auto = io_uring where the kernel allows it, else poll. */
  io: IoMode;
  /** Queue steering (`dataplane.steering`, docs/steering.md): auto = uvs's eBPF program where the kernel allows it. */
  steering: SteeringMode;
}

/** Bytes of a worker's packet slot: a 64 KB super-packet and its virtio header with offloads. */
export function slotBytes(o: Pick<DataplaneOptions, 'offload' | 'mtu'>): number {
  return o.offload ? 65536 + 16 : Math.max(2048, o.mtu + 64);
}

export interface SharedRegions {
  table: SharedArrayBuffer;
  realServers: SharedArrayBuffer;
  sched: SharedArrayBuffer;
  /** One per worker. */
  counters: SharedArrayBuffer[];
  /** One per worker (layout.ts RG_*). */
  rings: SharedArrayBuffer[];
  /** Flow sampling, shared by all workers (layout.ts CAP_*). */
  capture: SharedArrayBuffer;
}

export type { ReplyRule } from './nftables';

interface WorkerSlot {
  id: number;
  fd: number;
  /** Control words shared with the worker (snapshot version). */
  ctl: Int32Array;
  /** Our end of the worker's snapshot channel. */
  port: MessagePort | null;
  worker: Worker | null;
  restarts: number;
  ready: boolean;
  /** The I/O path the running worker reported (null until it is ready). */
  io: IoPath | null;
}

export function ip(args: string[], allowFail = false): string {
  try {
    return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (allowFail) return '';
    const err = e as { stderr?: string; message: string };
    throw new DataplaneError('UVS_ERR_DATAPLANE_SETUP', `ip ${args.join(' ')}: ${(err.stderr || err.message).trim()}`);
  }
}

/** Runs `ip`; whether it succeeded (no output, no error). */
function ipOk(args: string[]): boolean {
  try {
    execFileSync('ip', args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function ruleArgs(r: ReplyRule, o: DataplaneOptions): string[] {
  const v6 = r.addr.includes(':');
  const ports = r.proto === 'icmp' ? [] : ['sport', String(r.port)];
  const proto = r.proto === 'icmp' && v6 ? 'ipv6-icmp' : r.proto;
  return [
    ...(v6 ? ['-6'] : []),
    'rule',
    'add',
    'pref',
    String(o.rulePriority),
    'from',
    `${r.addr}/${v6 ? 128 : 32}`,
    'ipproto',
    proto,
    ...ports,
    'lookup',
    String(o.routeTable),
  ];
}

/** `ip rule del` for what ruleArgs added. */
function ruleDelArgs(r: ReplyRule, o: DataplaneOptions): string[] {
  return delArgs(ruleArgs(r, o));
}

/** The `ip rule del` for an `ip rule add`'s arguments: the same selectors, so only that rule goes. */
function delArgs(add: string[]): string[] {
  const args = [...add];
  args[args.indexOf('add')] = 'del';
  return args;
}

/**
 * Packets that leave the device (forwarded, translated or passed through by a worker) are routed
 * by the main table, ahead of the reply rules: ICMP a worker lets through unchanged must not be
 * sent back into the device by the `from RIP ipproto icmp` rule it came in by.
 */
function deviceRuleArgs(o: Pick<DataplaneOptions, 'device' | 'rulePriority'>, family: 4 | 6): string[] {
  return [...(family === 6 ? ['-6'] : []), 'rule', 'add', 'pref', String(o.rulePriority - 1), 'iif', o.device, 'lookup', 'main'];
}

/**
 * Packets with the into-device bit go into the device, whatever their destination: masq replies
 * (marked by uvs's nftables table) and packets replayed after a Redis lookup (inject's raw socket).
 */
function intoDeviceRuleArgs(o: Pick<DataplaneOptions, 'routeTable' | 'rulePriority' | 'markMask'>, family: 4 | 6): string[] {
  const bit = hexMark(intoDeviceBit(o.markMask));
  return [
    ...(family === 6 ? ['-6'] : []),
    'rule',
    'add',
    'pref',
    String(o.rulePriority - 2),
    'fwmark',
    `${bit}/${bit}`,
    'lookup',
    String(o.routeTable),
  ];
}

/** How an address is routed, for its MTU: the device, and the route's own mtu metric if it has one. */
export interface RouteMtu {
  dev: string;
  /** The route's mtu metric (fixed), or null: the device's MTU applies. */
  routeMtu: number | null;
  mtu: number;
}

/**
 * Runs `ip [args] -force -batch -` on these lines without blocking the caller: a spawn, not
 * execFileSync, and one process for all the lines (8192 reply rules, one execFileSync each, held
 * the control thread 28 s). -force goes on past a failed line; its error is in stderr.
 */
export function ipBatch(args: string[], lines: string[]): Promise<Ran> {
  return runBackground('ip', [...args, '-force', '-batch', '-'], lines.map((l) => `${l}\n`).join(''));
}

/**
 * The route to each address, as the kernel's forwarding takes its MTU (the route's own mtu
 * metric, else its device's MTU): one `ip -batch` for all of them. Addresses it cannot route are
 * left out. This starts `ip` (without waiting for it); deviceMtu() re-reads a device's MTU
 * without a process.
 */
export async function routeMtus(addrs: string[]): Promise<Map<string, RouteMtu>> {
  const out = new Map<string, RouteMtu>();
  if (addrs.length === 0) return out;
  // Some addresses may have no route: their lines fail, the others' answers are in stdout.
  const text = (
    await ipBatch(
      ['-j'],
      addrs.map((a) => `route get ${a}`),
    )
  ).stdout;
  const lines = text.split('\n');
  const devices = new Map<string, number>(); // one sysfs read per device, not per address
  for (let i = 0; i < lines.length; i++) {
    // 100,000 servers are 100,000 answers: the control thread answers between thousands.
    if (i % 2000 === 1999) await new Promise((r) => setImmediate(r));
    const line = lines[i]!;
    if (!line.startsWith('[')) continue;
    for (const r of JSON.parse(line) as { dst: string; dev?: string; metrics?: { mtu?: number }[] }[]) {
      if (!r.dev) continue;
      const routeMtu = r.metrics?.find((x) => x.mtu !== undefined)?.mtu ?? null;
      let dev = devices.get(r.dev);
      if (dev === undefined) devices.set(r.dev, (dev = deviceMtu(r.dev)));
      const mtu = routeMtu ?? dev;
      if (mtu) out.set(r.dst, { dev: r.dev, routeMtu, mtu });
    }
  }
  return out;
}

/** Every how many checks of the table its rules are listed too (dataplane.resyncInterval each: about a minute at the default). */
const FULL_CHECK_EVERY = 12;

/** Services per message of a snapshot delta: 10,000 changed services cloned at once held the control thread ~130 ms. */
const DELTA_PART = 500;

/** A device's MTU from sysfs (no fork: cheap enough to poll), or 0 if it is gone. */
export function deviceMtu(dev: string): number {
  try {
    return Number(readFileSync(`/sys/class/net/${dev}/mtu`, 'utf8').trim()) || 0;
  } catch {
    return 0;
  }
}

export class Dataplane {
  readonly opts: DataplaneOptions;
  private readonly log: Logger;
  private readonly regions: SharedRegions;
  private snapshot: Snapshot;
  private readonly slots: WorkerSlot[] = [];
  /** The path workers are started on (decided once at start from `io` and the kernel). */
  private ioPath: IoPath = 'poll';
  /** How the device picks a packet's queue, and why not ebpf under auto (decided once at start). */
  private steer: { path: SteeringPath; reason: string | null } = { path: 'automq', reason: null };
  /** The program's 64-bit key (the workers' full-NAT port choice needs it). */
  private steerK0 = 0;
  private steerK1 = 0;
  private rules = new Map<string, ReplyRule>();
  /** Whether IPv6 routes and rules are kept too (an IPv6 VIP range or pool address). */
  private v6 = false;
  /** The into-device bit of the mark (lb/marks.ts). */
  private readonly bit: number;
  /**
   * How masq replies reach the device: uvs's nftables table (sets), or — where nft or the
   * kernel's nf_tables is missing — one policy rule per server (the cost grows with them).
   */
  private replyPath: { path: 'nftables' | 'rules'; reason: string | null } = { path: 'nftables', reason: null };
  /** The table must be rebuilt with every element (a batch was refused: someone changed it). */
  private nftStale = false;
  /** What the periodic check found missing and restored (uvs_node_repairs_total). */
  private readonly repairCounts = { nftables: 0, rules: 0, routes: 0 };
  private resyncTimer: NodeJS.Timeout | null = null;
  private stopping = false;
  /** Called when a worker died and was restarted (id, reason). */
  onRestart: ((id: number, reason: string) => void) | null = null;

  constructor(opts: DataplaneOptions, regions: SharedRegions, snapshot: Snapshot, log: Logger) {
    this.opts = opts;
    this.regions = regions;
    this.snapshot = snapshot;
    this.log = log;
    this.bit = intoDeviceBit(opts.markMask);
  }

  /** Creates the device and its queues, routes and sysctls, then starts the workers. */
  async start(): Promise<void> {
    const o = this.opts;
    const tun = tunAddon();
    // A uvsd that was killed (SIGKILL, crash) left its policy rules and reply table behind; the
    // device went with its last fd. Start from a clean slate, as `uvsd --cleanup` would.
    // Its blackhole in the reply table outlives it (and a release before nftables left a rule per server).
    const left = ip(['route', 'show', 'table', String(o.routeTable)], true) + ip(['rule', 'show', 'pref', String(o.rulePriority)], true);
    if (left.trim() !== '') {
      this.log.warn({ rulePriority: o.rulePriority, routeTable: o.routeTable }, 'removing rules and routes a previous uvsd left behind');
    }
    cleanupRouting(o);
    this.ioPath = this.chooseIo();
    for (let i = 0; i < o.workers; i++) {
      let fd: number;
      try {
        fd = tun.openQueue(o.device, o.offload);
      } catch (e) {
        this.closeQueues();
        throw new DataplaneError('UVS_ERR_TUN', `cannot open queue ${i} of ${o.device}: ${(e as Error).message}`);
      }
      this.slots.push({
        id: i,
        fd,
        ctl: new Int32Array(new SharedArrayBuffer(CTL_WORDS * 4)),
        port: null,
        worker: null,
        restarts: 0,
        ready: false,
        io: null,
      });
    }
    try {
      this.steer = this.chooseSteering(this.slots[0]!.fd);
      ip(['link', 'set', 'dev', o.device, 'mtu', String(o.mtu), 'up']);
      // A tunnelled super-packet is cut into segments by the worker, at most MAX_OUT of them:
      // the kernel keeps super-packets for the device within that (it segments larger ones).
      if (o.offload) ip(['link', 'set', 'dev', o.device, 'gso_max_segs', String(MAX_OUT)]);
      writeFileSync(`/proc/sys/net/ipv4/conf/${o.device}/rp_filter`, '0');
      // Replayed (adopted) packets leave through the device they came in on: no ICMP redirects.
      writeFileSync(`/proc/sys/net/ipv4/conf/${o.device}/send_redirects`, '0');
      // IPIP-tunnelled packets come out of the device with this node's own address as source.
      writeFileSync(`/proc/sys/net/ipv4/conf/${o.device}/accept_local`, '1');
      writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
      const v6 = [...o.vipCidrs, ...o.fullnatAddrs].some((a) => a.includes(':'));
      if (v6) {
        // IPv6 services: the device needs IPv6 and the node must forward it, as an IPVS director.
        writeFileSync(`/proc/sys/net/ipv6/conf/${o.device}/disable_ipv6`, '0');
        writeFileSync('/proc/sys/net/ipv6/conf/all/forwarding', '1');
      }
      this.v6 = v6;
      // A uvsd that dies (SIGKILL, crash) takes the device and every route through it along,
      // while the node and its rules live on until keepalived moves the addresses (up to a
      // second: its track script runs once a second). The blackholes routingPlan adds — with
      // the worst metric, shadowed while the device routes exist — drop that traffic instead of
      // forwarding it: a masq reply would reach the client un-NATed, from the real server's
      // address, and the client's RST for it would kill the flow on the server — the flow the
      // other node is about to adopt; VIP traffic would loop between this node and its router.
      for (const args of routingPlan(o, v6)) ip(args);
      // Without them (no CAP_NET_RAW, no IPv6) forwarding works; a packet found by a Redis lookup
      // is not replayed (counted: redis.replayFailed; its retransmission finds the installed entry).
      for (const fam of v6 ? ([4, 6] as const) : ([4] as const)) {
        try {
          if (fam === 4) this.send4 = tun.openSend(4, this.bit);
          else this.send6 = tun.openSend(6, this.bit);
        } catch (e) {
          this.log.warn({ err: (e as Error).message, family: fam }, `no IPv${fam} raw socket to replay packets a Redis lookup found`);
        }
      }
      await this.chooseReplyPath();
    } catch (e) {
      this.closeQueues();
      throw e;
    }
    noMemoryReducer();
    await Promise.all(this.slots.map((s) => this.spawn(s)));
    this.resyncTimer = setInterval(() => void this.resync(), Math.round(o.resyncInterval * 1000));
    this.resyncTimer.unref();
    this.log.info({ device: o.device, queues: o.workers, vipCidrs: o.vipCidrs }, 'dataplane up');
  }

  /**
   * uvs's steering program (lb/native/steer.c) where it is asked for or allowed (auto): a bpf()
   * the process may not make (seccomp, no CAP_BPF/CAP_SYS_ADMIN) or a kernel before 4.16 refuses
   * it, and auto then leaves the device's own steering. A forced ebpf that cannot load is an
   * error. The program lives with the device; a restarted worker reads the same queue fd.
   */
  private chooseSteering(fd: number): { path: SteeringPath; reason: string | null } {
    const mode = this.opts.steering;
    if (mode === 'automq') {
      this.log.info({ steering: 'automq', mode }, "queue steering: the device's flow table (dataplane.steering: automq)");
      return { path: 'automq', reason: null };
    }
    const k = randomBytes(8);
    const key = steeringKey(k.readUInt32BE(0), k.readUInt32BE(4), this.opts.vipCidrs, this.opts.fullnatAddrs);
    const why = tunAddon().steerAttach(fd, key.k0, key.k1, steeringTable(key));
    if (why === '') {
      this.steerK0 = key.k0;
      this.steerK1 = key.k1;
      this.log.info({ steering: 'ebpf', mode }, "queue steering: eBPF program, keyed on the client's endpoint");
      return { path: 'ebpf', reason: null };
    }
    if (mode === 'ebpf')
      throw new DataplaneError('UVS_ERR_DATAPLANE_SETUP', `dataplane.steering is ebpf but the program cannot be attached: ${why}`);
    this.log.warn({ steering: 'automq', mode, reason: why }, "queue steering: eBPF program refused, using the device's flow table");
    return { path: 'automq', reason: why };
  }

  /** How the device picks each packet's queue (GET /v1/stats, uvs_dataplane_steering). */
  steering(): { readonly path: SteeringPath; readonly reason: string | null } {
    return this.steer;
  }

  /**
   * io_uring where it is asked for or allowed (auto) and this process may use it: seccomp
   * profiles (Docker's default), kernel.io_uring_disabled and kernels before 6.7 (multishot read)
   * refuse it, and auto then falls back to poll. A forced io_uring that cannot run is an error.
   */
  private chooseIo(): IoPath {
    const mode = this.opts.io;
    if (mode === 'poll') {
      this.log.info({ io: 'poll', mode }, 'worker I/O: poll + read + write (dataplane.io: poll)');
      return 'poll';
    }
    const why = tunAddon().uringProbe();
    if (why === '') {
      this.log.info({ io: 'io_uring', mode }, 'worker I/O: io_uring');
      return 'io_uring';
    }
    if (mode === 'io_uring')
      throw new DataplaneError('UVS_ERR_DATAPLANE_SETUP', `dataplane.io is io_uring but this kernel or process does not allow it: ${why}`);
    this.log.warn({ io: 'poll', mode, reason: why }, 'worker I/O: io_uring unavailable, using poll + read + write');
    return 'poll';
  }

  private spawn(s: WorkerSlot): Promise<void> {
    const { port1, port2 } = new MessageChannel();
    s.port?.close();
    s.port = port1;
    Atomics.store(s.ctl, CTL_SNAPSHOT_VERSION, this.snapshot.version);
    const init: WorkerInit = {
      id: s.id,
      fd: s.fd,
      table: this.regions.table,
      realServers: this.regions.realServers,
      sched: this.regions.sched,
      counters: this.regions.counters[s.id]!,
      ring: this.regions.rings[s.id]!,
      capture: this.regions.capture,
      snapshot: this.snapshot,
      batch: this.opts.batch,
      slot: slotBytes(this.opts),
      offload: this.opts.offload,
      maxRealServers: this.opts.maxRealServers,
      snapshotPort: port2,
      ctl: s.ctl.buffer as SharedArrayBuffer,
      io: this.ioPath,
      steer: this.steer.path === 'ebpf' ? { k0: this.steerK0, k1: this.steerK1, queues: this.slots.length } : null,
    };
    const w = new Worker(join(__dirname, 'worker.js'), { workerData: init, transferList: [port2] });
    s.worker = w;
    s.ready = false;
    s.io = null;
    return new Promise((resolve) => {
      let settled = false;
      w.on('message', (m: { type: string; errno?: number; io?: IoPath; ioReason?: string }) => {
        if (m.type === 'ready') {
          s.ready = true;
          s.io = m.io ?? 'poll';
          if (s.io !== this.ioPath)
            this.log.warn({ worker: s.id, io: s.io, reason: m.ioReason }, 'worker could not set up io_uring; it runs on poll');
          if (!settled) {
            settled = true;
            resolve();
          }
        } else if (m.type === 'readError') {
          this.log.error({ worker: s.id, errno: m.errno }, 'device read failed');
        }
      });
      w.on('error', (err) => {
        this.log.error({ worker: s.id, err: err.message }, 'worker failed');
      });
      w.on('exit', (code) => {
        if (s.worker !== w) return;
        s.worker = null;
        s.ready = false;
        s.io = null;
        if (!settled) {
          settled = true;
          resolve();
        }
        if (this.stopping) return;
        // The worker held locks only inside tiny critical sections; release any it died in, then
        // start a fresh one on the same queue. The table lives here, so its flows continue.
        const released = this.releaseLocks?.(s.id + 1) ?? 0;
        s.restarts++;
        this.log.warn({ worker: s.id, code, restarts: s.restarts, locksReleased: released }, 'worker exited; restarting');
        this.onRestart?.(s.id, `exit code ${code}`);
        void this.spawn(s);
      });
    });
  }

  /** Set by the owner: releases shared-memory locks held by a dead worker's owner id. */
  releaseLocks: ((owner: number) => number) | null = null;

  /**
   * A new snapshot to the workers, one worker per step: each postMessage clones what changed since the last
   * publication (lb/snapshot.ts SnapshotDelta; a whole snapshot took 130 ms at 10,000 services
   * × 10 servers), so the caller may let the event loop turn between workers (control/slices.ts).
   * A worker started meanwhile gets the new snapshot whole.
   */
  *publishSteps(snapshot: Snapshot): Generator<void> {
    // Workers hold the last published snapshot: they get what changed (a worker started meanwhile
    // gets the whole new one, and the delta again, which changes nothing: its values are absolute).
    const delta = snapshotDelta(this.snapshot, snapshot);
    this.snapshot = snapshot;
    // Many changed services go in parts (each clone a slice's worth), the last with the rest; the
    // worker applies them together when the version word moves (lb/worker.ts).
    const parts: CompiledService[][] = [];
    for (let i = 0; i + DELTA_PART < delta.set.length; i += DELTA_PART) parts.push(delta.set.slice(i, i + DELTA_PART));
    const last = { ...delta, set: delta.set.slice(parts.length * DELTA_PART) };
    for (const s of [...this.slots]) {
      for (const set of parts) {
        if (!s.worker || !s.port) break;
        s.port.postMessage({ ...last, set, clear: [], more: true });
        yield;
      }
      if (!s.worker || !s.port) continue;
      s.port.postMessage(last);
      Atomics.store(s.ctl, CTL_SNAPSHOT_VERSION, snapshot.version);
      yield;
    }
  }

  /**
   * uvs's nftables table where nft and the kernel allow it, else one rule per server (logged: the
   * node's rules then grow with the real servers, issue 37).
   */
  private async chooseReplyPath(): Promise<void> {
    const r = await nftRun(tableScript(this.opts.device, this.bit, []));
    if (r.code === 0) {
      this.replyPath = { path: 'nftables', reason: null };
      this.log.info({ table: `inet ${nftTableName(this.opts.device)}`, mark: hexMark(this.bit) }, 'masq replies: nftables sets, one rule');
      return;
    }
    const reason = (r.stderr.trim().split('\n')[0] ?? '') || `nft exited ${r.code}`;
    this.replyPath = { path: 'rules', reason };
    this.log.warn({ reason }, 'masq replies: no nftables; one policy rule per real server (their cost grows with the servers)');
  }

  /** How masq replies reach the device, and why not nftables (GET /v1/stats). */
  replies(): { readonly path: 'nftables' | 'rules'; readonly reason: string | null } {
    return this.replyPath;
  }

  /** What the periodic check restored so far, by kind (GET /v1/stats node.repairs, uvs_node_repairs_total). */
  repairs(): { readonly nftables: number; readonly rules: number; readonly routes: number } {
    return this.repairCounts;
  }

  /** The reply-element changes and checks not yet made, in order (changeReplyRules and resync chain them). */
  private ruleJob: Promise<void> = Promise.resolve();

  /**
   * Makes the marked masq replies exactly `wanted` (the difference from what is held): stop()
   * and tests; the daemon hands changeReplyRules the model's changes.
   */
  syncReplyRules(wanted: ReplyRule[]): Promise<void> {
    const next = new Map(wanted.map((r) => [ruleKey(r), r]));
    const gone: ReplyRule[] = [];
    const added: ReplyRule[] = [];
    for (const [k, r] of this.rules) if (!next.has(k)) gone.push(r);
    for (const [k, r] of next) if (!this.rules.has(k)) added.push(r);
    return this.changeReplyRules({ added, gone });
  }

  /**
   * The marked masq replies change by these elements — the model's replyChanges(), so a change
   * costs its own size, not the number of servers — as one `nft -f -` transaction (or, without
   * nftables, one `ip -batch` per family), after the changes already under way. Resolves once
   * they are made; a change the kernel refuses is logged, and the table is rebuilt.
   */
  changeReplyRules(c: { added: ReplyRule[]; gone: ReplyRule[] }): Promise<void> {
    const gone = c.gone.filter((r) => this.rules.delete(ruleKey(r)));
    const added = c.added.filter((r) => {
      const k = ruleKey(r);
      if (this.rules.has(k)) return false;
      this.rules.set(k, r);
      return true;
    });
    if (gone.length + added.length === 0) return this.ruleJob;
    this.ruleJob = this.ruleJob.then(() =>
      this.replyPath.path === 'nftables' ? this.nftChange(gone, added) : this.ruleChange(gone, added),
    );
    return this.ruleJob;
  }

  private async nftChange(gone: ReplyRule[], added: ReplyRule[]): Promise<void> {
    if (this.nftStale) return; // the next check rebuilds the table from this.rules
    const t = nftTableName(this.opts.device);
    const r = await nftRun([...elementLines('delete', t, gone), ...elementLines('add', t, added), ''].join('\n'));
    if (r.code === 0) return;
    this.nftStale = true;
    this.log.error({ errors: r.stderr.trim().split('\n').slice(0, 5) }, 'masq replies: nft refused a change; rebuilding the table');
    void this.resync();
  }

  private async ruleChange(gone: ReplyRule[], added: ReplyRule[]): Promise<void> {
    const lines: Record<4 | 6, string[]> = { 4: [], 6: [] };
    const line = (args: string[]) => (args[0] === '-6' ? lines[6].push(args.slice(1).join(' ')) : lines[4].push(args.join(' ')));
    for (const r of gone) line(ruleDelArgs(r, this.opts));
    for (const r of added) line(ruleArgs(r, this.opts));
    for (const fam of [4, 6] as const) {
      if (lines[fam].length === 0) continue;
      const r = await ipBatch([`-${fam}`], lines[fam]);
      // A delete of a rule already gone is fine (as before, allowFail); an add that failed is not.
      const failed = r.stderr
        .split('\n')
        .filter((l) => l.trim() && !/No such file or directory|Command failed/.test(l))
        .slice(0, 5);
      if (failed.length) this.log.error({ family: fam, errors: failed }, 'masq reply rules: ip refused some changes');
    }
  }

  private resyncing = false;

  /**
   * Checks that the routes, rules and nftables table are in place and restores what is missing
   * (another tool's `nft flush ruleset`, `ip rule flush`, a deleted route): each kind counted and
   * logged. Asynchronous (`ip -j`, `nft -t`, no element listing), chained with the element
   * changes so a rebuild never races one. Elements deleted one by one by someone else are not
   * seen (the table is listed without them).
   */
  resync(): Promise<void> {
    if (this.resyncing || this.stopping) return this.resyncJob;
    this.resyncing = true;
    const full = this.nftStale || ++this.resyncTicks % FULL_CHECK_EVERY === 0;
    this.resyncJob = (async () => {
      try {
        await this.checkRouting();
        if (this.replyPath.path === 'nftables') await this.checkTable(full);
      } catch (e) {
        this.log.error({ err: (e as Error).message }, 'checking routes, rules and the nftables table failed');
      } finally {
        this.resyncing = false;
      }
    })();
    return this.resyncJob;
  }

  private resyncJob: Promise<void> = Promise.resolve();
  private resyncTicks = 0;

  /**
   * Whether the table is there. Cheap (every check): its two chains and four sets by name — `nft`
   * lists those without a set's elements. Full (every FULL_CHECK_EVERY checks, and when a change
   * was refused): the chains' rules too, which costs nft about 1 s at 100,000 servers (it loads
   * every element to print a rule naming a set). So a table, chain or set removed is restored
   * within one interval, a chain flushed of its rules within FULL_CHECK_EVERY. Only the rebuild
   * waits in line with the element changes: a check never holds a configuration change up.
   */
  private async checkTable(full: boolean): Promise<void> {
    const o = this.opts;
    const t = nftTableName(o.device);
    if (!this.nftStale) {
      let ok: boolean;
      if (full) {
        const l = await nftRun(`list table inet ${t}\n`, ['-t']);
        ok = l.code === 0 && tableComplete(l.stdout, o.device, this.bit);
      } else {
        const [chains, sets] = await Promise.all([nftCmd(['-j', 'list', 'chains', 'inet']), nftCmd(['-j', '-t', 'list', 'sets', 'inet'])]);
        ok = chains.code === 0 && sets.code === 0 && tableShape(chains.stdout, sets.stdout, t);
      }
      if (this.stopping || ok) return;
    }
    if (this.stopping) return;
    this.ruleJob = this.ruleJob.then(async () => {
      if (this.stopping) return;
      const r = await nftRun(tableScript(o.device, this.bit, this.rules.values()));
      if (r.code !== 0) {
        this.log.error({ errors: r.stderr.trim().split('\n').slice(0, 5) }, 'masq replies: cannot rebuild the nftables table');
        return;
      }
      this.nftStale = false;
      this.repairCounts.nftables++;
      this.log.warn({ table: `inet ${t}`, elements: this.rules.size }, 'restored the nftables table someone removed or changed');
    });
    await this.ruleJob;
  }

  private async checkRouting(): Promise<void> {
    const o = this.opts;
    for (const fam of this.v6 ? ([4, 6] as const) : ([4] as const)) {
      const f = `-${fam}`;
      const want = routingPlan(o, fam === 6).filter((a) => (a[0] === '-6') === (fam === 6));
      const [rulesOut, tableOut, mainOut, holesOut] = await Promise.all([
        ipBatch(['-j', f], ['rule show']),
        ipBatch(['-j', f], [`route show table ${o.routeTable}`]),
        ipBatch(['-j', f], [`route show table main dev ${o.device}`]),
        ipBatch(['-j', f], ['route show table main type blackhole']),
      ]);
      if (this.stopping) return;
      const rules = parseJson(rulesOut.stdout);
      const bit = hexMark(this.bit);
      const haveInto = rules.some(
        (r) => r.priority === o.rulePriority - 2 && r.fwmark === bit && r.fwmask === bit && r.table === String(o.routeTable),
      );
      const haveIif = rules.some((r) => r.priority === o.rulePriority - 1 && r.iif === o.device && r.table === 'main');
      const missingRules = want.filter(
        (a) => a.includes('rule') && ((a.includes('fwmark') && !haveInto) || (a.includes('iif') && !haveIif)),
      );
      const table = parseJson(tableOut.stdout);
      // The kernel's own routes on the device (IPv6 link-local, multicast) are not uvs's.
      const main = parseJson(mainOut.stdout).filter((r) => r.protocol !== 'kernel' && r.type !== 'multicast');
      const holes = parseJson(holesOut.stdout).filter((r) => r.metric === Number(BLACKHOLE_METRIC));
      const plan = expectedRoutes(o, fam);
      const routesOk =
        table.some((r) => r.dst === 'default' && r.dev === o.device) &&
        table.some((r) => r.dst === 'default' && r.type === 'blackhole') &&
        main.length >= plan.device &&
        holes.length >= plan.blackholes;
      // Without nftables: the rule of every masq server (ruleArgs) that is not there any more.
      const missingReplies = this.replyPath.path === 'rules' ? this.missingReplyRules(rules, fam) : [];
      const lines = [...missingRules, ...missingReplies, ...(routesOk ? [] : want.filter((a) => a.includes('route')))].map((a) =>
        (a[0] === '-6' ? a.slice(1) : a).join(' '),
      );
      if (lines.length === 0) continue;
      const r = await ipBatch([f], lines);
      if (missingRules.length || missingReplies.length) this.repairCounts.rules++;
      if (!routesOk) this.repairCounts.routes++;
      this.log.warn(
        { family: fam, restored: lines, errors: r.stderr.trim() ? r.stderr.trim().split('\n').slice(0, 5) : undefined },
        'restored routes or rules someone removed',
      );
    }
  }

  /**
   * The fallback's per-server reply rules (ruleArgs) of one family that `ip -j rule show` does not
   * list, as `ip rule add` arguments: what an `ip rule flush` or a hand took away.
   */
  private missingReplyRules(listed: Record<string, unknown>[], fam: 4 | 6): string[][] {
    const o = this.opts;
    // `ip` names the protocol from /etc/protocols, or gives its number where that file lacks it.
    const NUM: Record<string, number> = { icmp: 1, tcp: 6, udp: 17, 'ipv6-icmp': 58, sctp: 132 };
    const num = (p: unknown) => (/^\d+$/.test(String(p)) ? Number(p) : (NUM[String(p)] ?? -1));
    const have = new Set<string>();
    for (const r of listed) {
      if (r.priority !== o.rulePriority || r.table !== String(o.routeTable)) continue;
      have.add(`${num(r.ipproto)} ${String(r.src)} ${r.sport === undefined ? 0 : Number(r.sport)}`);
    }
    const out: string[][] = [];
    for (const r of this.rules.values()) {
      const v6 = r.addr.includes(':');
      if (v6 !== (fam === 6)) continue;
      const proto = r.proto === 'icmp' && v6 ? 'ipv6-icmp' : r.proto;
      if (!have.has(`${num(proto)} ${r.addr} ${r.proto === 'icmp' ? 0 : r.port}`)) out.push(ruleArgs(r, o));
    }
    return out;
  }

  /** inject's raw sockets (their packets carry the into-device bit), per family; −1 when not open. */
  private send4 = -1;
  private send6 = -1;

  /**
   * Replays a whole IP packet (a parked one, its checksum complete) through the device, where a
   * worker takes it as if it had just arrived: sent from this host with the replay mark, which
   * the replay rule routes into the device whatever the destination (a client's packet to a VIP
   * and a real server's reply to a client alike). False if it could not be sent.
   */
  inject(pkt: Uint8Array): boolean {
    const fd = pkt[0]! >> 4 === 6 ? this.send6 : this.send4;
    if (fd < 0) return false;
    return tunAddon().sendPacket(fd, pkt, pkt.length) > 0;
  }

  workerInfo(): { id: number; ready: boolean; restarts: number; threadId: number | null; io: IoPath | null }[] {
    return this.slots.map((s) => ({ id: s.id, ready: s.ready, restarts: s.restarts, threadId: s.worker?.threadId ?? null, io: s.io }));
  }

  /** Terminates a worker as if it crashed (tests, `uvsadm --kill-worker`); it is restarted. */
  async killWorker(id: number): Promise<boolean> {
    const s = this.slots[id];
    if (!s?.worker) return false;
    await s.worker.terminate();
    return true;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.resyncTimer = null;
    await Promise.all(this.slots.map((s) => s.worker?.terminate()));
    for (const s of this.slots) s.port?.close();
    this.closeQueues();
    await this.resyncJob; // a check under way must not put back what cleanup removes
    await this.ruleJob;
    if (this.replyPath.path === 'rules') await this.syncReplyRules([]); // one batch, not one `ip` per rule
    this.rules.clear();
    cleanupRouting(this.opts); // the nftables table too
    this.log.info({ device: this.opts.device }, 'dataplane down');
  }

  private closeQueues(): void {
    const tun = tunAddon();
    for (const s of this.slots) tun.closeFd(s.fd);
    this.slots.length = 0;
    for (const fd of [this.send4, this.send6]) if (fd >= 0) tun.closeFd(fd);
    this.send4 = this.send6 = -1;
  }
}

/**
 * Workers are started without V8's memory reducer. A worker's heap is a few MB and does not grow
 * (nothing is allocated per packet or per loop turn); all the reducer did for it was a full
 * mark-compact or two about 8 s after the worker started, when its start-up garbage had grown the
 * old generation and the worker looked idle — each a stall of the queue: 2–10 ms, up to 100 ms
 * on a loaded machine (perf/LOG.md, 2026-12-01 issue 16 profile). The flag is process-wide and
 * read when an isolate is set up, so it applies to the workers started after it; without a
 * reducer V8 still collects when its limits are reached, it only does not shrink an idle heap.
 */
function noMemoryReducer(): void {
  setFlagsFromString('--no-memory-reducer');
}

/**
 * Every route and rule uvsd keeps (`ip` argument lists, `replace`/`add`), IPv6 ones with v6: the
 * VIP ranges and full-NAT addresses into the device with blackholes behind them, the reply
 * table's default route and its blackhole, the into-device and device rules. A constant number,
 * whatever the services and servers.
 */
function routingPlan(o: DataplaneOptions, v6: boolean): string[][] {
  const out: string[][] = [];
  const fams = v6 ? ([4, 6] as const) : ([4] as const);
  for (const c of o.vipCidrs) out.push(['route', 'replace', c, 'dev', o.device]);
  for (const a of o.fullnatAddrs) out.push(['route', 'replace', hostRoute(a), 'dev', o.device]);
  for (const f of fams) {
    const six = f === 6 ? ['-6'] : [];
    out.push(deviceRuleArgs(o, f), intoDeviceRuleArgs(o, f));
    out.push([...six, 'route', 'replace', 'default', 'dev', o.device, 'table', String(o.routeTable)]);
    out.push([...six, 'route', 'replace', 'blackhole', 'default', 'table', String(o.routeTable), 'metric', BLACKHOLE_METRIC]);
  }
  for (const c of o.vipCidrs) out.push(['route', 'replace', 'blackhole', c, 'metric', BLACKHOLE_METRIC]);
  // `ip route` picks the family from the address; the check sorts them with a leading -6.
  return out.map((a) => (a[0] !== '-6' && a.some((x) => x.includes(':')) ? ['-6', ...a] : a));
}

/** How many device routes and VIP blackholes of a family main holds (distinct prefixes). */
function expectedRoutes(o: DataplaneOptions, fam: 4 | 6): { device: number; blackholes: number } {
  const key = (c: string) => {
    if (fam === 4) {
      const p = parseCidr(c);
      return p ? formatCidr(p) : null;
    }
    const p = parseCidr6(c);
    return p ? `${formatIPv6(p.net)}/${p.bits}` : null;
  };
  const vips = new Set(o.vipCidrs.map(key).filter((k) => k !== null));
  const pool = new Set(o.fullnatAddrs.map((a) => key(a)).filter((k) => k !== null));
  const all = new Set([...vips, ...pool]);
  return { device: all.size, blackholes: vips.size };
}

function parseJson(text: string): Record<string, unknown>[] {
  for (const line of text.split('\n')) {
    if (!line.startsWith('[')) continue;
    try {
      return JSON.parse(line) as Record<string, unknown>[];
    } catch {
      return [];
    }
  }
  return [];
}

/** Removes every route and rule uvsd installs for these options (idempotent). */
export function cleanupRouting(
  o: Pick<DataplaneOptions, 'device' | 'routeTable' | 'rulePriority' | 'markMask' | 'vipCidrs'> & { fullnatAddrs?: string[] },
): void {
  const pref = String(o.rulePriority);
  for (const fam of [['-4'], ['-6']]) {
    // With their selectors: a bare `rule del pref N` removes whichever rule holds N, maybe not ours.
    const family = fam[0] === '-6' ? 6 : 4;
    for (const add of [deviceRuleArgs(o, family), intoDeviceRuleArgs(o, family)]) {
      for (let i = 0; i < 100 && ipOk(delArgs(add)); i++); // one rule per call: until none is left
    }
    // A release before markMask left `fwmark 0x75 lookup <routeTable>` here: any rule at that
    // priority into uvs's own table is uvs's.
    const into = [...fam, 'rule', 'del', 'pref', String(o.rulePriority - 2), 'lookup', String(o.routeTable)];
    for (let i = 0; i < 100 && ipOk(into); i++);
    // One `ip rule del pref N` removes one rule; stop when none is left (bounded for safety).
    for (let i = 0; i < 100000 && ip([...fam, 'rule', 'show', 'pref', pref], true).trim() !== ''; i++) {
      ip([...fam, 'rule', 'del', 'pref', pref], true);
    }
    ip([...fam, 'route', 'flush', 'table', String(o.routeTable)], true);
  }
  for (const c of o.vipCidrs) {
    ip(['route', 'del', c, 'dev', o.device], true);
    ip(['route', 'del', 'blackhole', c, 'metric', BLACKHOLE_METRIC], true);
  }
  for (const a of o.fullnatAddrs ?? []) ip(['route', 'del', hostRoute(a), 'dev', o.device], true);
  ip(['link', 'del', o.device], true);
  try {
    execFileSync('nft', ['-f', '-'], { input: removeTableScript(o.device), stdio: ['pipe', 'ignore', 'ignore'] });
  } catch {
    /* no nft, or nothing to remove */
  }
}

/** The blackholes' metric: the worst there is, so any route through the device wins. */
const BLACKHOLE_METRIC = '4294967295';

/** A host route's destination for either family. */
function hostRoute(a: string): string {
  return a.includes(':') ? `${a}/128` : `${a}/32`;
}
