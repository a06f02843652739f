/**
 * What the dataplane generates (RST, ICMP port unreachable, echo reply, fragmentation needed /
 * Packet Too Big) and to whom: never an answer to a RST, never to a source the kernel routes back
 * into the device (a VIP, the full-NAT pool) or that is no unicast host, and no more than the
 * kernel's ICMP limits allow (docs/generated-packets.md). Packet in → verdict and answer out.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { TCPF_ACK, TCPF_RST, TCPF_SYN } from '../../conntrack/state';
import { validateConfig } from '../../control/config';
import { UvsError } from '../../control/errors';
import { DROP, FORWARD, REPLY } from '../../lb/verdict';
import * as P from '../../net/packet';
import { field, field6, icmp6, icmpEcho, tcp, tcp6, udp, udp6 } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const VIP2 = '10.96.0.20'; // an unused address of the VIP range
const VIP6 = 'fd00:96::10';
const VIP6B = 'fd00:96::20';
const CLIENT = '192.168.1.100';
const CLIENT6 = 'fd00:1::100';

function setup(generatedLimit?: Record<string, unknown>) {
  return makeProcessor({
    dataplane: {
      vipCidrs: ['10.96.0.0/24', 'fd00:96::/64'],
      fullnat: { addresses: ['10.99.0.1', 'fd00:99::1'] },
      ...(generatedLimit ? { generatedLimit } : {}),
    },
    services: [
      { protocol: 'tcp', address: VIP, port: 80, scheduler: 'rr', realServers: [{ address: '10.0.0.1', port: 8080 }] },
      { protocol: 'tcp', address: VIP6, port: 80, scheduler: 'rr', realServers: [{ address: 'fd00:2::1', port: 8080 }] },
    ],
  });
}

const gen = (counters: Float64Array, kind: (typeof L.GEN_KIND_NAMES)[number], result: (typeof L.GEN_RESULT_NAMES)[number]): number => {
  const v = counters[L.C_GEN_BASE + L.GEN_KIND_NAMES.indexOf(kind) * L.GEN_RESULTS + L.GEN_RESULT_NAMES.indexOf(result)];
  assert.ok(v !== undefined, `the counter words have no generated-packet counter ${kind}/${result}`);
  return v;
};

/**
 * Feeds each answer back in as the kernel would: an answer to an address inside the VIP ranges is
 * routed into the device again. Returns how many answers one packet set off (capped at 1000).
 */
function answersSetOff(run: (p: Uint8Array) => { v: number; reply: Uint8Array | null }, first: Uint8Array): number {
  let pkt = first;
  for (let n = 0; n < 1000; n++) {
    const r = run(pkt);
    if (r.v !== REPLY || r.reply === null) return n;
    const dst = r.reply[0]! >> 4 === 6 ? field6(r.reply).dst : field(r.reply).dst;
    if (!dst.startsWith('10.96.0.') && !dst.startsWith('fd00:96::')) return n + 1;
    pkt = r.reply;
  }
  return 1000;
}

test('a RST or SYN to an unused port of one VIP with another VIP as its source sets off no answer (IPv4, IPv6)', () => {
  for (const flags of [TCPF_RST, TCPF_SYN, TCPF_RST | TCPF_ACK, TCPF_ACK]) {
    const { run } = setup();
    assert.equal(answersSetOff(run, tcp({ src: VIP2, dst: VIP, sport: 1234, dport: 22, flags })), 0, `IPv4 flags ${flags}`);
    assert.equal(answersSetOff(run, tcp6({ src: VIP6B, dst: VIP6, sport: 1234, dport: 22, flags })), 0, `IPv6 flags ${flags}`);
    // The same to a service port: no entry (mid-flow), or a SYN that starts a flow (forwarded, no answer).
    assert.equal(answersSetOff(run, tcp({ src: VIP2, dst: VIP, sport: 1235, dport: 80, flags })), 0, `IPv4 service port, flags ${flags}`);
    assert.equal(
      answersSetOff(run, tcp6({ src: VIP6B, dst: VIP6, sport: 1235, dport: 80, flags })),
      0,
      `IPv6 service port, flags ${flags}`,
    );
  }
});

test('a RST is never answered, on a port without a service or without an entry, either family', () => {
  const { run, drops, counters } = setup();
  for (const pkt of [
    tcp({ src: CLIENT, dst: VIP, sport: 1000, dport: 22, flags: TCPF_RST }),
    tcp({ src: CLIENT, dst: VIP, sport: 1001, dport: 80, flags: TCPF_RST }),
    tcp({ src: CLIENT, dst: VIP, sport: 1002, dport: 22, flags: TCPF_RST | TCPF_ACK }),
    tcp6({ src: CLIENT6, dst: VIP6, sport: 1000, dport: 22, flags: TCPF_RST }),
    tcp6({ src: CLIENT6, dst: VIP6, sport: 1001, dport: 80, flags: TCPF_RST | TCPF_ACK }),
  ]) {
    assert.equal(run(pkt).v, DROP);
  }
  assert.equal(drops('no_service'), 3);
  assert.equal(drops('no_connection'), 2);
  assert.equal(gen(counters, 'reset', 'sent'), 0);
});

test('nothing is sent to a VIP, the full-NAT pool, multicast, broadcast, loopback, unspecified or reserved source', () => {
  const bad4 = [VIP2, '10.99.0.1', '224.0.0.1', '239.1.2.3', '255.255.255.255', '240.0.0.1', '127.0.0.1', '0.0.0.0', '0.1.2.3'];
  const bad6 = [VIP6B, 'fd00:99::1', 'ff02::1', 'ff05::1:3', '::', '::1', '::ffff:10.0.0.1', '::10.0.0.1'];
  const { run, drops, counters, setMtu } = setup();
  let n = 0;
  for (const src of bad4) {
    assert.equal(run(tcp({ src, dst: VIP, sport: 2000, dport: 22, flags: TCPF_SYN })).v, DROP, `RST to ${src}`);
    assert.equal(run(udp({ src, dst: VIP, sport: 2000, dport: 53 })).v, DROP, `port unreachable to ${src}`);
    assert.equal(run(icmpEcho({ src, dst: VIP })).v, DROP, `echo reply to ${src}`);
    assert.equal(run(tcp({ src, dst: VIP, sport: 2001, dport: 80, flags: TCPF_ACK })).v, DROP, `RST (no entry) to ${src}`);
    n += 4;
  }
  for (const src of bad6) {
    assert.equal(run(tcp6({ src, dst: VIP6, sport: 2000, dport: 22, flags: TCPF_SYN })).v, DROP, `RST to ${src}`);
    assert.equal(run(udp6({ src, dst: VIP6, sport: 2000, dport: 53 })).v, DROP, `port unreachable to ${src}`);
    assert.equal(run(icmp6({ src, dst: VIP6, type: P.ICMP6_ECHO_REQUEST })).v, DROP, `echo reply to ${src}`);
    n += 3;
  }
  assert.equal(drops('unanswerable_source'), n);
  assert.equal(drops('no_service'), 0, 'each packet counted once, under the reason nothing was sent');
  assert.equal(
    gen(counters, 'reset', 'bad_destination') + gen(counters, 'unreachable', 'bad_destination') + gen(counters, 'echo', 'bad_destination'),
    n,
  );
  // Fragmentation needed / Packet Too Big: a flow from a VIP source (its SYN is forwarded) gets none.
  setMtu(1000);
  const big = new Uint8Array(1400);
  assert.equal(run(tcp({ src: VIP2, dst: VIP, sport: 2100, dport: 80, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(run(tcp({ src: VIP2, dst: VIP, sport: 2100, dport: 80, flags: TCPF_ACK, payload: big })).v, DROP);
  assert.equal(run(tcp6({ src: VIP6B, dst: VIP6, sport: 2100, dport: 80, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(run(tcp6({ src: VIP6B, dst: VIP6, sport: 2100, dport: 80, flags: TCPF_ACK, payload: big })).v, DROP);
  assert.equal(gen(counters, 'too_big', 'bad_destination'), 2);
  // An ordinary client is still answered, every kind.
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 2200, dport: 22, flags: TCPF_SYN })).v, REPLY);
  assert.equal(run(icmpEcho({ src: CLIENT, dst: VIP })).v, FORWARD);
  assert.equal(run(tcp6({ src: CLIENT6, dst: VIP6, sport: 2200, dport: 22, flags: TCPF_SYN })).v, REPLY);
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 2300, dport: 80, flags: TCPF_SYN })).v, FORWARD);
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 2300, dport: 80, flags: TCPF_ACK, payload: big })).v, REPLY);
  assert.equal(gen(counters, 'too_big', 'sent'), 1);
});

test('answers to one source are limited as icmp_ratelimit limits them: a burst of 6, then one per second', () => {
  const { run, setNow, now, drops, counters } = setup();
  const syn = (src: string, sport: number) => run(tcp({ src, dst: VIP, sport, dport: 22, flags: TCPF_SYN })).v;
  const t0 = now();
  const first = Array.from({ length: 10 }, (_, i) => syn(CLIENT, 3000 + i));
  assert.deepEqual(first, [REPLY, REPLY, REPLY, REPLY, REPLY, REPLY, DROP, DROP, DROP, DROP]);
  assert.equal(drops('rate_limited'), 4);
  assert.equal(gen(counters, 'reset', 'rate_limited'), 4);
  assert.equal(gen(counters, 'reset', 'sent'), 6);
  setNow(t0 + 999);
  assert.equal(syn(CLIENT, 3100), DROP, 'not yet a second');
  setNow(t0 + 1000);
  assert.equal(syn(CLIENT, 3101), REPLY, 'one more after a second');
  assert.equal(syn(CLIENT, 3102), DROP);
  setNow(t0 + 10_000);
  assert.equal(
    Array.from({ length: 8 }, (_, i) => syn(CLIENT, 3200 + i)).filter((v) => v === REPLY).length,
    6,
    'the burst again, never more',
  );
  // Other sources have their own budget (hashed into 4096 slots: a shared slot is possible, rare).
  const others = Array.from({ length: 20 }, (_, i) => syn(`192.168.7.${i + 1}`, 3300));
  assert.ok(others.filter((v) => v === REPLY).length >= 18, `other sources answered: ${others.filter((v) => v === REPLY).length}/20`);
  // IPv6 sources are limited the same way; port unreachable is a limited kind too.
  const u6 = Array.from({ length: 8 }, (_, i) => run(udp6({ src: CLIENT6, dst: VIP6, sport: 3400 + i, dport: 53 })).v);
  assert.deepEqual(u6.filter((v) => v === REPLY).length, 6);
  assert.equal(gen(counters, 'unreachable', 'rate_limited'), 2);
});

test("a source's bucket never holds more than perSourceBurst answers, however long it was idle, and the configured burst is the one used", () => {
  // inet_peer_xrlim_allow: credit += elapsed, capped at XRLIM_BURST_FACTOR × timeout. A source
  // answered once keeps 5 of its 6 answers; 60 s later it must have 6 again, not 5 + 6.
  const syns = (p: ReturnType<typeof setup>, sport: number, n: number) =>
    Array.from({ length: n }, (_, i) => p.run(tcp({ src: CLIENT, dst: VIP, sport: sport + i, dport: 22, flags: TCPF_SYN })).v).filter(
      (v) => v === REPLY,
    ).length;
  const dflt = setup();
  const t0 = dflt.now();
  assert.equal(syns(dflt, 3000, 1), 1);
  dflt.setNow(t0 + 60_000);
  assert.equal(syns(dflt, 3100, 12), 6, 'a partly used bucket refills to the burst, not beyond');
  // perSourceBurst 3 (half a second each): a new source gets 3, and 3 again after any idle time.
  const three = setup({ perSourceBurst: 3, perSourceInterval: '500ms' });
  const t1 = three.now();
  assert.equal(syns(three, 3200, 10), 3, 'a never-answered source starts with the configured burst');
  three.setNow(t1 + 499);
  assert.equal(syns(three, 3300, 1), 0, 'one answer per 500 ms');
  three.setNow(t1 + 500);
  assert.equal(syns(three, 3400, 3), 1);
  three.setNow(t1 + 600_000);
  assert.equal(syns(three, 3500, 10), 3, 'refilled to the configured burst after 10 minutes');
});

test('echo replies and fragmentation needed are not limited by default (icmp_ratemask; PMTU discovery never is)', () => {
  const { run, setMtu, counters } = setup();
  for (let i = 0; i < 30; i++) assert.equal(run(icmpEcho({ src: CLIENT, dst: VIP })).v, FORWARD);
  setMtu(1000);
  assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 4000, dport: 80, flags: TCPF_SYN })).v, FORWARD);
  for (let i = 0; i < 30; i++)
    assert.equal(run(tcp({ src: CLIENT, dst: VIP, sport: 4000, dport: 80, flags: TCPF_ACK, payload: new Uint8Array(1400) })).v, REPLY);
  assert.equal(gen(counters, 'echo', 'sent'), 30);
  assert.equal(gen(counters, 'too_big', 'sent'), 30);
});

test('the global limit caps a worker near its share of perSecond with a randomized burst, refilled over time', () => {
  // No per-source limit: every packet from a new source, as a spoofing flood sends them.
  const { run, setNow, now, counters } = setup({ perSourceInterval: 0, perSecond: 100, burst: 10 });
  const t0 = now();
  let src = 0;
  const burst = () => {
    let answered = 0;
    for (let i = 0; i < 200; i++, src++) {
      if (run(tcp({ src: `172.16.${src >> 8}.${src & 255}`, dst: VIP, sport: 5000, dport: 22, flags: TCPF_SYN })).v === REPLY) answered++;
    }
    return answered;
  };
  const a = burst();
  // Each answer takes 0, 1 or 2 of the 10 credits (1 on average): ~10, never 200.
  assert.ok(a >= 5 && a <= 40, `first burst ${a}`);
  setNow(t0 + 10);
  assert.equal(burst(), 0, 'no refill within 20 ms');
  setNow(t0 + 1000);
  const b = burst();
  assert.ok(b >= 5 && b <= 40, `after a second ${b}`);
  assert.equal(gen(counters, 'reset', 'sent'), a + b);
  assert.equal(gen(counters, 'reset', 'rate_limited'), 600 - a - b);
});

test('the limited kinds are configurable and limits can be turned off', () => {
  const echo = setup({ kinds: ['echo'] });
  const pings = Array.from({ length: 10 }, () => echo.run(icmpEcho({ src: CLIENT, dst: VIP })).v);
  assert.equal(pings.filter((v) => v === FORWARD).length, 6);
  const rsts = Array.from(
    { length: 10 },
    (_, i) => echo.run(tcp({ src: CLIENT, dst: VIP, sport: 6000 + i, dport: 22, flags: TCPF_SYN })).v,
  );
  assert.equal(rsts.filter((v) => v === REPLY).length, 10, 'RSTs no longer limited');
  const off = setup({ kinds: [] });
  const all = Array.from({ length: 50 }, (_, i) => off.run(tcp({ src: CLIENT, dst: VIP, sport: 6100 + i, dport: 22, flags: TCPF_SYN })).v);
  assert.equal(all.filter((v) => v === REPLY).length, 50);
  // Still never to a bad source, whatever the limits.
  assert.equal(off.run(tcp({ src: VIP2, dst: VIP, sport: 6200, dport: 22, flags: TCPF_SYN })).v, DROP);
});

test('dataplane.generatedLimit is validated with the field and the reason, and defaults to the kernel values', () => {
  const base = { dataplane: { vipCidrs: ['10.96.0.0/24'] } };
  const g = validateConfig(base).dataplane.generatedLimit;
  assert.deepEqual(g, { perSourceInterval: 1, perSourceBurst: 6, perSecond: 1000, burst: 50, kinds: ['reset', 'unreachable'] });
  const bad = (generatedLimit: unknown, field: string) =>
    assert.throws(
      () => validateConfig({ dataplane: { ...base.dataplane, generatedLimit } }),
      (e: unknown) => e instanceof UvsError && e.path === field,
    );
  bad({ kinds: ['rst'] }, 'dataplane.generatedLimit.kinds[0]');
  bad({ kinds: 'reset' }, 'dataplane.generatedLimit.kinds');
  bad({ perSourceInterval: '2m' }, 'dataplane.generatedLimit.perSourceInterval');
  bad({ perSecond: -1 }, 'dataplane.generatedLimit.perSecond');
  bad({ burst: 0 }, 'dataplane.generatedLimit.burst');
  bad({ ratemask: 6168 }, 'dataplane.generatedLimit.ratemask');
  assert.equal(
    validateConfig({ dataplane: { ...base.dataplane, generatedLimit: { perSourceInterval: '500ms' } } }).dataplane.generatedLimit
      .perSourceInterval,
    0.5,
  );
});

test('each generated packet is counted once, under its kind, and its packet as a drop only when it is a refusal', () => {
  type Case = { kind: (typeof L.GEN_KIND_NAMES)[number]; family: string; prepare?: (p: ReturnType<typeof setup>) => void; pkt: Uint8Array };
  const big = new Uint8Array(1400);
  const cases: Case[] = [
    { kind: 'reset', family: 'IPv4', pkt: tcp({ src: CLIENT, dst: VIP, sport: 6000, dport: 22, flags: TCPF_SYN }) },
    { kind: 'reset', family: 'IPv6', pkt: tcp6({ src: CLIENT6, dst: VIP6, sport: 6000, dport: 22, flags: TCPF_SYN }) },
    { kind: 'reset', family: 'IPv4, mid-flow', pkt: tcp({ src: CLIENT, dst: VIP, sport: 6001, dport: 80, flags: TCPF_ACK }) },
    { kind: 'unreachable', family: 'IPv4', pkt: udp({ src: CLIENT, dst: VIP, sport: 6000, dport: 53 }) },
    { kind: 'unreachable', family: 'IPv6', pkt: udp6({ src: CLIENT6, dst: VIP6, sport: 6000, dport: 53 }) },
    { kind: 'echo', family: 'IPv4', pkt: icmpEcho({ src: CLIENT, dst: VIP }) },
    { kind: 'echo', family: 'IPv6', pkt: icmp6({ src: CLIENT6, dst: VIP6, type: P.ICMP6_ECHO_REQUEST }) },
    {
      kind: 'too_big',
      family: 'IPv4',
      prepare: (p) => {
        p.setMtu(1000);
        assert.equal(p.run(tcp({ src: CLIENT, dst: VIP, sport: 6002, dport: 80, flags: TCPF_SYN })).v, FORWARD);
      },
      pkt: tcp({ src: CLIENT, dst: VIP, sport: 6002, dport: 80, flags: TCPF_ACK, payload: big }),
    },
    {
      kind: 'too_big',
      family: 'IPv6',
      prepare: (p) => {
        p.setMtu(1280);
        assert.equal(p.run(tcp6({ src: CLIENT6, dst: VIP6, sport: 6002, dport: 80, flags: TCPF_SYN })).v, FORWARD);
      },
      pkt: tcp6({ src: CLIENT6, dst: VIP6, sport: 6002, dport: 80, flags: TCPF_ACK, payload: big }),
    },
    // The SYN proxy on (defense.synProxy; uvsd's defense sets the word): a SYN answered with a cookie.
    {
      kind: 'syn_ack',
      family: 'IPv4',
      prepare: (p) => Atomics.store(p.table.i32, L.H_SYNPROXY, 1),
      pkt: tcp({ src: CLIENT, dst: VIP, sport: 6003, dport: 80, flags: TCPF_SYN }),
    },
    {
      kind: 'syn_ack',
      family: 'IPv6',
      prepare: (p) => Atomics.store(p.table.i32, L.H_SYNPROXY, 1),
      pkt: tcp6({ src: CLIENT6, dst: VIP6, sport: 6003, dport: 80, flags: TCPF_SYN }),
    },
  ];
  const genWords = L.GEN_KIND_SLOTS * L.GEN_RESULTS;
  const sum = (c: Float64Array, from: number, n: number) => c.subarray(from, from + n).reduce((a, x) => a + x, 0);
  for (const k of cases) {
    const p = setup();
    k.prepare?.(p);
    const gen0 = p.counters.slice(L.C_GEN_BASE, L.C_GEN_BASE + genWords);
    const drops0 = sum(p.counters, L.C_DROP_BASE, L.DROP_NAMES.length);
    const r = p.run(k.pkt);
    const what = `${k.kind} (${k.family})`;
    // One packet out: the answer (REPLY), or the request turned around in place (FORWARD).
    const written = r.v === REPLY ? r.outs.length : r.v === FORWARD ? 1 : 0;
    assert.equal(written, 1, `${what}: one packet written`);
    const moved = Array.from(p.counters.subarray(L.C_GEN_BASE, L.C_GEN_BASE + genWords), (x, i) => x - gen0[i]!);
    const at = L.GEN_KIND_NAMES.indexOf(k.kind) * L.GEN_RESULTS + L.GEN_SENT;
    assert.deepEqual(
      moved.map((x, i) => (x !== 0 ? i : -1)).filter((i) => i >= 0),
      [at],
      `${what}: only generated.${k.kind}.sent moved`,
    );
    assert.equal(moved[at], 1, `${what}: counted once`);
    const refuses = L.GEN_REFUSES[L.GEN_KIND_NAMES.indexOf(k.kind)];
    const dropped = sum(p.counters, L.C_DROP_BASE, L.DROP_NAMES.length) - drops0;
    assert.equal(dropped, refuses ? 1 : 0, `${what}: a drop only for a refusal`);
    // The two sides of the reliability run's accounting (perf/reliability/report.ts balance) for
    // this one packet: read = drops + forwarded + answered in place; written = forwarded + generated.
    const generated = moved.reduce((a, x) => a + x, 0);
    assert.equal(1 - dropped - (refuses ? 0 : generated), written - generated, `${what}: both sides count it`);
  }
  // Every kind is covered above, and the counter words have room for every kind there is.
  assert.deepEqual([...new Set(cases.map((k) => k.kind))].sort(), [...L.GEN_KIND_NAMES].sort());
  assert.equal(L.GEN_REFUSES.length, L.GEN_KIND_NAMES.length);
  assert.ok(L.GEN_KIND_NAMES.length <= L.GEN_KIND_SLOTS);
  assert.ok(L.C_GEN_BASE + genWords <= L.W_GLOBAL_WORDS, 'the generated counters end before the per-server counters');
  assert.ok(L.C_DROP_BASE + L.DROP_NAMES.length <= L.C_GEN_BASE, 'the drop counters end before the generated ones');
});
