/**
 * Micro-benchmark of the per-packet path without syscalls: PacketProcessor.process() on packets
 * already in memory, with the real table, service model and schedulers. Reports ns per packet for
 * the cases that make up real traffic. Not a test (it is never part of `npm test`); as a
 * regression guard it compares with a saved run and exits 1 when a case got slower than allowed.
 *
 *   node dist/perf/packet-path.js [--flows N] [--json FILE] [--check FILE [--tolerance X]]
 *     --json FILE    also write the results ({case: ns}) to FILE
 *     --check FILE   compare with FILE (perf/packet-path.json is the committed run): a case more
 *                    than X times slower (default 1.5: machines and neighbours differ) fails
 *
 * Method: each case prepares its packets once (fixtures as in test/helpers/packets.ts), then
 * runs process() over them in a loop for at least 300 ms, best of 5 runs; the packet bytes are
 * restored from a pristine copy before each pass so every pass does the same work (the copy is
 * timed separately and subtracted).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { TCPF_ACK, TCPF_SYN } from '../conntrack/state';
import { VNET_HLEN } from '../net/packet';
import { tcp, tcp6, udp } from '../test/helpers/packets';
import { makeProcessor } from '../test/helpers/processor';

type Send = (b: Uint8Array, off: number, len: number) => number;

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : def;
};
const FLOWS = arg('flows', 10000);
const strArg = (name: string): string | null => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? (process.argv[i + 1] ?? null) : null;
};
const results: Record<string, number> = {};
const VIP = '10.96.0.10';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

const VIP6 = 'fd00:96::10';
const RS6 = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];

/** The processor as a worker wires it (test/helpers/processor.ts), with 2^18 table entries. */
function setup(scheduler: string, offload = false) {
  const { proc, table, region } = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'] },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, scheduler, realServers: RS.map((a) => ({ address: a, port: 8080 })) },
        { protocol: 'udp', address: VIP, port: 53, scheduler, realServers: RS.map((a) => ({ address: a, port: 5353 })) },
        { protocol: 'tcp', address: VIP6, port: 80, scheduler, realServers: RS6.map((a) => ({ address: a, port: 8080 })) },
      ],
    },
    { capacity: 1 << 18, offload, outBytes: 4096 },
  );
  /** One packet as a worker hands it over: the region at the start of the output buffer. */
  const send = (b: Uint8Array, off: number, len: number) => {
    region.off = offload ? VNET_HLEN : 0;
    region.end = region.buf.length;
    return proc.process(b, off, len, region);
  };
  return { send, table };
}

function client(i: number): string {
  return `192.168.${(i >> 8) & 255}.${i & 255}`;
}

/** Packs packets into one buffer: returns buffer, offsets, lengths. */
function pack(pkts: Uint8Array[]) {
  const total = pkts.reduce((a, p) => a + p.length, 0);
  const buf = new Uint8Array(total);
  const offs = new Int32Array(pkts.length);
  const lens = new Int32Array(pkts.length);
  let o = 0;
  pkts.forEach((p, i) => {
    buf.set(p, o);
    offs[i] = o;
    lens[i] = p.length;
    o += p.length;
  });
  return { buf, offs, lens, pristine: buf.slice() };
}

function bench(name: string, send: Send, p: ReturnType<typeof pack>, prepare?: () => void, at = 0): number {
  const n = p.offs.length;
  let best = Infinity;
  for (let run = 0; run < 5; run++) {
    let packets = 0;
    let copyNs = 0;
    const t0 = process.hrtime.bigint();
    while (Number(process.hrtime.bigint() - t0) < 300e6) {
      const c0 = process.hrtime.bigint();
      p.buf.set(p.pristine);
      prepare?.();
      copyNs += Number(process.hrtime.bigint() - c0);
      for (let i = 0; i < n; i++) send(p.buf, p.offs[i]! + at, p.lens[i]! - at);
      packets += n;
    }
    const ns = (Number(process.hrtime.bigint() - t0) - copyNs) / packets;
    if (ns < best) best = ns;
  }
  console.log(`${name.padEnd(58)} ${best.toFixed(0).padStart(6)} ns/packet  (${(1e3 / best).toFixed(2)} Mpps on one core)`);
  results[name] = Math.round(best);
  return best;
}

function main(): void {
  console.log(`per-packet path, ${FLOWS} flows, Node ${process.version}, best of 5 runs ≥ 300 ms`);
  // Established TCP flows: SYN once, then time the ACK/data packets (client → server).
  {
    const { send } = setup('rr');
    for (let i = 0; i < FLOWS; i++) {
      const b = tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_SYN });
      send(b, 0, b.length);
    }
    const data = pack(Array.from({ length: FLOWS }, (_, i) => tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) })));
    bench('TCP established, client → server (lookup + state + rewrite)', send, data);
    const replies = pack(
      Array.from({ length: FLOWS }, (_, i) => {
        // rr over 3 servers: flow i went to RS[(2 - i % 3)] (newest first); replies from it.
        return tcp({ src: RS[2 - (i % 3)]!, dst: client(i), sport: 8080, dport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) });
      }),
    );
    bench('TCP established, server → client (reply rewrite)', send, replies);
  }
  // New flows: the same 2000 SYNs each pass into an emptied table (the emptying is not timed).
  for (const s of ['rr', 'wlc', 'mh']) {
    const { send, table } = setup(s);
    const p = pack(Array.from({ length: 2000 }, (_, i) => tcp({ src: client(i), dst: VIP, sport: 2000 + i, flags: TCPF_SYN })));
    bench(`TCP new flow (SYN: schedule ${s} + insert)`, send, p, () => table.forEach((e) => table.remove(e, false, 0)));
  }
  {
    const { send } = setup('rr');
    for (let i = 0; i < FLOWS; i++) {
      const b = udp({ src: client(i), dst: VIP, sport: 5000 + (i % 20000), dport: 53 });
      send(b, 0, b.length);
    }
    const p = pack(Array.from({ length: FLOWS }, (_, i) => udp({ src: client(i), dst: VIP, sport: 5000 + (i % 20000), dport: 53, payload: new Uint8Array(64) })));
    bench('UDP established, client → server', send, p);
  }
  {
    const { send } = setup('rr');
    const p = pack(Array.from({ length: 1000 }, (_, i) => tcp({ src: client(i), dst: VIP, sport: 3000 + i, dport: 81, flags: TCPF_SYN })));
    bench('TCP SYN to a port without a service (RST built)', send, p);
  }
  {
    const { send } = setup('rr');
    const c6 = (i: number) => `2001:db8::${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}`;
    for (let i = 0; i < FLOWS; i++) {
      const b = tcp6({ src: c6(i), dst: VIP6, sport: 40000 + (i % 20000), flags: TCPF_SYN });
      send(b, 0, b.length);
    }
    const data = pack(Array.from({ length: FLOWS }, (_, i) => tcp6({ src: c6(i), dst: VIP6, sport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) })));
    bench('IPv6 TCP established, client → server', send, data);
  }
  {
    // With device offloads: a 64 KB GSO super-packet (partial checksum) is one lookup and rewrite.
    const { send } = setup('rr', true);
    const frame = (pkt: Uint8Array, gso: number) => {
      const f = new Uint8Array(VNET_HLEN + pkt.length);
      f.set(pkt, VNET_HLEN);
      f[0] = 1; // NEEDS_CSUM
      f[1] = gso ? 1 : 0; // TCPV4
      f[4] = gso & 255;
      f[5] = gso >> 8;
      f[6] = 20; // csum_start: the TCP header
      f[8] = 16; // csum_offset: its checksum
      return f;
    };
    const n = 1000;
    for (let i = 0; i < n; i++) {
      const b = frame(tcp({ src: client(i), dst: VIP, sport: 40000 + i, flags: TCPF_SYN }), 0);
      send(b, VNET_HLEN, b.length - VNET_HLEN);
    }
    const big = pack(Array.from({ length: n }, (_, i) => frame(tcp({ src: client(i), dst: VIP, sport: 40000 + i, flags: TCPF_ACK, payload: new Uint8Array(65000) }), 1448)));
    bench('TCP 64 KB GSO super-packet (offloads on), per super-packet', send, big, undefined, VNET_HLEN);
  }
  const json = strArg('json');
  if (json) writeFileSync(json, JSON.stringify(results, null, 2) + '\n');
  const check = strArg('check');
  if (check) {
    const tolerance = Number(strArg('tolerance') ?? 1.5);
    const base = JSON.parse(readFileSync(check, 'utf8')) as Record<string, number>;
    let slower = 0;
    console.log(`\ncompared with ${check} (a case more than ${tolerance}× slower fails):`);
    for (const [name, ns] of Object.entries(results)) {
      const b = base[name];
      if (b === undefined) {
        console.log(`  ${name.padEnd(58)} new case, no baseline`);
        continue;
      }
      const r = ns / b;
      if (r > tolerance) slower++;
      console.log(`  ${name.padEnd(58)} ${b} → ${ns} ns  ${r.toFixed(2)}×${r > tolerance ? '  SLOWER' : ''}`);
    }
    if (slower > 0) {
      console.log(`${slower} case(s) regressed beyond ${tolerance}×`);
      process.exitCode = 1;
    }
  }
}

main();
