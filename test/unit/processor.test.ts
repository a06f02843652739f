/**
 * The packet path as data: packet in → packet out (or a generated answer) and a verdict, with
 * the real table, service model and schedulers, and no device.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_FIN, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid, field, icmpEcho, tcp, udp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS: [string, string, string] = ['10.0.0.1', '10.0.0.2', '10.0.0.3'];

function setup(services: unknown[], capacity = 1024) {
  return makeProcessor({ dataplane: { vipCidrs: ['10.96.0.0/24'] }, services }, { capacity, outBytes: 4096 });
}

const web = (weights = [1, 1, 1], scheduler = 'rr') => ({
  protocol: 'tcp',
  address: VIP,
  port: 80,
  scheduler,
  realServers: RS.map((a, i) => ({ address: a, port: 8080, weight: weights[i] })),
});

test('a SYN to the VIP is rewritten to a real server with port mapping and valid checksums', () => {
  const { run } = setup([web()]);
  const r = run(tcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: TCPF_SYN }));
  assert.equal(r.v, FORWARD);
  const f = field(r.pkt);
  assert.equal(f.src, CLIENT);
  assert.ok(RS.includes(f.dst));
  assert.equal(f.dport, 8080);
  assert.equal(f.sport, 40000);
  assert.ok(checksumsValid(r.pkt));
});

test('rr sends consecutive new flows to the newest real server first, then round the list', () => {
  const { run } = setup([web()]);
  const order = [0, 1, 2, 3, 4, 5].map((i) => field(run(tcp({ src: CLIENT, dst: VIP, sport: 40000 + i, flags: TCPF_SYN })).pkt).dst);
  assert.deepEqual(order, [RS[2], RS[1], RS[0], RS[2], RS[1], RS[0]]);
});

test('later packets of a flow follow its entry, and replies are rewritten back to VIP:80', () => {
  const { run } = setup([web()]);
  const syn = run(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_SYN }));
  const rip = field(syn.pkt).dst;
  const synack = run(tcp({ src: rip, dst: CLIENT, sport: 8080, dport: 40001, flags: TCPF_SYN | TCPF_ACK }));
  assert.equal(synack.v, FORWARD);
  const f = field(synack.pkt);
  assert.deepEqual([f.src, f.sport, f.dst, f.dport], [VIP, 80, CLIENT, 40001]);
  assert.ok(checksumsValid(synack.pkt));
  for (let i = 0; i < 5; i++) {
    const d = run(tcp({ src: CLIENT, dst: VIP, sport: 40001, flags: TCPF_ACK, payload: new Uint8Array(100).fill(i) }));
    assert.equal(field(d.pkt).dst, rip, 'the same real server for the whole flow');
    assert.ok(checksumsValid(d.pkt));
  }
});

test('UDP is forwarded both ways; a datagram without a checksum keeps checksum 0', () => {
  const { run } = setup([{ protocol: 'udp', address: VIP, port: 53, scheduler: 'rr', realServers: [{ address: RS[0], port: 5353 }] }]);
  const q = run(udp({ src: CLIENT, dst: VIP, sport: 5000, dport: 53, payload: new Uint8Array([1, 2, 3]) }));
  assert.equal(q.v, FORWARD);
  assert.deepEqual([field(q.pkt).dst, field(q.pkt).dport], [RS[0], 5353]);
  assert.ok(checksumsValid(q.pkt));
  const a = run(udp({ src: RS[0], dst: CLIENT, sport: 5353, dport: 5000, payload: new Uint8Array([9]) }));
  assert.equal(a.v, FORWARD);
  assert.deepEqual([field(a.pkt).src, field(a.pkt).sport], [VIP, 53]);
  assert.ok(checksumsValid(a.pkt));
  const n = run(udp({ src: CLIENT, dst: VIP, sport: 5001, dport: 53, udpNoChecksum: true }));
  assert.equal(P.u16(n.pkt, 26), 0);
});

test('no eligible real server (all weight 0) answers ICMP port unreachable and creates no entry', () => {
  const { run, table, drops } = setup([web([0, 0, 0])]);
  const syn = tcp({ src: CLIENT, dst: VIP, sport: 40002, flags: TCPF_SYN });
  const r = run(syn);
  assert.equal(r.v, REPLY);
  const f = field(r.reply!);
  assert.deepEqual([f.src, f.dst, f.proto, f.icmpType, f.icmpCode], [VIP, CLIENT, 1, 3, 3]);
  assert.deepEqual([...r.reply!.subarray(28, 48)], [...syn.subarray(0, 20)], 'quotes the offending IP header');
  assert.ok(checksumsValid(r.reply!));
  assert.equal(table.count(), 0);
  assert.equal(drops('no_real_server'), 1);
});

test('a service without real servers also answers port unreachable', () => {
  const { run } = setup([{ protocol: 'udp', address: VIP, port: 53, scheduler: 'rr' }]);
  const r = run(udp({ src: CLIENT, dst: VIP, dport: 53 }));
  assert.equal(r.v, REPLY);
  assert.equal(field(r.reply!).icmpType, 3);
});

test('a VIP port with no service gets a RST for TCP and port unreachable for UDP', () => {
  const { run, drops } = setup([web()]);
  const r = run(tcp({ src: CLIENT, dst: VIP, sport: 40003, dport: 22, flags: TCPF_SYN, seq: 5000 }));
  assert.equal(r.v, REPLY);
  const f = field(r.reply!);
  assert.deepEqual([f.src, f.sport, f.dst, f.dport], [VIP, 22, CLIENT, 40003]);
  assert.equal(f.flags, TCPF_RST | TCPF_ACK);
  assert.equal(f.ack, 5001, 'RST acknowledges the SYN');
  assert.ok(checksumsValid(r.reply!));
  const u = run(udp({ src: CLIENT, dst: '10.96.0.11', dport: 53 }));
  assert.equal(u.v, REPLY);
  assert.equal(field(u.reply!).icmpType, 3);
  assert.equal(drops('no_service'), 2);
});

test('a mid-flow TCP segment without an entry gets a RST and creates nothing; a RST is never answered', () => {
  const { run, table } = setup([web()]);
  const r = run(tcp({ src: CLIENT, dst: VIP, sport: 40004, flags: TCPF_ACK, ack: 777 }));
  assert.equal(r.v, REPLY);
  assert.equal(field(r.reply!).flags, TCPF_RST);
  assert.equal(field(r.reply!).seq, 777);
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 40004, flags: TCPF_RST })).v, DROP);
  assert.equal(table.count(), 0);
});

test('weight 0 keeps existing flows on the server while new flows avoid it', () => {
  const { run, model, cfg, proc } = setup([web([1, 1, 1])]);
  const flows = [0, 1, 2].map((i) => {
    const r = run(tcp({ src: CLIENT, dst: VIP, sport: 41000 + i, flags: TCPF_SYN }));
    return { sport: 41000 + i, rip: field(r.pkt).dst };
  });
  const quiesced = flows[0]!.rip;
  const next = structuredClone(cfg);
  next.services[0]!.realServers.find((r) => r.address === quiesced)!.weight = 0;
  proc.setSnapshot(model.apply(next));
  for (const f of flows) assert.equal(field(run(tcp({ src: CLIENT, dst: VIP, sport: f.sport, flags: TCPF_ACK })).pkt).dst, f.rip);
  for (let i = 0; i < 20; i++) {
    assert.notEqual(field(run(tcp({ src: CLIENT, dst: VIP, sport: 42000 + i, flags: TCPF_SYN })).pkt).dst, quiesced);
  }
});

test('a SYN reusing the ports of a TIME_WAIT entry starts a new connection', () => {
  const { run, table } = setup([web()]);
  const s = { src: CLIENT, dst: VIP, sport: 43000 };
  const first = field(run(tcp({ ...s, flags: TCPF_SYN })).pkt).dst;
  run(tcp({ src: first, dst: CLIENT, sport: 8080, dport: 43000, flags: TCPF_SYN | TCPF_ACK }));
  run(tcp({ ...s, flags: TCPF_ACK }));
  run(tcp({ ...s, flags: TCPF_FIN | TCPF_ACK }));
  run(tcp({ src: first, dst: CLIENT, sport: 8080, dport: 43000, flags: TCPF_FIN | TCPF_ACK }));
  const second = field(run(tcp({ ...s, flags: TCPF_SYN })).pkt).dst;
  assert.notEqual(second, first, 'rr moved on: the SYN was scheduled again');
  assert.equal(table.count(), 1);
});

test('malformed packets are dropped and counted by reason', () => {
  const { run, drops } = setup([web()]);
  const good = tcp({ src: CLIENT, dst: VIP, flags: TCPF_SYN });
  assert.equal(run(new Uint8Array(10)).v, DROP);
  assert.equal(drops('truncated'), 1);
  const v5 = good.slice();
  v5[0] = 0x55;
  assert.equal(run(v5).v, DROP);
  assert.equal(drops('bad_version'), 1);
  const ihl = good.slice();
  ihl[0] = 0x44;
  assert.equal(run(ihl).v, DROP);
  assert.equal(drops('bad_header_length'), 1);
  const csum = good.slice();
  csum[P.IP_TTL] = 3;
  assert.equal(run(csum).v, DROP);
  assert.equal(drops('bad_checksum'), 1);
  const frag = tcp({ src: CLIENT, dst: VIP, flags: TCPF_SYN, frag: 0x2000 });
  assert.equal(run(frag).v, DROP);
  assert.equal(drops('fragment'), 1);
  const short = good.slice(0, 30);
  assert.equal(run(short).v, DROP);
  assert.equal(drops('truncated'), 2);
  const v6 = new Uint8Array(40);
  v6[0] = 0x60;
  assert.equal(run(v6).v, DROP);
  assert.equal(drops('ipv6'), 1);
  const gre = good.slice();
  gre[P.IP_PROTO] = 47;
  P.put16(gre, P.IP_CSUM, 0);
  P.put16(gre, P.IP_CSUM, P.checksum(gre, 0, 20, 0));
  assert.equal(run(gre).v, DROP);
  assert.equal(drops('unsupported_protocol'), 1);
  assert.equal(run(tcp({ src: '8.8.8.8', dst: CLIENT, sport: 80, dport: 1, flags: TCPF_ACK })).v, DROP);
  assert.equal(drops('no_connection'), 1);
});

test('random bytes never throw; every one is dropped and counted under exactly one drop reason', () => {
  // 20 000 random buffers, half with an IPv4 version/IHL byte: none is a valid packet to a VIP
  // (a random header has the right checksum 1 time in 65 536 and the VIP as destination 1 in
  // 2^32), so the only right verdict is DROP, each counted once.
  const { proc, region, counters } = setup([web()]);
  const dropped = () => L.DROP_NAMES.reduce((sum, _n, i) => sum + counters[L.C_DROP_BASE + i]!, 0);
  let a = 12345;
  const buf = new Uint8Array(2048);
  const reasons = new Set<string>();
  for (let i = 0; i < 20000; i++) {
    const len = (a = (Math.imul(a, 1103515245) + 12345) >>> 0) % 1600;
    for (let j = 0; j < len; j++) buf[j] = (a = (Math.imul(a, 1103515245) + 12345) >>> 0) >>> 24;
    if (i % 2 === 0 && len > 20) buf[0] = 0x45;
    region.off = 0;
    const before = dropped();
    const v = proc.process(buf, 0, len, region);
    assert.equal(v, DROP, `buffer ${i} (${len} bytes)`);
    assert.equal(dropped(), before + 1, `buffer ${i} counted once`);
  }
  L.DROP_NAMES.forEach((n, i) => counters[L.C_DROP_BASE + i]! > 0 && reasons.add(n));
  for (const r of ['bad_version', 'truncated', 'bad_checksum']) assert.ok(reasons.has(r), `${r} among ${[...reasons].join(', ')}`);
});

test('an echo request to a VIP is answered in place', () => {
  const { run } = setup([web()]);
  const r = run(icmpEcho({ src: CLIENT, dst: VIP }));
  assert.equal(r.v, FORWARD);
  const f = field(r.pkt);
  assert.deepEqual([f.src, f.dst, f.icmpType], [VIP, CLIENT, 0]);
  assert.ok(checksumsValid(r.pkt));
});

test('a full table drops new flows (counted) and keeps forwarding existing ones', () => {
  const { run, drops } = setup([web()], 16);
  for (let i = 0; i < 16; i++) assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 44000 + i, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 44100, flags: TCPF_SYN })).v, DROP);
  assert.equal(drops('table_full'), 1);
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 44003, flags: TCPF_ACK })).v, FORWARD);
});

// ── persistence ─────────────────────────────────────────────────────────────────────────────
const persistent = (extra: Record<string, unknown> = {}) => ({ ...web(), persistence: 300, ...extra });

test('persistence pins a client to one real server across connections; other clients rotate', () => {
  const { run, rs } = setup([persistent()]);
  const first = field(run(tcp({ src: CLIENT, dst: VIP, sport: 45000, flags: TCPF_SYN })).pkt).dst;
  for (let i = 1; i < 6; i++) assert.equal(field(run(tcp({ src: CLIENT, dst: VIP, sport: 45000 + i, flags: TCPF_SYN })).pkt).dst, first);
  const others = [1, 2].map((i) => field(run(tcp({ src: `192.168.1.${100 + i}`, dst: VIP, sport: 45000, flags: TCPF_SYN })).pkt).dst);
  assert.equal(new Set([first, ...others]).size, 3, 'new clients are scheduled by rr');
  let persist = 0;
  for (let s = 0; s < 3; s++) persist += rs[s * L.RS_WORDS + L.RS_PERSIST]!;
  assert.equal(persist, 3, 'one template per client: PersistConn 3');
});

test('the persistence netmask groups clients: a /24 shares one template', () => {
  const { run } = setup([persistent({ netmask: '255.255.255.0' })]);
  const a = field(run(tcp({ src: '192.168.1.10', dst: VIP, flags: TCPF_SYN })).pkt).dst;
  const b = field(run(tcp({ src: '192.168.1.200', dst: VIP, flags: TCPF_SYN })).pkt).dst;
  const c = field(run(tcp({ src: '192.168.2.10', dst: VIP, flags: TCPF_SYN })).pkt).dst;
  assert.equal(a, b);
  assert.notEqual(a, c);
});

test('a template outlives its timeout while it controls a connection, re-armed by 60 s, then expires', () => {
  const { run, table, rs } = setup([persistent({ persistence: 10 })]);
  const now = table.now();
  const syn = run(tcp({ src: CLIENT, dst: VIP, sport: 46000, flags: TCPF_SYN }));
  const rip = field(syn.pkt).dst;
  run(tcp({ src: rip, dst: CLIENT, sport: 8080, dport: 46000, flags: TCPF_SYN | TCPF_ACK }));
  run(tcp({ src: CLIENT, dst: VIP, sport: 46000, flags: TCPF_ACK }));
  assert.equal(table.count(), 2, 'a connection and its template');
  assert.equal(table.expire(now + 10_000), 0, 'the template controls a live connection: re-armed, not removed');
  assert.equal(table.count(), 2);
  assert.equal(table.expire(now + 900_000), 1, 'the connection expires at 900 s');
  assert.equal(table.expire(now + 900_000 + 60_000 - 1), 0);
  assert.equal(table.expire(now + 900_000 + 60_000 + 60_000), 1, 'then the template, at its 60 s re-arm');
  let persist = 0;
  for (let s = 0; s < 3; s++) persist += rs[s * L.RS_WORDS + L.RS_PERSIST]!;
  assert.equal(persist, 0);
});

test('a persistent client keeps its weight-0 server (expire_quiescent_template=0) but not with the option on', () => {
  for (const eqt of [false, true]) {
    const s = setup([persistent()]);
    const cfgDp = { ...s.cfg, dataplane: { ...s.cfg.dataplane, expireQuiescentTemplate: eqt } };
    s.proc.setSnapshot(s.model.apply(cfgDp));
    const first = field(s.run(tcp({ src: CLIENT, dst: VIP, sport: 47000, flags: TCPF_SYN })).pkt).dst;
    const next = structuredClone(cfgDp);
    next.services[0]!.realServers.find((r) => r.address === first)!.weight = 0;
    s.proc.setSnapshot(s.model.apply(next));
    const again = field(s.run(tcp({ src: CLIENT, dst: VIP, sport: 47001, flags: TCPF_SYN })).pkt).dst;
    if (eqt) assert.notEqual(again, first, 'expire_quiescent_template=1: rescheduled');
    else assert.equal(again, first, 'expire_quiescent_template=0: the template still sends it to the weight-0 server');
  }
});

test('a template whose server was deleted is never matched again', () => {
  // UDP: removal deletes at once (a TCP server with connections would drain at weight 0 instead).
  const svc = {
    protocol: 'udp',
    address: VIP,
    port: 53,
    scheduler: 'rr',
    persistence: 300,
    realServers: RS.map((a) => ({ address: a, port: 5353 })),
  };
  const { run, model, cfg, proc } = setup([svc]);
  const first = field(run(udp({ src: CLIENT, dst: VIP, sport: 48000, dport: 53 })).pkt).dst;
  assert.equal(field(run(udp({ src: CLIENT, dst: VIP, sport: 48001, dport: 53 })).pkt).dst, first, 'persistent before the delete');
  const next = structuredClone(cfg);
  next.services[0]!.realServers = next.services[0]!.realServers.filter((r) => r.address !== first);
  proc.setSnapshot(model.apply(next));
  for (let i = 2; i < 5; i++) assert.notEqual(field(run(udp({ src: CLIENT, dst: VIP, sport: 48000 + i, dport: 53 })).pkt).dst, first);
});

// ── full-NAT ────────────────────────────────────────────────────────────────────────────────
function setupFullnat(ports: [number, number] = [20000, 20009]) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'], fullnat: { addresses: ['10.99.0.1'], portMin: ports[0], portMax: ports[1] } },
      services: [{ ...web(), forwarding: 'fullnat' }],
    },
    { outBytes: 4096 },
  );
}

test('full-NAT rewrites both addresses: the server sees a pool address and port, the reply goes back to the client from the VIP', () => {
  const { run } = setupFullnat();
  const r = run(tcp({ src: CLIENT, dst: VIP, sport: 49000, flags: TCPF_SYN }));
  assert.equal(r.v, FORWARD);
  const f = field(r.pkt);
  assert.equal(f.src, '10.99.0.1');
  assert.ok(f.sport >= 20000 && f.sport <= 20009, `pool port ${f.sport}`);
  assert.ok(RS.includes(f.dst));
  assert.equal(f.dport, 8080);
  assert.ok(checksumsValid(r.pkt));
  const reply = run(tcp({ src: f.dst, dst: '10.99.0.1', sport: 8080, dport: f.sport, flags: TCPF_SYN | TCPF_ACK }));
  assert.equal(reply.v, FORWARD);
  const g = field(reply.pkt);
  assert.deepEqual([g.src, g.sport, g.dst, g.dport], [VIP, 80, CLIENT, 49000]);
  assert.ok(checksumsValid(reply.pkt));
});

test('full-NAT gives every flow to one server its own pool port, and refuses (counted) when the pool is exhausted', () => {
  const { run, counters } = setupFullnat([20000, 20003]);
  const seen = new Map<string, Set<number>>();
  let refused = 0;
  for (let i = 0; i < 15; i++) {
    const r = run(tcp({ src: `192.168.2.${i + 1}`, dst: VIP, sport: 50000, flags: TCPF_SYN }));
    if (r.v !== FORWARD) {
      refused++;
      continue;
    }
    const f = field(r.pkt);
    const ports = seen.get(f.dst) ?? new Set<number>();
    assert.ok(!ports.has(f.sport), `port ${f.sport} reused for ${f.dst}`);
    ports.add(f.sport);
    seen.set(f.dst, ports);
  }
  // 3 servers × 4 ports = 12 flows fit; rr spreads evenly, so exactly 3 are refused.
  assert.equal(refused, 3);
  assert.equal(counters[L.C_DROP_BASE + L.DROP_NAMES.indexOf('fullnat_ports_exhausted')], 3);
});

test('a nearly full full-NAT pool still finds its last free ports: the scan after the random probes', () => {
  // 3 servers × 300 ports: every one of the 900 flows must get a port (the random probes alone miss
  // the last free ones), and only the 901st to 903rd are refused.
  const { run, counters } = setupFullnat([30000, 30299]);
  const seen = new Map<string, Set<number>>();
  const verdicts: number[] = [];
  for (let i = 0; i < 903; i++) {
    const r = run(tcp({ src: `192.168.${3 + (i >> 8)}.${i & 255}`, dst: VIP, sport: 50000, flags: TCPF_SYN }));
    verdicts.push(r.v);
    if (r.v !== FORWARD) continue;
    const f = field(r.pkt);
    const ports = seen.get(f.dst) ?? new Set<number>();
    assert.ok(!ports.has(f.sport), `port ${f.sport} reused for ${f.dst}`);
    ports.add(f.sport);
    seen.set(f.dst, ports);
  }
  assert.equal(verdicts.slice(0, 900).filter((v) => v !== FORWARD).length, 0, 'every flow that fits got a port');
  assert.deepEqual(verdicts.slice(900), [DROP, DROP, DROP]);
  for (const ports of seen.values()) assert.equal(ports.size, 300);
  assert.equal(counters[L.C_DROP_BASE + L.DROP_NAMES.indexOf('fullnat_ports_exhausted')], 3);
});

// ── IPIP tunnel ─────────────────────────────────────────────────────────────────────────────
test('tunnel forwarding wraps the unchanged packet in IPIP to the real server and tracks the flow one way', () => {
  const { run, table } = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1' },
    services: [
      { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding: 'tunnel', realServers: RS.map((a) => ({ address: a })) },
    ],
  });
  const syn = tcp({ src: CLIENT, dst: VIP, sport: 51000, flags: TCPF_SYN, payload: new Uint8Array([1, 2, 3]) });
  const original = syn.slice();
  const r = run(syn);
  assert.equal(r.v, REPLY);
  const outer = r.reply!;
  assert.equal(outer.length, syn.length + 20);
  const f = field(outer);
  assert.equal(f.proto, 4);
  assert.equal(f.src, '10.1.1.1');
  assert.ok(RS.includes(f.dst));
  assert.equal(P.sum16(outer, 0, 20, 0), 0xffff, 'outer header checksum');
  assert.deepEqual([...outer.subarray(20)], [...original], 'the inner packet is not changed');
  const o = table.base(0);
  assert.ok(table.i32[o + L.E_FLAGS]! & L.F_NOOUTPUT, 'one-directional entry (INPUT_ONLY states)');
  const ack = tcp({ src: CLIENT, dst: VIP, sport: 51000, flags: TCPF_ACK });
  const again = run(ack);
  assert.equal(again.v, REPLY);
  assert.equal(field(again.reply!).dst, f.dst, 'the flow stays on its server');
  assert.equal(table.i32[o + L.E_STATE], 1, 'SYN then ACK: ESTABLISHED without seeing the server');
  assert.throws(
    () =>
      validateConfig({
        dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1' },
        services: [{ address: VIP, port: 80, forwarding: 'tunnel', realServers: [{ address: RS[0], port: 8080 }] }],
      }),
    /cannot map ports/,
  );
  assert.throws(
    () => validateConfig({ dataplane: { vipCidrs: ['10.96.0.0/24'] }, services: [{ address: VIP, port: 80, forwarding: 'tunnel' }] }),
    /tunnelSource/,
  );
});

test('a tunnel flow whose family has no tunnel source is dropped as no_tunnel_source, not as truncated', () => {
  // The configuration check makes this unreachable from a file; a snapshot without the address
  // (as a reload racing a flow could leave) must still say what happened.
  const { run, proc, model, cfg, drops } = makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24'], tunnelSource: '10.1.1.1' },
    services: [
      { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding: 'tunnel', realServers: RS.map((a) => ({ address: a })) },
    ],
  });
  proc.setSnapshot({ ...model.apply(cfg), tunnelSrc: 0 });
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 51001, flags: TCPF_SYN })).v, DROP);
  assert.equal(drops('no_tunnel_source'), 1);
  assert.equal(drops('truncated'), 0);
});
