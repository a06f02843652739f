/**
 * What a node believes of Redis (conntrack/redis-record.ts), as data: a record this node would
 * have written itself is believed, each way of lying in one field is refused with its reason;
 * MACs hold both ways; counts and node lists are bounded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import {
  checkRecord,
  GEN_PER_MS,
  genField,
  Generation,
  mac,
  macKey,
  MAX_COUNT,
  parseCounts,
  parseHeartbeat,
  parseRecord,
  ppField,
  spField,
  recordMatches,
  selectNodes,
  signCounts,
  signHeartbeat,
  signRecord,
  supersedes,
  writerToken,
  type FlowRecord,
  type FlowTarget,
} from '../../conntrack/redis-record';
import { TCP_DEFAULT_TIMEOUTS, TCP_ESTABLISHED, TCP_SYN_RECV, TCP_TIME_WAIT, UDP_DEFAULT_TIMEOUT } from '../../conntrack/state';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import { validateConfig } from '../../control/config';
import { PP_V1, PP_V2 } from '../../net/proxy-protocol';
import { UvsError } from '../../control/errors';

const NOW = 1_700_000_000_000;
const ip = (s: string) => parseIPv4(s)! | 0;
const CLIENT = ip('192.0.2.7');
const VIP = ip('10.0.0.10');
const RS = ip('10.1.0.1');
const OTHER_RS = ip('10.1.0.2');
const POOL = ip('10.9.0.1');
const timeoutMs = (slot: number) => (slot < 11 ? TCP_DEFAULT_TIMEOUTS[slot]! : slot === L.TIMEOUT_UDP ? UDP_DEFAULT_TIMEOUT : 60) * 1000;

const masq: FlowTarget = {
  slot: 3,
  svcSlot: 1,
  proto: 6,
  vaddr: VIP,
  vaddr6: null,
  vport: 80,
  daddr: RS,
  daddr6: null,
  dport: 8080,
  fwd: L.FWD_MASQ,
  pool: [POOL],
  portMin: 20000,
  portMax: 29999,
};
const fullnat: FlowTarget = { ...masq, fwd: L.FWD_FULLNAT };

/** The fields of a record as a node writes them (strings, as they travel). */
function fields(
  o: Partial<
    Record<
      'proto' | 'caddr' | 'cport' | 'vaddr' | 'vport' | 'daddr' | 'dport' | 'laddr' | 'lport' | 'fwd' | 'state' | 'inactive' | 'expiresAt',
      number
    >
  > & { service?: string; realServer?: string; hi?: string } = {},
): string[] {
  const cport = o.cport ?? 40000;
  const x = {
    proto: 6,
    caddr: CLIENT,
    vaddr: VIP,
    vport: 80,
    daddr: RS,
    dport: 8080,
    laddr: CLIENT,
    lport: cport,
    fwd: L.FWD_MASQ,
    state: TCP_ESTABLISHED,
    inactive: 0,
    expiresAt: NOW + 600_000,
    ...o,
  };
  return [
    x.proto,
    x.caddr,
    (cport << 16) | x.vport | 0,
    x.vaddr,
    x.daddr,
    (x.dport << 16) | x.lport | 0,
    x.laddr,
    x.fwd,
    o.service ?? 'tcp 10.0.0.10:80',
    o.realServer ?? '10.1.0.1:8080',
    x.state,
    x.inactive,
    x.expiresAt,
    o.hi ?? '',
  ].map(String);
}
const text = (o: Parameters<typeof fields>[0] = {}) => fields(o).join('|');

function verdict(t: string, target: FlowTarget | null = masq, key: Buffer | null = null): string {
  const r = parseRecord(t, key);
  if (typeof r === 'string') return r;
  return checkRecord(r, target, NOW, timeoutMs) ?? 'ok';
}

test('a record this node would have written itself is believed (masq, full-NAT, UDP, 13-field pre-IPv6)', () => {
  assert.equal(verdict(text()), 'ok');
  assert.equal(verdict(text({ fwd: L.FWD_FULLNAT, laddr: POOL, lport: 25000 }), fullnat), 'ok');
  assert.equal(verdict(text({ proto: 17, state: 0, inactive: 1, expiresAt: NOW + 200_000 }), { ...masq, proto: 17 }), 'ok');
  assert.equal(verdict(fields().slice(0, 13).join('|')), 'ok');
  assert.equal(verdict(text({ state: TCP_TIME_WAIT, inactive: 1, expiresAt: NOW + 100_000 })), 'ok');
});

test('each way of lying in one field is refused with its reason', () => {
  const cases: [string, string, FlowTarget | null][] = [
    ['garbage', 'malformed', masq],
    [text().replace(/^6\|/, 'x|'), 'malformed', masq],
    [text({ caddr: 1.5 }), 'malformed', masq],
    [text({ expiresAt: -1 }), 'malformed', masq],
    [`${text()}|${'a'.repeat(2000)}`, 'malformed', masq],
    [text({ inactive: 2 }), 'malformed', masq],
    [text({ proto: 6 | L.PROTO_V6 }), 'malformed', masq], // IPv6 without its high words
    [text(), 'unknown_server', null],
    [text({ proto: 17 }), 'protocol', masq],
    [text({ daddr: OTHER_RS }), 'address', masq], // names a real server, points elsewhere
    [text({ vaddr: ip('10.0.0.11') }), 'address', masq],
    [text({ laddr: ip('203.0.113.9') }), 'address', masq], // masq replies go to the client
    [text({ vport: 81 }), 'port', masq], // a port with no service
    [text({ dport: 22 }), 'port', masq],
    [text({ lport: 1 }), 'port', masq],
    [text({ fwd: L.FWD_MASQ | L.F_TEMPLATE }), 'forwarding', masq], // would pin new clients
    [text({ fwd: L.FWD_MASQ | L.F_SHADOW }), 'forwarding', masq],
    [text({ fwd: L.FWD_TUNNEL }), 'forwarding', masq],
    [text({ fwd: L.FWD_FULLNAT, laddr: ip('10.9.0.2'), lport: 25000 }), 'address', fullnat], // not a pool address
    [text({ fwd: L.FWD_FULLNAT, laddr: POOL, lport: 30000 }), 'port', fullnat], // outside the pool's ports
    [text({ state: 11 }), 'state', masq],
    [text({ state: -1 }), 'state', masq],
    [text({ state: TCP_ESTABLISHED, inactive: 1 }), 'state', masq],
    [text({ state: TCP_TIME_WAIT, inactive: 0 }), 'state', masq],
    [text({ proto: 17, state: 1, inactive: 1 }), 'state', { ...masq, proto: 17 }],
    [text({ expiresAt: NOW - 1 }), 'expiry', masq],
    [text({ expiresAt: NOW + 23 * 86400_000 }), 'expiry', masq], // 23 days
    [text({ state: TCP_SYN_RECV, expiresAt: NOW + 900_000 }), 'expiry', masq], // SYN_RECV lasts 60 s
  ];
  for (const [t, want, target] of cases) assert.equal(verdict(t, target), want, t.slice(0, 120));
});

test('an expiry within the state timeout plus 5 s of clock skew is believed, beyond it is not', () => {
  assert.equal(verdict(text({ expiresAt: NOW + 900_000 + 5000 })), 'ok');
  assert.equal(verdict(text({ expiresAt: NOW + 900_000 + 5001 })), 'expiry');
});

test('IPv6: the high words of the VIP, the real server and the reply address are checked too', () => {
  const v = parseIPv6('fd00:96::10')!;
  const d = parseIPv6('fd00:10::1')!;
  const c = parseIPv6('2001:db8:1::100')!;
  const t6: FlowTarget = { ...masq, proto: 6 | L.PROTO_V6, vaddr: v[3]!, vaddr6: v, daddr: d[3]!, daddr6: d, pool: [] };
  const hi = (vv = v, dd = d, ll = c) => [c[0], c[1], c[2], vv[0], vv[1], vv[2], dd[0], dd[1], dd[2], ll[0], ll[1], ll[2]].join(',');
  const base = { proto: 6 | L.PROTO_V6, caddr: c[3]!, vaddr: v[3]!, daddr: d[3]!, laddr: c[3]! };
  assert.equal(verdict(text({ ...base, hi: hi() }), t6), 'ok');
  assert.equal(verdict(text({ ...base, hi: hi(parseIPv6('fd00:97::10')!) }), t6), 'address');
  assert.equal(verdict(text({ ...base, hi: hi(v, parseIPv6('fd00:11::1')!) }), t6), 'address');
  assert.equal(verdict(text({ ...base, hi: hi(v, d, parseIPv6('2001:db8:2::100')!) }), t6), 'address');
  assert.equal(verdict(text({ ...base, hi: '1,2,3' }), t6), 'malformed');
  assert.equal(verdict(text({ hi: hi() }), masq), 'malformed', 'an IPv4 record carries no high words');
});

test('with a record key, only records with a valid MAC are believed; without one, signed records are read as before', () => {
  const k = macKey('0123456789abcdef-shared')!;
  const signed = signRecord(k, text());
  assert.equal(verdict(signed, masq, k), 'ok');
  assert.equal(verdict(text(), masq, k), 'auth', 'unsigned');
  assert.equal(verdict(signRecord(macKey('another-key-of-16+chars'), text()), masq, k), 'auth', 'another key');
  assert.equal(verdict(signed.replace(`|${RS}|`, `|${OTHER_RS}|`), masq, k), 'auth', 'a field changed after signing');
  assert.equal(verdict(`${text()}|${'0'.repeat(32)}`, masq, k), 'auth');
  assert.equal(verdict(`${text()}|short`, masq, k), 'auth');
  assert.equal(verdict(signed, masq, null), 'ok');
  assert.equal(signed.split('|').length, 15);
  assert.equal(mac(k, 'x').length, 32);
});

test('PROXY protocol: a full-NAT record carries its shift (pp=word,seq), signed or not; old records have none', () => {
  const t = { ...fullnat, pp: PP_V2 };
  const base = { fwd: L.FWD_FULLNAT, laddr: POOL, lport: 25000 };
  // v2 over IPv4 is 28 bytes; flags: header sent and acknowledged.
  const word = (PP_V2 << L.PP_VER_SHIFT) | 28 | L.PP_SENT | L.PP_ACKED;
  const rec = text(base) + ppField(word, 0x10000001);
  assert.equal(verdict(rec, t), 'ok');
  const r = parseRecord(rec, null) as FlowRecord;
  assert.deepEqual([r.pp, r.ppSeq], [word, 0x10000001]);
  assert.deepEqual([(parseRecord(text(base), null) as FlowRecord).pp], [0], 'a record without the field: no shift');
  assert.equal(verdict(text(base), t), 'ok', 'a flow made before proxyProtocol was switched on keeps going without');
  const k = macKey('0123456789abcdef-shared')!;
  const signed = signRecord(k, rec);
  assert.equal(signed.split('|').length, 16);
  assert.equal(verdict(signed, t, k), 'ok');
  assert.equal(verdict(signed, t, null), 'ok', 'read without a key: the MAC is not checked, the pp field still is');
  assert.equal(verdict(signed.replace(`pp=${word},`, `pp=${word + 1},`), t, k), 'auth', 'the shift is under the MAC');
  assert.equal(
    verdict(text(base) + ppField((PP_V1 << L.PP_VER_SHIFT) | 41, 7), t),
    'ok',
    'v1: "PROXY TCP4 192.0.2.7 10.0.0.10 40000 80\\r\\n" is 41 bytes',
  );
});

test('PROXY protocol: a shift this node would not have made is refused', () => {
  const t = { ...fullnat, pp: PP_V2 };
  const base = { fwd: L.FWD_FULLNAT, laddr: POOL, lport: 25000 };
  const v2 = (PP_V2 << L.PP_VER_SHIFT) | 28;
  const cases: [string, string, FlowTarget][] = [
    [text(base) + ppField(v2 + 1, 1), 'proxy_protocol', t], // 29 bytes: every byte of the flow off by one
    [text(base) + ppField((PP_V1 << L.PP_VER_SHIFT) | 28, 1), 'proxy_protocol', t], // v1 of this flow is 41
    [text(base) + ppField((3 << L.PP_VER_SHIFT) | 28, 1), 'proxy_protocol', t],
    [text(base) + ppField(v2 | 0x10000, 1), 'proxy_protocol', t], // a bit the word does not have
    [text(base) + ppField(v2, 1), 'proxy_protocol', fullnat], // the server has no proxyProtocol
    [text() + ppField(v2, 1), 'proxy_protocol', { ...masq, pp: PP_V2 }], // masq never shifts
    [text({ ...base, proto: 17, state: 0, inactive: 1, expiresAt: NOW + 200_000 }) + ppField(v2, 1), 'proxy_protocol', { ...t, proto: 17 }],
    [text(base) + '|pp=x,1', 'malformed', t],
    [text(base) + '|pp=28', 'malformed', t],
    [text(base) + '|pp=99999999999,1', 'malformed', t],
    [text(base) + '|' + '0'.repeat(32) + '|' + '0'.repeat(32), 'malformed', t], // 16 fields without a pp field
  ];
  for (const [rec, want, target] of cases) assert.equal(verdict(rec, target), want, rec.slice(-60));
});

test("PROXY protocol over IPv6: the length is checked with the record's high words (v1 text depends on them)", () => {
  const v = parseIPv6('fd00:96::10')!;
  const d = parseIPv6('fd00:10::1')!;
  const c = parseIPv6('2001:db8:1::100')!;
  const p = parseIPv6('fd00:99::1')!;
  const t6: FlowTarget = { ...fullnat, pp: PP_V1, proto: 6 | L.PROTO_V6, vaddr: v[3]!, vaddr6: v, daddr: d[3]!, daddr6: d, pool: [...p] };
  const hi = [c[0], c[1], c[2], v[0], v[1], v[2], d[0], d[1], d[2], p[0], p[1], p[2]].join(',');
  const base = { proto: 6 | L.PROTO_V6, caddr: c[3]!, vaddr: v[3]!, daddr: d[3]!, laddr: p[3]!, lport: 25000, fwd: L.FWD_FULLNAT, hi };
  const line = 'PROXY TCP6 2001:db8:1::100 fd00:96::10 40000 80\r\n';
  assert.equal(verdict(text(base) + ppField((PP_V1 << L.PP_VER_SHIFT) | line.length, 5), t6), 'ok');
  assert.equal(verdict(text(base) + ppField((PP_V1 << L.PP_VER_SHIFT) | (line.length - 1), 5), t6), 'proxy_protocol');
  assert.equal(verdict(text(base) + ppField((PP_V2 << L.PP_VER_SHIFT) | 52, 5), t6), 'ok', 'a flow keeps the version it was made with');
});

test('a lookup answer matches the parked packet by either direction, and nothing else', () => {
  const r = parseRecord(text(), null) as FlowRecord;
  const none = new Int32Array(12);
  assert.ok(recordMatches(r, 6, CLIENT, (40000 << 16) | 80, VIP, none), 'client → VIP');
  assert.ok(recordMatches(r, 6, RS, (8080 << 16) | 40000 | 0, CLIENT, none), 'real server → client');
  assert.ok(!recordMatches(r, 6, CLIENT, (40001 << 16) | 80, VIP, none), 'another client port');
  assert.ok(!recordMatches(r, 17, CLIENT, (40000 << 16) | 80, VIP, none), 'another protocol');
});

test('counts: sane non-negative integers are believed; a negative, huge, fractional or non-number value refuses the node', () => {
  const known = new Set(['tcp 10.0.0.10:80|10.1.0.1:8080']);
  const k = 'tcp 10.0.0.10:80|10.1.0.1:8080';
  const ok = parseCounts(JSON.stringify({ [k]: [3, 4], 'tcp 10.0.0.99:80|10.1.0.1:8080': [1, 1] }), 'n1', null, known, 1e6, NOW, 6000);
  assert.deepEqual(ok, new Map([[k, [3, 4]]]), 'unknown keys are skipped');
  for (const bad of [
    [-1, 0],
    [0, -5],
    [MAX_COUNT + 1, 0],
    [1e308, 0],
    [1.5, 0],
    ['3', 0],
    [null, 0],
  ]) {
    assert.equal(parseCounts(JSON.stringify({ [k]: bad }), 'n1', null, known, 1e6, NOW, 6000), 'value', JSON.stringify(bad));
  }
  for (const bad of ['{', '[]', 'null', '7', JSON.stringify({ [k]: [1] }), JSON.stringify({ [k]: 5 })]) {
    assert.equal(parseCounts(bad, 'n1', null, known, 1e6, NOW, 6000), 'malformed', bad);
  }
  assert.equal(parseCounts(JSON.stringify({ [k]: [1, 1] }), 'n1', null, known, 10, NOW, 6000), 'too_large');
  assert.deepEqual(
    parseCounts(JSON.stringify({ __proto__: [1, 1], [k]: [0, 0] }), 'n1', null, known, 1e6, NOW, 6000),
    new Map([[k, [0, 0]]]),
  );
});

test('counts with a key: the MAC binds them to their node and time; unsigned, wrong-key, replayed-as-another-node and old counts are refused', () => {
  const key = macKey('0123456789abcdef-shared')!;
  const k = 'tcp 10.0.0.10:80|10.1.0.1:8080';
  const known = new Set([k]);
  const json = JSON.stringify({ [k]: [2, 0] });
  assert.deepEqual(parseCounts(signCounts(key, 'n1', json, NOW - 1000), 'n1', key, known, 1e6, NOW, 6000), new Map([[k, [2, 0]]]));
  assert.equal(parseCounts(json, 'n1', key, known, 1e6, NOW, 6000), 'auth');
  assert.equal(parseCounts(signCounts(key, 'n1', json, NOW), 'n2', key, known, 1e6, NOW, 6000), 'auth');
  assert.equal(parseCounts(signCounts(macKey('another-key-of-16+chars'), 'n1', json, NOW), 'n1', key, known, 1e6, NOW, 6000), 'auth');
  assert.equal(
    parseCounts(signCounts(key, 'n1', json, NOW).replace(`\n${NOW}\n`, `\n${NOW + 1}\n`), 'n1', key, known, 1e6, NOW, 6000),
    'auth',
    'time changed',
  );
  assert.equal(parseCounts(signCounts(key, 'n1', json, NOW - 6001), 'n1', key, known, 1e6, NOW, 6000), 'stale', 'an old report replayed');
  assert.equal(parseCounts(signCounts(key, 'n1', json, NOW + 60_000), 'n1', key, known, 1e6, NOW, 6000), 'stale', 'from the future');
});

test('node list: this node, bad ids, heartbeats from the future (beyond 5 s of skew) and nodes beyond the cap are not read', () => {
  const flat = [
    'self',
    String(NOW),
    'ahead',
    String(NOW + 60_000),
    'skewed',
    String(NOW + 4000),
    'a b',
    String(NOW),
    'n1',
    String(NOW - 1),
    'n2',
    String(NOW - 2),
    'n3',
    String(NOW - 3),
  ];
  const r = selectNodes(flat, 10, 'self', NOW, 2);
  assert.deepEqual(r.nodes, ['skewed', 'n1']);
  assert.deepEqual(r.refused, { future: 1, cap: 2 + 3, bad_id: 1, auth: 0, stale: 0 }, '2 not read beyond the cap, 3 not fetched at all');
});

test('node list: the nodes given first (signed lately) are read whatever the list holds; the list fills the places left', () => {
  // 70 members fresher than any real node's heartbeat, as anyone with access to Redis can add.
  const flat: string[] = [];
  for (let i = 0; i < 70; i++) flat.push(`fake${i}`, String(NOW + 4000));
  flat.push('n1', String(NOW - 10), 'n2', String(NOW - 20));
  assert.deepEqual(selectNodes(flat, 72, 'self', NOW, 64).nodes.includes('n1'), false, 'by the list alone, n1 is pushed out');
  const r = selectNodes(flat, 72, 'self', NOW, 64, ['n1', 'n2', 'self']);
  assert.deepEqual(r.nodes.slice(0, 2), ['n1', 'n2'], 'never this node itself');
  assert.equal(r.nodes.length, 64);
  assert.equal(new Set(r.nodes).size, 64, 'n1 and n2 once, though the list has them too');
  assert.equal(r.refused.cap, 70 - 62);
});

test('heartbeats: signed by their node at a time; unsigned, wrong-key, changed, replayed and future ones are refused', () => {
  const k = macKey('0123456789abcdef-shared')!;
  const hb = signHeartbeat(k, 'lb1', NOW - 1000);
  assert.deepEqual(parseHeartbeat(k, hb, NOW, 6000), { nodeId: 'lb1', atMs: NOW - 1000 });
  assert.equal(parseHeartbeat(k, 'lb1', NOW, 6000), 'auth');
  assert.equal(parseHeartbeat(k, `lb1\n${NOW}\n${'0'.repeat(32)}`, NOW, 6000), 'auth');
  assert.equal(parseHeartbeat(k, signHeartbeat(macKey('another-key-of-16+chars')!, 'lb1', NOW), NOW, 6000), 'auth');
  assert.equal(parseHeartbeat(k, hb.replace('lb1', 'lb2'), NOW, 6000), 'auth', 'another node');
  assert.equal(parseHeartbeat(k, hb.replace(String(NOW - 1000), String(NOW)), NOW, 6000), 'auth', 'another time');
  assert.equal(parseHeartbeat(k, signHeartbeat(k, 'lb1', NOW - 6001), NOW, 6000), 'stale', 'recorded and replayed later');
  assert.equal(parseHeartbeat(k, signHeartbeat(k, 'lb1', NOW + 5001), NOW, 6000), 'stale', 'from the future');
  assert.equal(parseHeartbeat(k, signHeartbeat(k, 'a b', NOW), NOW, 6000), 'bad_id');
  assert.equal(parseHeartbeat(k, 'x'.repeat(10_000), NOW, 6000), 'auth');
  // No MAC of a record or of counts passes for a heartbeat's.
  const counts = signCounts(k, 'lb1', '{}', NOW);
  assert.equal(parseHeartbeat(k, `lb1\n${NOW}\n${counts.slice(0, 32)}`, NOW, 6000), 'auth');
});

// ── generations (replay) ───────────────────────────────────────────────────────────────────
const G = NOW * GEN_PER_MS;
/** A record of this release: the fields, pp/sp, then the writer's generation. */
const versioned = (gen: number, writer = 'lb1', o: Parameters<typeof fields>[0] = {}) => text(o) + genField(gen, writerToken(writer));

test('records carry their writer and generation (g=), under the MAC: neither can be changed or stripped', () => {
  const k = macKey('0123456789abcdef-shared')!;
  const signed = signRecord(k, versioned(G + 7));
  assert.equal(signed.split('|').length, 16);
  const r = parseRecord(signed, k) as FlowRecord;
  assert.deepEqual([r.gen, r.writer], [G + 7, 'lb1']);
  assert.equal(verdict(signed, masq, k), 'ok');
  assert.equal(verdict(signed.replace(`g=${G + 7},`, `g=${G + 8},`), masq, k), 'auth', 'a newer generation forged');
  assert.equal(verdict(signed.replace(',lb1|', ',lb2|'), masq, k), 'auth', 'another writer');
  const stripped = signed.replace(`|g=${G + 7},lb1`, '');
  assert.equal(verdict(stripped, masq, k), 'auth', 'the generation taken out: the MAC is over it');
  // With pp= or sp=, g= comes after it and before the MAC: 17 fields.
  const opts = 1460 | (7 << L.SPO_WS_SHIFT);
  const sp = signRecord(k, text() + spField([1, 2, opts]) + genField(G, 'lb1'));
  assert.equal(sp.split('|').length, 17);
  assert.deepEqual([(parseRecord(sp, k) as FlowRecord).gen, (parseRecord(sp, k) as FlowRecord).spOpts], [G, opts]);
  assert.equal(verdict(sp, masq, k), 'ok');
  assert.equal(verdict(sp, masq, null), 'ok', 'read without a key: the MAC is not checked');
});

test('a node id with |, comma, spaces or non-ASCII travels percent-encoded and comes back as it was', () => {
  for (const id of ['lb1', 'lb|1,x=y', 'nœud 2', 'a%b', '%C3']) {
    const r = parseRecord(versioned(G, id), null) as FlowRecord;
    assert.equal(r.writer, id, id);
    assert.equal(verdict(versioned(G, id)), 'ok', id);
  }
});

test('malformed generation fields are refused; so are fields out of order and a last field that is no MAC', () => {
  const k = macKey('0123456789abcdef-shared')!;
  const cases: [string, string, Buffer | null][] = [
    [text() + '|g=0,lb1', 'malformed', null], // 0 is "none", not a generation
    [text() + '|g=x,lb1', 'malformed', null],
    [text() + `|g=${G}`, 'malformed', null], // no writer
    [text() + `|g=${G},`, 'malformed', null],
    [text() + '|g=12345678901234567,lb1', 'malformed', null], // 17 digits
    [text() + '|g=9999999999999999,lb1', 'malformed', null], // beyond 2^53
    [text() + `|g=${G},a b`, 'malformed', null], // a writer not percent-encoded
    [text() + `|g=${G},%ZZ`, 'malformed', null],
    [text() + `|g=${G},%C3`, 'malformed', null], // no UTF-8
    [text() + `|g=${G},lb1|g=${G},lb1`, 'malformed', null],
    [text() + genField(G, 'lb1') + ppField(0x21c, 1), 'malformed', null], // g= before pp=
    [signRecord(k, text() + genField(G, 'lb1') + spField([1, 2, 0])), 'malformed', k],
    [text() + '|nomac', 'malformed', null],
    [text() + `|${'0'.repeat(32)}|g=${G},lb1`, 'malformed', null], // the MAC is last
  ];
  for (const [t, want, key] of cases) assert.equal(verdict(t, masq, key), want, t.slice(-60));
});

test('a generation more than 5 s ahead of this clock is refused (it would outrank every true record until then)', () => {
  assert.equal(verdict(versioned((NOW + 5000) * GEN_PER_MS + GEN_PER_MS - 1)), 'ok');
  assert.equal(verdict(versioned((NOW + 5001) * GEN_PER_MS)), 'generation');
});

test('records of earlier releases (13 and 14 fields, pp=/sp=, signed or not) have generation 0; signed ones are still believed', () => {
  const k = macKey('0123456789abcdef-shared')!;
  const cases: [string, Buffer | null][] = [
    [fields().slice(0, 13).join('|'), null],
    [text(), null],
    [text() + spField([1, 2, 0]), null],
    [signRecord(k, text()), k],
    [signRecord(k, text() + ppField(0x21c, 1)), null],
  ];
  for (const [t, key] of cases) {
    const r = parseRecord(t, key) as FlowRecord;
    assert.deepEqual([r.gen, r.writer], [0, ''], t);
  }
  assert.equal(verdict(signRecord(k, text()), masq, k), 'ok');
});

test('a shadow is replaced or refreshed only by a newer record; one without a generation never replaces one with one', () => {
  assert.ok(supersedes(G + 1, G));
  assert.ok(!supersedes(G, G), 'the same record again: a replay');
  assert.ok(!supersedes(G - 1, G), 'an earlier one');
  assert.ok(!supersedes(0, G), "an earlier release's record over this release's");
  assert.ok(supersedes(G, 0), "this release's over an earlier release's");
  assert.ok(supersedes(0, 0), 'between earlier releases, as before');
});

test("generations: strictly increasing, at the writer's clock, past every generation read, and a restarted writer's are newer", () => {
  const g = new Generation();
  const a = g.next(NOW);
  const b = g.next(NOW);
  const c = g.next(NOW - 1000); // the clock stepped back: still increasing
  assert.deepEqual([a, b, c], [G, G + 1, G + 2]);
  assert.equal(g.next(NOW + 1), G + GEN_PER_MS, 'the clock again once it has moved on');
  // Node B adopts a flow from A's record, A's clock 3 s ahead of B's: B's next record is newer.
  const fromA = (NOW + 3000) * GEN_PER_MS + 5;
  const bNode = new Generation();
  bNode.observe(fromA);
  assert.ok(bNode.next(NOW) > fromA);
  bNode.observe(G); // an older one changes nothing
  assert.equal(bNode.next(NOW), fromA + 2);
  // A writer restarted 1 s later starts from its clock: past all it wrote before.
  const restarted = new Generation();
  assert.ok(restarted.next(NOW + 1 + 1000) > g.next(NOW + 1));
});

test('the redis limits have defaults and are validated with field and reason', () => {
  const doc = (redis: Record<string, unknown>) => ({
    dataplane: { vipCidrs: ['10.96.0.0/24'] },
    redis: { url: 'redis://127.0.0.1:6379', ...redis },
  });
  const r = validateConfig(doc({})).redis!;
  assert.deepEqual([r.maxShadowShare, r.maxNodes, r.maxLookups, r.commandTimeout, r.recordKey], [0.5, 64, 1024, 1, undefined]);
  assert.equal(validateConfig(doc({ recordKey: 'k'.repeat(16), commandTimeout: '250ms' })).redis!.commandTimeout, 0.25);
  const bad: [Record<string, unknown>, string, RegExp][] = [
    [{ maxShadowShare: 0 }, 'redis.maxShadowShare', /above 0 and at most 1/],
    [{ maxShadowShare: 1.5 }, 'redis.maxShadowShare', /above 0 and at most 1/],
    [{ maxShadowShare: '50%' }, 'redis.maxShadowShare', /above 0 and at most 1/],
    [{ maxNodes: 0 }, 'redis.maxNodes', /between 1 and 10000/],
    [{ maxLookups: 1.5 }, 'redis.maxLookups', /integer/],
    [{ commandTimeout: '5ms' }, 'redis.commandTimeout', /at least 0.01 s/],
    [{ commandTimeout: 61 }, 'redis.commandTimeout', /between 0 and 60/],
    [{ recordKey: 'short' }, 'redis.recordKey', /at least 16 characters/],
    [{ recordKey: 42 }, 'redis.recordKey', /non-empty string/],
  ];
  for (const [redis, path, reason] of bad) {
    assert.throws(
      () => validateConfig(doc(redis)),
      (e: unknown) => e instanceof UvsError && e.path === path && reason.test(e.message),
      JSON.stringify(redis),
    );
  }
});

test('SYN proxy: a proxied flow carries its deltas and options (sp=delta,tsdelta,opts), signed or not; bad ones are refused', () => {
  const opts = 1460 | (7 << L.SPO_WS_SHIFT) | L.SPO_SACK | L.SPO_TS | (5 << L.SPO_OURWS_SHIFT) | (9 << L.SPO_SRVWS_SHIFT);
  const rec = text() + spField([-123456789, 0x7fffffff, opts]);
  assert.equal(verdict(rec), 'ok');
  const r = parseRecord(rec, null) as FlowRecord;
  assert.deepEqual([r.sp, r.spDelta, r.spTsDelta, r.spOpts], [1, -123456789, 0x7fffffff, opts]);
  assert.equal((parseRecord(text(), null) as FlowRecord).sp, 0, 'no field: not proxied');
  const full = text({ fwd: L.FWD_FULLNAT, laddr: POOL, lport: 25000 }) + spField([5, 6, 1460 | (0xf << L.SPO_WS_SHIFT)]);
  assert.equal(verdict(full, fullnat), 'ok', 'full-NAT; a client without window scaling (0xf)');
  const k = macKey('0123456789abcdef-shared')!;
  const signed = signRecord(k, rec);
  assert.equal(verdict(signed, masq, k), 'ok');
  assert.equal(verdict(signed.replace('sp=-123456789,', 'sp=-123456788,'), masq, k), 'auth', 'the deltas are under the MAC');
  for (const [t, why, target] of [
    [text() + spField([1, 2, opts | 0x400000]), 'synproxy', masq],
    [text() + spField([1, 2, 15 << L.SPO_OURWS_SHIFT]), 'synproxy', masq],
    [text() + spField([1, 2, 15 << L.SPO_SRVWS_SHIFT]), 'synproxy', masq],
    [text({ proto: 17, state: 0, inactive: 1, dport: 8080 }) + spField([1, 2, 0]), 'synproxy', { ...masq, proto: 17 }],
    [text({ fwd: L.FWD_TUNNEL }) + spField([1, 2, 0]), 'synproxy', { ...masq, fwd: L.FWD_TUNNEL }],
    [text() + '|sp=1,2', 'malformed', masq],
    [text() + '|sp=1,2,x', 'malformed', masq],
    [text() + '|sp=1,2,99999999999', 'malformed', masq],
  ] as const) {
    assert.equal(verdict(t, target), why, t);
  }
});
