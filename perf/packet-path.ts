/**
 * Micro-benchmark of the per-packet path without syscalls: PacketProcessor.process() on packets
 * already in memory, with the real table, service model and schedulers. Reports ns per packet for
 * the cases that make up real traffic. Not a test: it reports, it never fails.
 *
 *   node dist/perf/packet-path.js [--packets N] [--flows N]
 *
 * Method: each case prepares its packets once (fixtures as in test/helpers/packets.ts), then
 * runs process() over them in a loop for at least 300 ms, best of 5 runs; the packet bytes are
 * restored from a pristine copy before each pass so every pass does the same work (the copy is
 * timed separately and subtracted).
 */
import * as L from '../conntrack/layout';
import { ConnTable, createRealServerRegion } from '../conntrack/table';
import { TCP_DEFAULT_TIMEOUTS, TCPF_ACK, TCPF_SYN } from '../conntrack/state';
import { validateConfig } from '../control/config';
import { ServiceModel } from '../control/services';
import { PacketProcessor } from '../lb/processor';
import { tcp, udp } from '../test/helpers/packets';

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : def;
};
const FLOWS = arg('flows', 10000);
const VIP = '10.96.0.10';
const RS = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function setup(scheduler: string) {
  const cfg = validateConfig({
    dataplane: { vipCidrs: ['10.96.0.0/24'], workers: 1, tableSize: 1 << 18, maxRealServers: 16, maxServices: 8 },
    services: [
      { protocol: 'tcp', address: VIP, port: 80, scheduler, realServers: RS.map((a) => ({ address: a, port: 8080 })) },
      { protocol: 'udp', address: VIP, port: 53, scheduler, realServers: RS.map((a) => ({ address: a, port: 5353 })) },
    ],
  });
  const rsSab = createRealServerRegion(16);
  const schedSab = new SharedArrayBuffer(8 * L.SCHED_WORDS * 4);
  const model = new ServiceModel(rsSab, schedSab, 16, 8);
  const table = new ConnTable(ConnTable.create(1 << 18, { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300 }), rsSab, 1);
  const proc = new PacketProcessor(table, new Float64Array(L.counterWords(16, 8)), new Int32Array(schedSab), 16, model.apply(cfg), new Uint8Array(4096));
  proc.now = table.now();
  return { proc, table };
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

function bench(name: string, proc: PacketProcessor, p: ReturnType<typeof pack>, prepare?: () => void): number {
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
      for (let i = 0; i < n; i++) {
        proc.outOff = 0;
        proc.process(p.buf, p.offs[i]!, p.lens[i]!);
      }
      packets += n;
    }
    const ns = (Number(process.hrtime.bigint() - t0) - copyNs) / packets;
    if (ns < best) best = ns;
  }
  console.log(`${name.padEnd(52)} ${best.toFixed(0).padStart(6)} ns/packet  (${(1e3 / best).toFixed(2)} Mpps on one core)`);
  return best;
}

function main(): void {
  console.log(`per-packet path, ${FLOWS} flows, Node ${process.version}, best of 5 runs ≥ 300 ms`);
  // Established TCP flows: SYN once, then time the ACK/data packets (client → server).
  {
    const { proc } = setup('rr');
    for (let i = 0; i < FLOWS; i++) {
      const b = tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_SYN });
      proc.process(b, 0, b.length);
    }
    const data = pack(Array.from({ length: FLOWS }, (_, i) => tcp({ src: client(i), dst: VIP, sport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) })));
    bench('TCP established, client → server (lookup + state + rewrite)', proc, data);
    const replies = pack(
      Array.from({ length: FLOWS }, (_, i) => {
        // rr over 3 servers: flow i went to RS[(2 - i % 3)] (newest first); replies from it.
        return tcp({ src: RS[2 - (i % 3)]!, dst: client(i), sport: 8080, dport: 40000 + (i % 20000), flags: TCPF_ACK, payload: new Uint8Array(64) });
      }),
    );
    bench('TCP established, server → client (reply rewrite)', proc, replies);
  }
  // New flows: the same 2000 SYNs each pass into an emptied table (the emptying is not timed).
  for (const s of ['rr', 'wlc', 'mh']) {
    const { proc, table } = setup(s);
    const p = pack(Array.from({ length: 2000 }, (_, i) => tcp({ src: client(i), dst: VIP, sport: 2000 + i, flags: TCPF_SYN })));
    bench(`TCP new flow (SYN: schedule ${s} + insert)`, proc, p, () => table.forEach((e) => table.remove(e, false, 0)));
  }
  {
    const { proc } = setup('rr');
    for (let i = 0; i < FLOWS; i++) {
      const b = udp({ src: client(i), dst: VIP, sport: 5000 + (i % 20000), dport: 53 });
      proc.process(b, 0, b.length);
    }
    const p = pack(Array.from({ length: FLOWS }, (_, i) => udp({ src: client(i), dst: VIP, sport: 5000 + (i % 20000), dport: 53, payload: new Uint8Array(64) })));
    bench('UDP established, client → server', proc, p);
  }
  {
    const { proc } = setup('rr');
    const p = pack(Array.from({ length: 1000 }, (_, i) => tcp({ src: client(i), dst: VIP, sport: 3000 + i, dport: 81, flags: TCPF_SYN })));
    bench('TCP SYN to a port without a service (RST built)', proc, p);
  }
}

main();
