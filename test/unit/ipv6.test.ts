/**
 * IPv6 through the packet path: IPv6 keys live beside IPv4 ones in one table without colliding,
 * masq and full-NAT rewrite 128-bit addresses with valid checksums, and ICMPv6 is answered,
 * generated and translated as IPVS does. Address text: net-addr.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { checksumsValid6, field6, icmp6, initValue, sctp6, sctp6CrcValid, tcp, tcp6, udp6 } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = 'fd00:96::10';
const CLIENT = '2001:db8:1::100';
const RS = ['fd00:10::1', 'fd00:10::2', 'fd00:10::3'];

function setup(forwarding = 'masq', protocol = 'tcp', extra: Record<string, unknown> = {}) {
  return makeProcessor({
    dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], fullnat: { addresses: ['fd00:99::1'] } },
    services: [
      { protocol, address: VIP, port: 80, scheduler: 'rr', forwarding, realServers: RS.map((a) => ({ address: a, port: 8080 })), ...extra },
      { protocol: 'tcp', address: '10.96.0.10', port: 80, scheduler: 'rr', realServers: [{ address: '10.0.0.1', port: 8080 }] },
    ],
  });
}

test('config: IPv6 services and CIDRs are accepted and spelled one way; families must match', () => {
  const cfg = validateConfig({
    dataplane: { vipCidrs: ['FD00:96::/64'] },
    services: [{ address: 'FD00:96:0::10', port: 80, realServers: [{ address: 'fd00:10:0::1', port: 8080 }] }],
  });
  assert.equal(cfg.services[0]!.address, 'fd00:96::10');
  assert.equal(cfg.services[0]!.realServers[0]!.address, 'fd00:10::1');
  assert.throws(
    () =>
      validateConfig({
        dataplane: { vipCidrs: ['fd00:96::/64'] },
        services: [{ address: VIP, port: 80, realServers: [{ address: '10.0.0.1' }] }],
      }),
    /not of the service's address family/,
  );
  assert.throws(
    () => validateConfig({ dataplane: { vipCidrs: ['fd00:96::/64'] }, services: [{ address: 'fd00:97::1', port: 80 }] }),
    /not inside dataplane.vipCidrs/,
  );
  assert.throws(
    () =>
      validateConfig({
        dataplane: { vipCidrs: ['fd00:96::/64'] },
        services: [{ address: VIP, port: 80, persistence: 60, netmask: '255.255.255.0' }],
      }),
    /prefix length/,
  );
});

test('IPv6 masq: a SYN goes to a real server, the reply comes back from [VIP]:80, checksums valid', () => {
  const { run } = setup();
  const syn = run(tcp6({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: TCPF_SYN, payload: new Uint8Array(17) }));
  assert.equal(syn.v, FORWARD);
  const f = field6(syn.pkt);
  assert.ok(RS.includes(f.dst));
  assert.equal(f.src, CLIENT);
  assert.equal(f.dport, 8080);
  assert.ok(checksumsValid6(syn.pkt));
  const synack = run(tcp6({ src: f.dst, dst: CLIENT, sport: 8080, dport: 40000, flags: TCPF_SYN | TCPF_ACK }));
  assert.equal(synack.v, FORWARD);
  const g = field6(synack.pkt);
  assert.deepEqual([g.src, g.sport, g.dst, g.dport], [VIP, 80, CLIENT, 40000]);
  assert.ok(checksumsValid6(synack.pkt));
  const next = run(tcp6({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: TCPF_ACK }));
  assert.equal(field6(next.pkt).dst, f.dst, 'the flow keeps its server');
});

test('IPv6 and IPv4 flows with the same low 32 bits and ports are different flows', () => {
  const { run, table } = setup();
  // 10.0.0.100 is 0x0a000064; a v6 client ending in ::a00:64 shares those 32 bits.
  const v6 = run(tcp6({ src: '2001:db8::a00:64', dst: VIP, sport: 41000, dport: 80, flags: TCPF_SYN }));
  const v4 = run(tcp({ src: '10.0.0.100', dst: '10.96.0.10', sport: 41000, dport: 80, flags: TCPF_SYN }));
  assert.equal(v6.v, FORWARD);
  assert.equal(v4.v, FORWARD);
  assert.equal(table.count(), 2);
});

test('IPv6 full-NAT UDP: the pool address and a port both ways', () => {
  const { run } = setup('fullnat', 'udp');
  const q = run(udp6({ src: CLIENT, dst: VIP, sport: 5353, dport: 80, payload: new Uint8Array(30) }));
  const f = field6(q.pkt);
  assert.equal(f.src, 'fd00:99::1');
  assert.ok(checksumsValid6(q.pkt));
  const r = run(udp6({ src: f.dst, dst: f.src, sport: 8080, dport: f.sport, payload: new Uint8Array(9) }));
  const g = field6(r.pkt);
  assert.deepEqual([g.src, g.sport, g.dst, g.dport], [VIP, 80, CLIENT, 5353]);
  assert.ok(checksumsValid6(r.pkt));
});

test('IPv6 refusals: no service → RST or ICMPv6 port unreachable from the VIP', () => {
  const { run } = setup();
  const rst = run(tcp6({ src: CLIENT, dst: VIP, sport: 40001, dport: 81, flags: TCPF_SYN }));
  assert.equal(rst.v, REPLY);
  const f = field6(rst.reply!);
  assert.deepEqual([f.src, f.dst, f.sport, f.dport, f.flags], [VIP, CLIENT, 81, 40001, TCPF_RST | TCPF_ACK]);
  assert.ok(checksumsValid6(rst.reply!));
  const un = run(udp6({ src: CLIENT, dst: VIP, sport: 5000, dport: 81 }));
  const g = field6(un.reply!);
  assert.deepEqual([g.src, g.dst, g.icmpType, g.icmpCode], [VIP, CLIENT, P.ICMP6_DST_UNREACH, P.ICMP6_PORT_UNREACH]);
  assert.ok(checksumsValid6(un.reply!));
});

test('ICMPv6 echo to the VIP is answered; link-local chatter of the device is dropped', () => {
  const { run, drops } = setup();
  const echo = run(icmp6({ src: CLIENT, dst: VIP, type: P.ICMP6_ECHO_REQUEST, info: 0x10001 }));
  assert.equal(echo.v, FORWARD);
  const f = field6(echo.pkt);
  assert.deepEqual([f.src, f.dst, f.icmpType], [VIP, CLIENT, P.ICMP6_ECHO_REPLY]);
  assert.ok(checksumsValid6(echo.pkt));
  assert.equal(run(icmp6({ src: 'fe80::1', dst: 'ff02::2', type: 133 })).v, DROP);
  assert.equal(drops('icmp_ignored'), 1);
});

test('IPv6 path MTU: larger than the route to the server → Packet Too Big from the VIP; errors about a reply reach the server', () => {
  const { run, setMtu, drops } = setup();
  setMtu(1400);
  const syn = run(tcp6({ src: CLIENT, dst: VIP, sport: 40002, dport: 80, flags: TCPF_SYN }));
  const rip = field6(syn.pkt).dst;
  const big = run(tcp6({ src: CLIENT, dst: VIP, sport: 40002, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(1400) }));
  assert.equal(big.v, REPLY);
  const f = field6(big.reply!);
  assert.deepEqual([f.src, f.dst, f.icmpType], [VIP, CLIENT, P.ICMP6_PACKET_TOO_BIG]);
  assert.equal(P.u32(big.reply!, 44), 1400);
  assert.ok(checksumsValid6(big.reply!));
  assert.equal(drops('too_big'), 1);
  // A router on the client's path reports a reply too big, to the VIP: it goes to the server.
  const reply = run(tcp6({ src: rip, dst: CLIENT, sport: 8080, dport: 40002, flags: TCPF_ACK, payload: new Uint8Array(1300) }));
  const err = icmp6({ src: '2001:db8:7::1', dst: VIP, type: P.ICMP6_PACKET_TOO_BIG, info: 1280, payload: reply.pkt.slice(0, 1232) });
  const t = run(err);
  assert.equal(t.v, FORWARD);
  const g = field6(t.pkt);
  assert.equal(g.dst, rip);
  const q = field6(t.pkt, 48);
  assert.deepEqual([q.src, q.sport, q.dst, q.dport], [rip, 8080, CLIENT, 40002], "the quoted packet is the server's own");
  assert.ok(checksumsValid6(t.pkt));
});

test('IPv6 persistence: one template per client prefix (-M as a prefix length)', () => {
  const { run } = setup('masq', 'tcp', { persistence: 60, netmask: 64 });
  const server = (src: string, sport: number) => field6(run(tcp6({ src, dst: VIP, sport, dport: 80, flags: TCPF_SYN })).pkt).dst;
  const first = server('2001:db8:1::1', 42000);
  // The whole /64 sticks, down to its last interface-identifier bit.
  const inPrefix = ['2001:db8:1::2', '2001:db8:1::6', '2001:db8:1:0:ffff:ffff:ffff:ffff', '2001:db8:1:0:8000::'];
  assert.deepEqual(
    inPrefix.map((c, i) => server(c, 42001 + i)),
    inPrefix.map(() => first),
    'the whole /64 sticks to one server',
  );
  // The neighbouring /64 (differs in bit 63 only) gets its own template: rr's next server.
  const next = server('2001:db8:1:1::1', 43000);
  assert.ok(RS.includes(next));
  assert.notEqual(next, first, 'another /64 is scheduled afresh (rr moves on), not pinned to the first one');
  assert.equal(server('2001:db8:1:1::2', 43001), next);
  assert.equal(server('2001:db8:1::7', 43002), first, 'the first prefix is still pinned');
});

test('SCTP over IPv6: an INIT goes to a real server and the INIT ACK comes back from [VIP], CRC32c valid', () => {
  const { run } = setup('masq', 'sctp');
  const init = sctp6({ src: CLIENT, dst: VIP, sport: 5000, dport: 80, chunks: [{ type: 1, value: initValue(0x1234) }] });
  assert.equal(run(init).v, FORWARD);
  const f = field6(init);
  assert.ok(RS.includes(f.dst));
  assert.equal(f.dport, 8080);
  assert.ok(sctp6CrcValid(init), 'CRC recomputed after the rewrite');
  const ack = sctp6({ src: f.dst, dst: CLIENT, sport: 8080, dport: 5000, vtag: 0x1234, chunks: [{ type: 2, value: initValue(0x5678) }] });
  assert.equal(run(ack).v, FORWARD);
  const g = field6(ack);
  assert.deepEqual([g.src, g.sport, g.dst, g.dport], [VIP, 80, CLIENT, 5000]);
  assert.ok(sctp6CrcValid(ack));
});

test('kube-proxy excludeCIDRs of both families are kept (net-addr.test.ts: matched per family)', () => {
  const cfg = validateConfig({
    ipvs: { excludeCIDRs: ['10.96.0.0/12', 'fd00:96::/64'] },
    dataplane: { vipCidrs: ['fd00:96::/64'] },
    services: [],
  });
  assert.deepEqual(cfg.kubeProxy?.excludeCIDRs, ['10.96.0.0/12', 'fd00:96::/64']);
});
