/**
 * When a worker queues a flow for its Redis write (README "Several nodes and Redis"): on its 3rd
 * packet from the client, every 50th after, on every state change, and once half its timeout has
 * passed since the last write — the kernel sync daemon's rules (sync_threshold 3, sync_period 50)
 * plus a refresh. Driven through the packet path with a real ring; the expectations are written
 * from those rules, not from the table's code.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCP_STATE_NAMES, TCPF_ACK, TCPF_FIN, TCPF_SYN } from '../../conntrack/state';
import { tcp, udp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = '10.0.0.1';

function setup(protocol: 'tcp' | 'udp', sync = true) {
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'] },
      services: [{ protocol, address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] }],
    },
    { ring: true },
  );
  p.table.setSync(sync);
  const r = new Int32Array(p.ring!);
  let seen = 0;
  /** Runs a packet; true when it queued a sync event (the ring's tail moved). */
  const step = (pkt: Uint8Array): boolean => {
    p.run(pkt);
    const tail = Atomics.load(r, L.RG_SYNC_TAIL);
    const n = tail - seen;
    seen = tail;
    Atomics.store(r, L.RG_SYNC_HEAD, tail); // consumed, as the control thread does
    assert.ok(n <= 1, `one event per packet at most, got ${n}`);
    return n === 1;
  };
  const state = () => {
    let s = '';
    p.table.forEach((_e, o) => (s = TCP_STATE_NAMES[p.table.i32[o + L.E_STATE]!]!));
    return s;
  };
  return { ...p, step, state };
}

const fromClient = (i = 0) => udp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, payload: new Uint8Array([i & 255]) });
const fromServer = () => udp({ src: RS, dst: CLIENT, sport: 8080, dport: 40000 });

test('a flow is queued on its 3rd client packet and every 50th after (53, 103, 153…); replies do not count', () => {
  const { step } = setup('udp');
  const synced: number[] = [];
  for (let i = 1; i <= 160; i++) {
    if (step(fromClient(i))) synced.push(i);
    assert.equal(step(fromServer()), false, `reply after packet ${i}`);
  }
  assert.deepEqual(synced, [3, 53, 103, 153]);
});

test('a flow is queued again once half its timeout has passed since its last write (UDP 300 s: after 150 s)', () => {
  const { step, setNow, now } = setup('udp');
  for (let i = 1; i <= 3; i++) step(fromClient(i)); // written at packet 3
  const t0 = now();
  setNow((t0 + 150_000) | 0);
  assert.equal(step(fromClient(4)), false, 'exactly half: not yet');
  setNow((t0 + 150_001) | 0);
  assert.equal(step(fromClient(5)), true, 'past half the timeout');
  assert.equal(step(fromClient(6)), false, 'the refresh restarts the clock');
  // Replies refresh too: a flow that only the server talks on is kept alive in Redis.
  setNow((now() + 150_001) | 0);
  assert.equal(step(fromServer()), true);
});

test('every TCP state change queues the flow, whatever its packet count', () => {
  const { step, state } = setup('tcp');
  const c = (flags: number) => tcp({ src: CLIENT, dst: VIP, sport: 41000, flags });
  const s = (flags: number) => tcp({ src: RS, dst: CLIENT, sport: 8080, dport: 41000, flags });
  const seq: [string, Uint8Array][] = [
    ['client SYN', c(TCPF_SYN)],
    ['server SYN-ACK', s(TCPF_SYN | TCPF_ACK)],
    ['client ACK', c(TCPF_ACK)],
    ['client data', c(TCPF_ACK)],
    ['server data', s(TCPF_ACK)],
    ['client data', c(TCPF_ACK)],
    ['client FIN', c(TCPF_FIN | TCPF_ACK)],
    ['server ACK', s(TCPF_ACK)],
    ['server FIN', s(TCPF_FIN | TCPF_ACK)],
    ['client ACK', c(TCPF_ACK)],
  ];
  let clientPkts = 0;
  let changes = 0;
  let prev = 'NONE';
  for (const [what, pkt] of seq) {
    const fromClientSide = pkt[12] === 192;
    if (fromClientSide) clientPkts++;
    const queued = step(pkt);
    const now = state();
    const changed = now !== prev;
    if (changed) changes++;
    assert.equal(queued, changed || (fromClientSide && clientPkts === 3), `${what}: ${prev} → ${now}`);
    prev = now;
  }
  assert.ok(changes >= 4, `the sequence went through ${changes} state changes`);
});

test('with sync off (no Redis) nothing is queued', () => {
  const { step } = setup('udp', false);
  for (let i = 1; i <= 60; i++) assert.equal(step(fromClient(i)), false);
});
