/**
 * One measurement = one run of a third-party generator in the client namespace, with the
 * counters of probe.ts read just before it starts and just after it exits. Every run is bounded:
 * the generator's own duration (-t/-d) plus a hard kill a few seconds later.
 *
 * Metrics (per run; the report takes the median over rounds):
 *   udp_pps   sockperf throughput, 64-byte UDP payloads, one flow, as fast as it can send:
 *             pps = datagrams that reached the real servers' UDP layer / sockperf's send time
 *   udp_rr    sockperf ping-pong over UDP (one message in flight): round-trip p50/p99/p99.9 µs
 *   tcp_rr    the same over one TCP connection
 *   tcp_cps   wrk, HTTP GET with `Connection: close` (one request per connection): requests/s,
 *             and the client's SYN retransmits and the servers' PAWS rejects per 1000 connections
 *   tcp_bulk  iperf3, one TCP stream to rs1: Gb/s received
 * and CPU per unit of work (packet / connection / GB), see cpuMetrics; and, for targets with
 * LB processes, syscalls, wake-ups and context switches per unit of work (ioMetrics).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Lab } from '../lab/lab';
import { run, type RunResult } from './exec';
import { parseIperf3, parseSockperfPp, parseSockperfTp, parseTrafgen, parseWrk } from './parse';
import { activeWindow, SyscallCount, type Probe, type Snapshot, type SyscallCounts, type Window } from './probe';
import type { Endpoint, Endpoints, MeasurementName } from './targets';

export type Metrics = Record<string, number>;

export interface MeasureEnv {
  lab: Lab;
  probe: Probe;
  /** Seconds per generator run (integer: sockperf, wrk and iperf3 take whole seconds). */
  duration: number;
  /** wrk connections (a multiple of WRK_THREADS). */
  conns: number;
  /** Count the LB processes' syscalls with perf stat (false: perf or tracefs missing). */
  syscalls: boolean;
}

/** Hard limit for a generator run: its duration plus slack for start-up, warm-up and exit. */
function limitMs(env: MeasureEnv): number {
  return (env.duration + 15) * 1000;
}

function failed(what: string, r: RunResult): Error {
  const why = r.timedOut ? `killed after ${r.ms} ms` : `exit ${r.code ?? r.signal}`;
  const tail = (r.stderr + '\n' + r.stdout).trim().split('\n').slice(-3).join(' | ');
  return new Error(`${what}: ${why}${tail ? `: ${tail}` : ''}`);
}

/**
 * CPU per unit of work during a run. lbProc: utime+stime of the processes in the LB namespace
 * (uvsd and its worker threads, haproxy, nginx); softirq and busy: machine-wide /proc/stat deltas
 * (busy also contains the generator and the real servers). The report adds the derived lbCpu =
 * lbProc + max(0, softirq − softirq of `direct` in the same round).
 */
export function cpuMetrics(w: Window, units: number, scale: number, suffix: string): Metrics {
  if (!(units > 0)) return {};
  return {
    [`lbProc${suffix}`]: (w.lbProc * scale) / units,
    [`softirq${suffix}`]: (w.softirq * scale) / units,
    [`busy${suffix}`]: (w.busy * scale) / units,
  };
}

/**
 * What an LB does around each unit of work, the kernel's view: syscalls (whole run, perf stat),
 * wake-ups (voluntary context switches: a thread that slept and was woken) and all context
 * switches (active window) of the LB processes' threads, per packet or connection. Absent for
 * targets without a process (direct, nftables).
 */
export function ioMetrics(
  whole: Window,
  active: Window,
  sys: SyscallCounts | null,
  units: (w: Window) => number,
  per: 'Pkt' | 'Conn',
  hasProcs: boolean,
): Metrics {
  const out: Metrics = {};
  if (!hasProcs) return out;
  const uw = units(whole);
  const ua = units(active);
  if (sys && uw > 0) {
    out[`syscallsPer${per}`] = sys.total / uw;
    for (const [name, n] of Object.entries(sys.byName)) if (n > 0) out[`sys_${name}Per${per}`] = n / uw;
  }
  if (ua > 0) {
    out[`wakeupsPer${per}`] = active.lbWakeups / ua;
    out[`switchesPer${per}`] = active.lbSwitches / ua;
  }
  return out;
}

/**
 * Runs a generator while sampling every counter every 200 ms. `whole` spans the entire run;
 * `active` only the intervals where `work` (the unit the run is measured in) grew — CPU per unit
 * is taken over `active`, so that sockperf's 2 s pause after its warm-up and the tools' start-up
 * and exit do not dilute it with other programs' background CPU.
 */
async function sampled<T>(
  env: MeasureEnv,
  fn: () => Promise<T>,
  work: (w: Window) => number,
): Promise<{ r: T; whole: Window; active: Window; sys: SyscallCounts | null; hasProcs: boolean }> {
  const probe = env.probe;
  const pids = await probe.lbPids();
  const counter = env.syscalls ? SyscallCount.start(pids, limitMs(env) + 5000) : null;
  const snaps: Snapshot[] = [probe.snap(pids)];
  const p = fn();
  let finished = false;
  const settled = p.then(
    () => (finished = true),
    () => (finished = true),
  );
  while (!finished) {
    await Promise.race([new Promise((r) => setTimeout(r, 200)), settled]);
    snaps.push(probe.snap(pids));
  }
  const r = await p;
  const sys = counter ? await counter.stop() : null;
  const whole = probe.diff(snaps[0]!, snaps[snaps.length - 1]!);
  const series = snaps.map((s) => work(probe.diff(snaps[0]!, s)));
  const win = activeWindow(series);
  const active = win ? probe.diff(snaps[win[0]]!, snaps[win[1]]!) : whole;
  return { r, whole, active, sys, hasProcs: pids.length > 0 };
}

export async function udpPps(env: MeasureEnv, ep: Endpoint): Promise<Metrics> {
  const { r, whole, active, sys, hasProcs } = await sampled(
    env,
    () =>
      run('sockperf', ['throughput', '-i', ep.host, '-p', String(ep.port), '-m', '64', '-t', String(env.duration), '--mps=max'], {
        ns: env.lab.clientNs,
        timeoutMs: limitMs(env),
      }),
    (w) => w.rsUdp,
  );
  if (r.code !== 0) throw failed('sockperf throughput', r);
  const tp = parseSockperfTp(r.stdout + r.stderr);
  if (whole.rsUdp <= 0) throw new Error(`sockperf sent ${tp.sentMessages} datagrams to ${ep.host}:${ep.port}, none reached a real server`);
  return {
    pps: whole.rsUdp / tp.sentSeconds,
    sentPps: tp.sentRate,
    lossPct: Math.max(0, 100 * (1 - whole.rsUdp / tp.sentMessages)),
    ...cpuMetrics(active, active.rsUdp, 1e9, 'NsPerPkt'),
    ...ioMetrics(whole, active, sys, (w) => w.rsUdp, 'Pkt', hasProcs),
  };
}

export async function rr(env: MeasureEnv, ep: Endpoint, tcp: boolean): Promise<Metrics> {
  const args = ['ping-pong', '-i', ep.host, '-p', String(ep.port), '-m', '64', '-t', String(env.duration), '--full-rtt'];
  if (tcp) args.push('--tcp');
  const pkts = (w: Window) => w.clientRxPackets + w.clientTxPackets;
  const { r, whole, active, sys, hasProcs } = await sampled(
    env,
    () => run('sockperf', args, { ns: env.lab.clientNs, timeoutMs: limitMs(env) }),
    pkts,
  );
  if (r.code !== 0) throw failed('sockperf ping-pong', r);
  const pp = parseSockperfPp(r.stdout + r.stderr);
  if (pp.received === 0) throw new Error(`sockperf ping-pong to ${ep.host}:${ep.port}: no answers`);
  return {
    p50Us: pp.p50,
    p99Us: pp.p99,
    p999Us: pp.p999,
    avgUs: pp.avg,
    tps: pp.received / pp.seconds,
    ...cpuMetrics(active, pkts(active), 1e9, 'NsPerPkt'),
    ...ioMetrics(whole, active, sys, pkts, 'Pkt', hasProcs),
  };
}

/**
 * wrk's threads, for every target: one per real server, so that `direct` can give each thread a
 * real server of its own (Endpoint.spread) and so reach the three, as every LB does.
 */
export const WRK_THREADS = 3;

/**
 * A wrk script that only sets each thread's address: thread i connects to spread[i mod n], on
 * the endpoint's port. It defines no request/response function, so wrk's per-request path stays
 * the same as without a script. Written into the lab directory.
 */
export function spreadScript(hosts: string[], port: number): string {
  return `-- written by uvs perf (perf/measure.ts): wrk thread i connects to host i mod ${hosts.length}, port ${port}
local hosts = { ${hosts.map((h) => JSON.stringify(h)).join(', ')} }
local n = 0
function setup(thread)
  thread.addr = wrk.lookup(hosts[n % #hosts + 1], "${port}")[1]
  n = n + 1
end
`;
}

/** wrk's arguments for short connections (`Connection: close`) to an endpoint. */
export function wrkArgs(dir: string, ep: Endpoint, conns: number, duration: string, timeout: string): string[] {
  const args = ['-t', String(WRK_THREADS), '-c', String(conns), '-d', duration, '--timeout', timeout, '-H', 'Connection: close'];
  if (ep.spread) {
    if (WRK_THREADS % ep.spread.length !== 0)
      throw new Error(`wrk's ${WRK_THREADS} threads cannot be divided evenly over ${ep.spread.length} hosts`);
    const file = join(dir, `wrk-spread-${ep.port}.lua`);
    writeFileSync(file, spreadScript(ep.spread, ep.port));
    args.push('-s', file);
  }
  args.push(`http://${ep.host}:${ep.port}/`);
  return args;
}

export async function tcpCps(env: MeasureEnv, ep: Endpoint): Promise<Metrics> {
  const { r, whole, active, sys, hasProcs } = await sampled(
    env,
    () => run('wrk', wrkArgs(env.lab.dir, ep, env.conns, `${env.duration}s`, '2s'), { ns: env.lab.clientNs, timeoutMs: limitMs(env) }),
    (w) => w.clientActiveOpens,
  );
  if (r.code !== 0) throw failed('wrk', r);
  const p = parseWrk(r.stdout);
  const opens = Math.max(1, whole.clientActiveOpens);
  return {
    cps: p.rps,
    errors: p.socketErrors + p.non2xx,
    // A connection whose SYN went unanswered waits 1 s (the initial RTO): a handful of these
    // per thousand is a method artefact, not the path's limit (see perf/README.md).
    synRetransPerK: (1000 * whole.clientSynRetrans) / opens,
    pawsRejectsPerK: (1000 * whole.rsPawsTw) / opens,
    ...cpuMetrics(active, active.clientActiveOpens, 1e6, 'UsPerConn'),
    ...ioMetrics(whole, active, sys, (w) => w.clientActiveOpens, 'Conn', hasProcs),
    // Per packet too (the client's veth, both directions), comparable with the RR figures.
    ...ioMetrics(whole, active, sys, (w) => w.clientRxPackets + w.clientTxPackets, 'Pkt', hasProcs),
  };
}

export async function tcpBulk(env: MeasureEnv, ep: Endpoint): Promise<Metrics> {
  const { r, active } = await sampled(
    env,
    () =>
      run('iperf3', ['-c', ep.host, '-p', String(ep.port), '-t', String(env.duration), '-J'], {
        ns: env.lab.clientNs,
        timeoutMs: limitMs(env),
      }),
    (w) => w.clientTxBytes,
  );
  const p = parseIperf3(r.stdout); // iperf3 -J reports its errors in the JSON
  if (r.code !== 0) throw failed('iperf3', r);
  return { gbps: p.bitsPerSecond / 1e9, retransmits: p.retransmits, ...cpuMetrics(active, active.clientTxBytes / 1e9, 1e3, 'MsPerGB') };
}

export function measure(env: MeasureEnv, m: MeasurementName, eps: Endpoints): Promise<Metrics> {
  switch (m) {
    case 'udp_pps':
      return udpPps(env, eps.udp);
    case 'udp_rr':
      return rr(env, eps.udp, false);
    case 'tcp_rr':
      return rr(env, eps.tcp, true);
    case 'tcp_cps':
      return tcpCps(env, eps.http);
    case 'tcp_bulk':
      return tcpBulk(env, eps.iperf);
  }
}

/**
 * UDP with N concurrent flows (uvs scaling): trafgen writes 64-byte-payload UDP frames from the
 * client's veth to the LB node's MAC, source ports cycling over N values, as fast as one CPU can;
 * stopped with SIGINT (and bounded by a packet count). Counted over a window that starts once it
 * is sending.
 */
export async function udpFlows(env: MeasureEnv, ep: Endpoint, flows: number, lbMac: string, clientIf: string): Promise<Metrics> {
  // One client address has source ports for up to 45 000 flows (20000–65534); more flows use a
  // second address of the client's subnet (trafgen sends the two packets in turn).
  const addrs =
    flows > 45000 ? [env.lab.clientAddr, env.lab.clientAddr.replace(/\.\d+$/, (x) => `.${Number(x.slice(1)) + 1}`)] : [env.lab.clientAddr];
  const per = Math.ceil(flows / addrs.length);
  const sp = per <= 1 ? '20000' : `dinc(20000, ${20000 + per - 1})`;
  const cfg = join(env.lab.dir, `trafgen-${flows}.cfg`);
  const packet = (saddr: string) => `{
  eth(da=${lbMac}, type=0x0800),
  ipv4(saddr=${saddr}, daddr=${ep.host}, ttl=64, df),
  udp(sp=${sp}, dp=${ep.port}),
  fill(0x55, 64),
}
`;
  writeFileSync(cfg, `/* uvs perf: ${flows} UDP flows to ${ep.host}:${ep.port} */\n${addrs.map(packet).join('')}`);
  const leadMs = 400;
  const windowMs = env.duration * 1000;
  const pids = await env.probe.lbPids();
  const gen = run(
    'trafgen',
    ['--dev', clientIf, '--conf', cfg, '--cpus', '1', '--no-sock-mem', '--notouch-irq', '--num', String(50_000_000), '--no-cpu-stats'],
    {
      ns: env.lab.clientNs,
      interruptAfterMs: leadMs + windowMs + 300,
      timeoutMs: limitMs(env),
    },
  );
  await new Promise((r) => setTimeout(r, leadMs));
  const a = env.probe.snap(pids);
  await new Promise((r) => setTimeout(r, windowMs));
  const b = env.probe.snap(pids);
  const r = await gen;
  if (r.timedOut || (r.code !== 0 && r.signal !== 'SIGINT' && r.code !== 130)) throw failed('trafgen', r);
  parseTrafgen(r.stdout + r.stderr);
  const w = env.probe.diff(a, b);
  if (w.rsUdp <= 0) throw new Error(`trafgen: no datagram reached a real server (${flows} flows)`);
  return {
    pps: w.rsUdp / w.seconds,
    sentPps: w.clientTxPackets / w.seconds,
    lossPct: Math.max(0, 100 * (1 - w.rsUdp / Math.max(1, w.clientTxPackets))),
    ...cpuMetrics(w, w.rsUdp, 1e9, 'NsPerPkt'),
  };
}

/**
 * One second of short HTTP connections, not counted: through a freshly started target (the same
 * for every target, so that none is measured cold: uvsd's JIT, the proxies' first connections),
 * and to every real server once when the lab is up (their Node.js servers have a JIT too).
 */
export async function warmUp(env: MeasureEnv, eps: Endpoint[]): Promise<void> {
  await Promise.all(
    eps.map((ep) => run('wrk', wrkArgs(env.lab.dir, ep, 3 * WRK_THREADS, '1s', '1s'), { ns: env.lab.clientNs, timeoutMs: 10000 })),
  );
}
