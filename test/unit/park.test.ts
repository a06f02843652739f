/**
 * Parking for adoption (lb/core.ts park; README "Several nodes and Redis"): with Redis
 * configured, a packet that may belong to another node's flow — a client's mid-flow TCP segment
 * or non-INIT SCTP packet without an entry, a server's packet without one — is not refused but
 * put in the worker's park ring for the control thread's lookup: whole, its length beside it,
 * published by the tail (conntrack/layout.ts RG_*). Bounded: a packet larger than a slot, or a
 * ring whose PARK_SLOTS slots are all waiting, drops it (park_full). Without Redis, or without
 * a ring, the old answers (RST, no_connection).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Defense } from '../../conntrack/defense';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { DROP, REPLY } from '../../lb/verdict';
import { initValue, sctp, tcp, udp } from '../helpers/packets';
import { makeProcessor, payload } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';
const RS = '10.0.0.1';

function setup(o: { protocol?: string; adopt?: boolean; ring?: boolean } = {}) {
  const protocol = o.protocol ?? 'tcp';
  const p = makeProcessor(
    {
      dataplane: { vipCidrs: ['10.96.0.0/24'] },
      services: [
        { protocol, address: VIP, port: protocol === 'sctp' ? 3868 : 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] },
      ],
    },
    { ring: o.ring ?? true, outBytes: 1 << 16 },
  );
  if (o.adopt ?? true) p.proc.setSnapshot({ ...p.model.apply(p.cfg), adopt: true });
  const r = p.ring ? new Int32Array(p.ring) : new Int32Array(16);
  const bytes = p.ring ? new Uint8Array(p.ring) : new Uint8Array(0);
  /** The packet in park slot `slot`, by the length beside it. */
  const parked = (slot: number) => {
    const len = r[L.parkLensOffset() + slot]!;
    return [...bytes.subarray(L.parkDataOffset(slot), L.parkDataOffset(slot) + len)];
  };
  const tail = () => Atomics.load(r, L.RG_PARK_TAIL);
  return { ...p, r, parked, tail, parkedCount: () => p.counters[L.C_PARKED], full: () => p.counters[L.C_PARK_FULL] };
}

const mid = (sport: number, n = 10, flags = TCPF_ACK) => tcp({ src: CLIENT, dst: VIP, sport, flags, payload: payload(n) });

test('what is parked: a client mid-flow segment (a RST too), a server packet, a non-INIT SCTP packet — each whole, in the next slot', () => {
  const p = setup();
  const pkts = [
    mid(40000),
    mid(40001, 0, TCPF_RST | TCPF_ACK),
    udp({ src: RS, dst: CLIENT, sport: 8080, dport: 5000, payload: payload(33) }),
  ];
  for (const [k, pkt] of pkts.entries()) {
    const copy = [...pkt];
    assert.equal(p.run(pkt).v, DROP);
    assert.equal(p.tail(), k + 1);
    assert.deepEqual(p.parked(k), copy, `slot ${k}`);
  }
  assert.equal(p.parkedCount(), 3);
  assert.equal(p.full(), 0);
  assert.equal(p.drops('no_connection'), 0, 'parked is not refused');
  const s = setup({ protocol: 'sctp' });
  const data = sctp({ src: CLIENT, dst: VIP, sport: 5000, dport: 3868, vtag: 7, chunks: [{ type: 0, value: payload(12) }] });
  const copy = [...data];
  assert.equal(s.run(data).v, DROP);
  assert.deepEqual(s.parked(0), copy);
  // An INIT is not parked: it makes its association.
  assert.equal(
    s.run(sctp({ src: CLIENT, dst: VIP, sport: 5001, dport: 3868, chunks: [{ type: 1, value: initValue(9) }] })).v !== DROP,
    true,
  );
  assert.equal(s.parkedCount(), 1);
});

test('nothing is parked without Redis (RST, no_connection) or without a ring; a SYN is never parked', () => {
  const none = setup({ adopt: false });
  assert.equal(none.run(mid(40010)).v, REPLY, 'a RST, as the kernel answers (counted as no_connection)');
  assert.equal(none.drops('no_connection'), 1);
  assert.equal(none.run(udp({ src: RS, dst: CLIENT, sport: 8080, dport: 5000 })).v, DROP);
  assert.equal(none.drops('no_connection'), 2);
  assert.equal(none.tail(), 0);
  assert.equal(none.parkedCount(), 0);
  const noRing = setup({ ring: false });
  assert.equal(noRing.run(mid(40011)).v, REPLY);
  assert.equal(noRing.run(udp({ src: RS, dst: CLIENT, sport: 8080, dport: 5000 })).v, DROP);
  assert.equal(noRing.drops('no_connection'), 2);
  assert.equal(noRing.parkedCount(), 0);
  const s = setup({ protocol: 'sctp', ring: false });
  assert.equal(
    s.run(sctp({ src: CLIENT, dst: VIP, sport: 5000, dport: 3868, vtag: 7, chunks: [{ type: 0, value: payload(12) }] })).v,
    DROP,
  );
  assert.equal(s.drops('no_connection'), 1);
  assert.equal(s.parkedCount(), 0);
  const p = setup();
  assert.notEqual(p.run(mid(40012, 0, TCPF_SYN)).v, DROP);
  assert.equal(p.tail(), 0);
});

test('a packet of exactly PARK_SLOT_BYTES is parked; one byte more is dropped as park_full', () => {
  const p = setup();
  const n = L.PARK_SLOT_BYTES - 40;
  const fits = mid(40020, n);
  const copy = [...fits];
  assert.equal(p.run(fits).v, DROP);
  assert.equal(p.tail(), 1);
  assert.deepEqual(p.parked(0), copy);
  assert.equal(p.run(mid(40021, n + 1)).v, DROP);
  assert.equal(p.tail(), 1, 'not published');
  assert.equal(p.full(), 1);
  assert.equal(p.parkedCount(), 1);
});

test('PARK_SLOTS packets wait at most: the next is park_full until the control thread takes one, then it goes in the freed slot', () => {
  const p = setup();
  for (let i = 0; i < L.PARK_SLOTS; i++) assert.equal(p.run(mid(10000 + i, i & 7)).v, DROP);
  assert.equal(p.tail(), L.PARK_SLOTS);
  assert.equal(p.parkedCount(), L.PARK_SLOTS);
  assert.equal(p.full(), 0);
  assert.equal(p.run(mid(20000)).v, DROP);
  assert.equal(p.full(), 1);
  assert.equal(p.tail(), L.PARK_SLOTS);
  Atomics.store(p.r, L.RG_PARK_HEAD, 1); // the control thread took slot 0
  const waiting = p.parked(1);
  const next = mid(20001, L.PARK_SLOT_BYTES - 40); // fills slot 0 to its last byte
  const copy = [...next];
  assert.equal(p.run(next).v, DROP);
  assert.equal(p.tail(), L.PARK_SLOTS + 1);
  assert.deepEqual(p.parked(0), copy, 'slot = tail mod PARK_SLOTS');
  assert.deepEqual(p.parked(1), waiting, 'slot 1, still waiting, untouched');
  assert.equal(p.run(mid(20002)).v, DROP);
  assert.equal(p.full(), 2);
});

test("with the SYN proxy on, an ACK without a valid cookie is parked (another node's flow, maybe) instead of reset", () => {
  for (const ring of [true, false]) {
    const p = makeProcessor(
      {
        dataplane: { vipCidrs: ['10.96.0.0/24'] },
        services: [{ protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: RS, port: 8080 }] }],
        defense: { synProxy: 3 },
      },
      { ring, outBytes: 1 << 16 },
    );
    new Defense(p.table, p.cfg.defense);
    p.proc.setSnapshot({ ...p.model.apply(p.cfg), adopt: true });
    assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 40000, flags: TCPF_SYN })).v, REPLY, 'a cookie');
    const stray = mid(41000, 0);
    const copy = [...stray];
    if (ring) {
      assert.equal(p.run(stray).v, DROP);
      assert.equal(p.counters[L.C_PARKED], 1);
      assert.equal(p.drops('bad_cookie'), 0);
      const r = new Int32Array(p.ring!);
      const at = L.parkDataOffset(0);
      assert.deepEqual([...new Uint8Array(p.ring!).subarray(at, at + r[L.parkLensOffset()]!)], copy);
    } else {
      assert.equal(p.run(stray).v, REPLY, 'no ring: the RST');
      assert.equal(p.drops('bad_cookie'), 1);
      assert.equal(p.counters[L.C_PARKED], 0);
    }
  }
});
