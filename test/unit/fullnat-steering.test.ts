/**
 * Full-NAT pool ports chosen by queue (lb/xmit.ts steeredPort, docs/steering.md): where uvs's
 * program steers the device, a worker prefers pool ports whose server→client packets the program
 * sends back to its own queue, so both directions of a full-NAT connection are read by one worker.
 * Judged by lb/steering.ts steeringQueue on the server's real reply packet — the specification
 * test/integration/steering.test.ts checks against the kernel. A preference, never a limit: no
 * pool port is lost to it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { steeringKey, steeringQueue } from '../../lb/steering';
import { DROP, FORWARD } from '../../lb/verdict';
import { field, field6, tcp, tcp6 } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const VIP6 = 'fd00:96::10';
const RS = '10.0.0.1';
const RS6 = 'fd00:10::1';
const K0 = 0x5eed1234;
const K1 = 0x0badcafe;
/** The program's key as uvsd builds it from the configuration below. */
const KEY = steeringKey(K0, K1, ['10.96.0.0/24', 'fd00:96::/64'], ['10.99.0.1', 'fd00:99::1']);

function fullnat(range: { portMin?: number; portMax?: number } = {}, rport = 8080) {
  return makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'], fullnat: { addresses: ['10.99.0.1', 'fd00:99::1'], ...range } },
      services: [
        { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', forwarding: 'fullnat', realServers: [{ address: RS, port: rport }] },
        { protocol: 'tcp', address: VIP6, port: 80, scheduler: 'rr', forwarding: 'fullnat', realServers: [{ address: RS6, port: rport }] },
      ],
    },
    { capacity: 4096 },
  );
}

/** Opens n connections from distinct client ports; the queue the program gives each one's server reply. */
function replyQueues(p: ReturnType<typeof fullnat>, n: number, queues: number, v6 = false): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const sport = 30000 + i;
    if (v6) {
      const syn = tcp6({ src: `2001:db8::${(i % 200) + 1}`, dst: VIP6, sport, dport: 80, flags: TCPF_SYN });
      assert.equal(p.run(syn).v, FORWARD);
      const f = field6(syn);
      const reply = tcp6({ src: f.dst, dst: f.src, sport: f.dport, dport: f.sport, flags: TCPF_SYN | TCPF_ACK });
      out.push(steeringQueue(reply, KEY, queues));
    } else {
      const syn = tcp({ src: `192.168.${i >> 8}.${(i & 255) + 1}`, dst: VIP, sport, dport: 80, flags: TCPF_SYN });
      assert.equal(p.run(syn).v, FORWARD);
      const f = field(syn);
      const reply = tcp({ src: f.dst, dst: f.src, sport: f.dport, dport: f.sport, flags: TCPF_SYN | TCPF_ACK });
      out.push(steeringQueue(reply, KEY, queues));
    }
  }
  return out;
}

for (const queues of [2, 3]) {
  test(`${queues} queues: every full-NAT connection's server replies are steered to the worker that opened it, IPv4 and IPv6`, () => {
    for (let q = 0; q < queues; q++) {
      const p = fullnat();
      p.proc.setSteering(K0, K1, q, queues);
      for (const v6 of [false, true]) {
        const got = replyQueues(p, 300, queues, v6);
        assert.deepEqual(new Set(got), new Set([q]), `worker ${q} of ${queues}, IPv${v6 ? 6 : 4}`);
      }
    }
  });
}

test('the control: without the program the pool ports fall on any queue', () => {
  const p = fullnat();
  const got = replyQueues(p, 300, 2);
  const mine = got.filter((q) => q === 0).length;
  assert.ok(mine > 90 && mine < 210, `${mine} of 300 on queue 0`);
});

test('a pool whose ports all lie below the server port is steered too (the reply is keyed on its 4-tuple)', () => {
  const p = fullnat({ portMin: 2000, portMax: 2999 });
  p.proc.setSteering(K0, K1, 1, 2);
  const lports: number[] = [];
  for (let i = 0; i < 200; i++) {
    const syn = tcp({ src: '192.168.1.1', dst: VIP, sport: 30000 + i, dport: 80, flags: TCPF_SYN });
    assert.equal(p.run(syn).v, FORWARD);
    const f = field(syn);
    lports.push(f.sport);
    const reply = tcp({ src: f.dst, dst: f.src, sport: f.dport, dport: f.sport, flags: TCPF_SYN | TCPF_ACK });
    assert.equal(steeringQueue(reply, KEY, 2), 1, `pool port ${f.sport}`);
  }
  assert.ok(
    lports.every((l) => l >= 2000 && l <= 2999),
    'in the range',
  );
  assert.equal(new Set(lports).size, 200, 'each its own port');
});

test('no port is lost to the preference: a 100-port pool with steering serves 100 connections to one server, the 101st is refused', () => {
  const p = fullnat({ portMin: 20000, portMax: 20099 }, 80);
  p.proc.setSteering(K0, K1, 0, 2);
  const lports = new Set<number>();
  for (let i = 0; i < 100; i++) {
    const syn = tcp({ src: '192.168.1.1', dst: VIP, sport: 30000 + i, dport: 80, flags: TCPF_SYN });
    assert.equal(p.run(syn).v, FORWARD, `connection ${i}`);
    lports.add(field(syn).sport);
    // The handshake's ACK keeps the flow (and its port) open.
    assert.equal(p.run(tcp({ src: '192.168.1.1', dst: VIP, sport: 30000 + i, dport: 80, flags: TCPF_ACK })).v, FORWARD);
  }
  assert.equal(lports.size, 100, 'every port of the pool, those steered elsewhere too');
  assert.equal(p.run(tcp({ src: '192.168.1.1', dst: VIP, sport: 31000, dport: 80, flags: TCPF_SYN })).v, DROP);
  assert.equal(p.drops('fullnat_ports_exhausted'), 1);
});
