/**
 * What the queue-steering program (lb/native/steer.c, docs/steering.md) costs: packets/s through
 * a multi-queue TUN device with the program, with another build's program (--against), and with
 * the device's own flow table (automq); and, where the addon has steerRun, the program's own time
 * per packet as the kernel runs it (BPF_PROG_TEST_RUN). A benchmark, never part of `npm test`.
 *
 *   node dist/perf/steering.js [--rounds N] [--seconds S] [--queues Q] [--family 4|6]
 *                              [--against ADDON] [--json FILE]
 *     --rounds N       rounds (default 6); each runs every variant once, in turn, the order
 *                      reversed every other round
 *     --seconds S      seconds per variant and round (default 2)
 *     --queues Q       the device's queues (default 2)
 *     --family 4|6     the packets' family (default 4)
 *     --against ADDON  also the program of another build's addon (its build/Release/uvs_tun.node:
 *                      an older commit built elsewhere), attached as that build attaches it
 *     --json FILE      also write every round's figures to FILE
 *
 * Method. Each variant and round runs in a network namespace of its own (uvsp<pid>-steer, removed
 * after): a device with Q queues, the program attached (or not: automq), the prefixes routed back
 * into the device. One thread writes 32 packets at a time into queue 0 (each write is a trip
 * through the kernel: ip_forward, then the device's queue selection — the program — and its
 * queue), then reads every queue empty; packets/s = packets read back over the run. 4096 UDP
 * packets from distinct random sources in 198.18.0.0/15 (IPv6: 2001:db8::/32) to the VIP range
 * 10.99.0.0/24 (fd99::/120) port 80, which the program keys on the source endpoint; the program
 * also knows a pool address, as uvsd's does. The figure per variant is the median over rounds;
 * alternating the variants evens out a neighbour's load.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import * as path from 'node:path';
import { steeringKey, steeringTable } from '../lb/steering';
import type { TunAddon } from '../lb/tun';
import { put16, put32 } from '../net/packet';

const VIPS = ['10.99.0.0/24', 'fd99::/120'];
const POOL = ['10.99.9.1', 'fd99::9:1'];
const DEV = 'uvsteer0';
const BATCH = 32;
const SLOT = 2048;
const DISTINCT = 4096;

interface ChildInput {
  addon: string;
  /** 'ebpf': the addon's program; 'automq': none. */
  mode: 'ebpf' | 'automq';
  queues: number;
  seconds: number;
  family: 4 | 6;
}
interface ChildResult {
  attach: string | null;
  written: number;
  read: number;
  seconds: number;
  pps: number;
  /** The program's ns per run (BPF_PROG_TEST_RUN, 10^6 runs) on one of the packets, where the addon has steerRun. */
  progNs: number | null;
}

function packets(family: 4 | 6): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < DISTINCT; i++) {
    if (family === 4) {
      const b = new Uint8Array(20 + 8 + 18);
      b[0] = 0x45;
      put16(b, 2, b.length);
      b[8] = 64;
      b[9] = 17;
      put32(b, 12, 0xc6120000 + randomInt(0, 2 ** 17));
      put32(b, 16, 0x0a63000a); // 10.99.0.10
      put16(b, 20, randomInt(1024, 65536));
      put16(b, 22, 80);
      put16(b, 24, 8 + 18);
      let s = 0;
      for (let k = 0; k < 20; k += 2) s += (b[k]! << 8) | b[k + 1]!;
      while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
      put16(b, 10, ~s & 0xffff);
      out.push(b);
    } else {
      const b = new Uint8Array(40 + 8 + 18);
      b[0] = 0x60;
      put16(b, 4, 8 + 18);
      b[6] = 17;
      b[7] = 64;
      put32(b, 8, 0x20010db8);
      for (let w = 1; w < 4; w++) put32(b, 8 + 4 * w, randomInt(0, 2 ** 32));
      put32(b, 24, 0xfd990000);
      put32(b, 36, 0x10);
      put16(b, 40, randomInt(1024, 65536));
      put16(b, 42, 80);
      put16(b, 44, 8 + 18);
      put16(b, 46, 0); // IPv6 UDP without a checksum: forwarding does not look
      out.push(b);
    }
  }
  return out;
}

function child(input: ChildInput): ChildResult {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const tun = require(input.addon) as TunAddon;
  const fds: number[] = [];
  for (let i = 0; i < input.queues; i++) fds.push(tun.openQueue(DEV, false));
  const k = randomBytes(8);
  const key = steeringKey(k.readUInt32BE(0), k.readUInt32BE(4), VIPS, POOL);
  const table = steeringTable(key);
  // An older build's steerAttach(fd, seed) takes the first two arguments and ignores the rest.
  const attach = input.mode === 'ebpf' ? tun.steerAttach(fds[0]!, key.k0, key.k1, table) : null;
  if (attach) throw new Error(`steerAttach: ${attach}`);
  const sh = (args: string[]) => execFileSync('ip', args, { stdio: 'ignore' });
  sh(['link', 'set', 'dev', DEV, 'up']);
  writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
  for (const c of ['all', DEV]) {
    writeFileSync(`/proc/sys/net/ipv4/conf/${c}/rp_filter`, '0');
    writeFileSync(`/proc/sys/net/ipv4/conf/${c}/send_redirects`, '0');
  }
  writeFileSync(`/proc/sys/net/ipv6/conf/${DEV}/disable_ipv6`, '0');
  writeFileSync('/proc/sys/net/ipv6/conf/all/forwarding', '1');
  sh(['route', 'replace', '10.99.0.0/16', 'dev', DEV]);
  sh(['-6', 'route', 'replace', 'fd99::/16', 'dev', DEV]);

  const pk = packets(input.family);
  // All 4096 packets laid out once; a batch is 32 consecutive ones.
  const wbuf = new Uint8Array(DISTINCT * SLOT);
  const offs = new Int32Array(DISTINCT);
  pk.forEach((p, i) => {
    wbuf.set(p, i * SLOT);
    offs[i] = i * SLOT;
  });
  const rbuf = new Uint8Array(64 * SLOT);
  const rlens = new Int32Array(64);
  const drain = (): number => {
    let n = 0;
    for (const fd of fds) {
      for (;;) {
        const r = tun.readBatch(fd, rbuf, rlens, 64, SLOT, 0, false);
        if (r <= 0) break;
        n += r;
      }
    }
    return n;
  };
  let written = 0;
  let read = 0;
  let at = 0;
  const wOffs = new Int32Array(BATCH);
  const wLens = new Int32Array(BATCH);
  // Warm-up (routes, neighbour-free forwarding, caches), not counted.
  const warm = Date.now() + 200;
  const t0 = process.hrtime.bigint();
  let start = t0;
  let counting = false;
  const end = () => Number(process.hrtime.bigint() - start) / 1e9;
  for (;;) {
    if (!counting && Date.now() >= warm) {
      drain();
      counting = true;
      written = 0;
      read = 0;
      start = process.hrtime.bigint();
    }
    if (counting && end() >= input.seconds) break;
    for (let i = 0; i < BATCH; i++) {
      wOffs[i] = offs[at + i]!;
      wLens[i] = pk[at + i]!.length;
    }
    at = (at + BATCH) % DISTINCT;
    const w = tun.writeBatch(fds[0]!, wbuf, wOffs, wLens, BATCH);
    if (w < 0) throw new Error(`writeBatch: ${w}`);
    written += w;
    read += drain();
  }
  const secs = end();
  read += drain();
  let progNs: number | null = null;
  if (input.mode === 'ebpf' && typeof tun.steerLoad === 'function') {
    const pfd = tun.steerLoad(key.k0, key.k1, table);
    progNs = tun.steerRun(pfd, pk[0]!, 1_000_000)[1];
    tun.closeFd(pfd);
  }
  for (const fd of fds) tun.closeFd(fd);
  return { attach, written, read, seconds: secs, pps: read / secs, progNs };
}

function main(): void {
  const argv = process.argv;
  const opt = (name: string): string | null => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? (argv[i + 1] ?? null) : null;
  };
  if (argv[2] === '--child') {
    process.stdout.write(`${JSON.stringify(child(JSON.parse(argv[3]!) as ChildInput))}\n`);
    return;
  }
  if (process.getuid?.() !== 0) throw new Error('perf/steering needs root (a network namespace and a TUN device)');
  const rounds = Number(opt('rounds') ?? 6);
  const seconds = Number(opt('seconds') ?? 2);
  const queues = Number(opt('queues') ?? 2);
  const family = Number(opt('family') ?? 4) === 6 ? 6 : 4;
  const against = opt('against');
  const json = opt('json');
  const own = path.join(__dirname, '..', '..', 'build', 'Release', 'uvs_tun.node');
  const variants: { name: string; addon: string; mode: 'ebpf' | 'automq' }[] = [
    { name: 'this build: program', addon: own, mode: 'ebpf' },
    ...(against ? [{ name: `${against}: program`, addon: path.resolve(against), mode: 'ebpf' as const }] : []),
    { name: 'no program (automq)', addon: own, mode: 'automq' },
  ];
  const ns = `uvsp${process.pid % 100000}-steer`;
  const res: Record<string, ChildResult[]> = Object.fromEntries(variants.map((v) => [v.name, []]));
  process.stderr.write(
    `perf/steering: ${rounds} rounds × ${variants.length} variants × ${seconds} s, ${queues} queues, IPv${family}; load ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}, ${cpus().length} CPUs\n`,
  );
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? [...variants].reverse() : variants;
    for (const v of order) {
      spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
      execFileSync('ip', ['netns', 'add', ns]);
      try {
        const input: ChildInput = { addon: v.addon, mode: v.mode, queues, seconds, family };
        const c = spawnSync('ip', ['netns', 'exec', ns, process.execPath, __filename, '--child', JSON.stringify(input)], {
          encoding: 'utf8',
          timeout: (seconds + 30) * 1000,
        });
        if (c.status !== 0) throw new Error(`${v.name}: child failed (${c.status}): ${c.stderr}`);
        const out = JSON.parse(c.stdout.trim()) as ChildResult;
        res[v.name]!.push(out);
        process.stderr.write(
          `  round ${r + 1} ${v.name}: ${Math.round(out.pps).toLocaleString('en-US')} packets/s (${out.read} of ${out.written} back)${out.progNs !== null ? `, program ${out.progNs} ns` : ''}\n`,
        );
      } finally {
        spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
      }
    }
  }
  const median = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length ? (s.length % 2 ? s[(s.length - 1) >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2) : NaN;
  };
  // The variants of a round ran one right after the other: their ratio within the round is less
  // exposed to a neighbour's load than the medians over rounds.
  const base = res[variants[0]!.name]!;
  console.log(
    `| variant | packets/s, median (min–max) over ${rounds} rounds | ÷ ${variants[0]!.name}, median of the rounds' ratios | program ns per packet (BPF_PROG_TEST_RUN) |`,
  );
  console.log('|---|---:|---:|---:|');
  for (const v of variants) {
    const xs = res[v.name]!;
    const pps = xs.map((x) => x.pps);
    const ratio = median(xs.map((x, i) => x.pps / base[i]!.pps));
    const ns2 = xs.map((x) => x.progNs).filter((x) => x !== null);
    console.log(
      `| ${v.name} | ${Math.round(median(pps)).toLocaleString('en-US')} (${Math.round(Math.min(...pps)).toLocaleString('en-US')}–${Math.round(Math.max(...pps)).toLocaleString('en-US')}) | ${ratio.toFixed(3)} | ${ns2.length ? median(ns2) : '—'} |`,
    );
  }
  if (json) writeFileSync(json, `${JSON.stringify({ rounds, seconds, queues, family, results: res }, null, 2)}\n`);
}

main();
