/**
 * The listings of control/ipvsadm/format.ts the other format tests leave out. ipvsadm's own, from
 * its printf formats (docs/ipvs-semantics.md §6.2; the expected lines were printed by Python's
 * printf-style % with those format strings, not by this code): every forwarding method's name and
 * -S switch, --tun-info, `pe`/`ops`, print_largenum at each unit boundary, -Lnc seconds, the IPv4
 * service-name cut with names, libipvs's family order and glibc's stable merge. Then uvs's own
 * listings (docs/ipvsadm.md: `-L --drain`, `-L --health`, `-L --workers`, `-L --defense`), whose
 * layout is uvs's: each column's content and width pinned byte for byte, as scripts read them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  formatConnections,
  formatDefense,
  formatDrains,
  formatHealth,
  formatList,
  formatSave,
  formatWorkers,
  glibcSort,
  largeNum,
  sortRealServers,
  type FmtRealServer,
} from '../../control/ipvsadm/format';
import { lines, svc, zero } from '../helpers/ipvsadm';

const rs = (address: string, port: number, forwarding: string, weight: number, activeConns = 0, inactConns = 0): FmtRealServer => ({
  address,
  port,
  forwarding,
  weight,
  activeConns,
  inactConns,
  stats: zero,
});

// One server per forwarding method, listed out of order (the listing sorts them by address).
const methods = [
  rs('10.200.11.5', 80, 'local', 4, 2, 2),
  rs('10.200.11.3', 80, 'tunnel', 2, 1, 0),
  rs('10.200.11.6', 80, 'fullnat', 5, 3, 3),
  rs('10.200.11.2', 80, 'masq', 1),
  rs('10.200.11.4', 80, 'route', 3, 0, 1),
];

test('-Ln names every forwarding method as ipvsadm does (Masq, Tunnel, Route, Local; uvs: FullNat)', () => {
  assert.equal(
    formatList(1, [svc('tcp', '10.96.0.10', 80, 'wrr', methods)], { header: false }),
    lines(
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  10.96.0.10:80 wrr',
      '  -> 10.200.11.2:80               Masq    1      0          0         ',
      '  -> 10.200.11.3:80               Tunnel  2      1          0         ',
      '  -> 10.200.11.4:80               Route   3      0          1         ',
      '  -> 10.200.11.5:80               Local   4      2          2         ',
      '  -> 10.200.11.6:80               FullNat 5      3          3         ',
    ),
  );
});

test('-S saves each forwarding method with its switch (-m, -i --tun-type ipip, -g, Local as -g; uvs: --fullnat)', () => {
  assert.equal(
    formatSave([svc('tcp', '10.96.0.10', 80, 'wrr', methods)]),
    lines(
      '-A -t 10.96.0.10:80 -s wrr',
      '-a -t 10.96.0.10:80 -r 10.200.11.2:80 -m -w 1',
      '-a -t 10.96.0.10:80 -r 10.200.11.3:80 -i -w 2 --tun-type ipip',
      '-a -t 10.96.0.10:80 -r 10.200.11.4:80 -g -w 3',
      '-a -t 10.96.0.10:80 -r 10.200.11.5:80 -g -w 4',
      '-a -t 10.96.0.10:80 -r 10.200.11.6:80 --fullnat -w 5',
    ),
  );
});

test('--tun-info: TunnelInfo ipip for a tunnel server, n/a for the others', () => {
  const t = [svc('tcp', '10.96.0.10', 80, 'wrr', [rs('10.200.11.3', 80, 'tunnel', 2, 1, 0), rs('10.200.11.2', 80, 'masq', 1)])];
  assert.equal(
    formatList(1, t, { tunInfo: true, header: false }),
    lines(
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn',
      'TCP  10.96.0.10:80 wrr',
      '  -> 10.200.11.2:80               Masq    n/a           1      0          0         ',
      '  -> 10.200.11.3:80               Tunnel  ipip          2      1          0         ',
    ),
  );
});

test('a persistence engine and one-packet scheduling: " pe sip ops" listed, " --pe sip -o" saved', () => {
  const t = [svc('udp', '10.96.0.10', 5060, 'rr', [], { persistence: 300, pe: 'sip', ops: true })];
  assert.equal(formatList(1, t, { header: false }).split('\n')[2], 'UDP  10.96.0.10:5060 rr persistent 300 pe sip ops');
  assert.equal(formatSave(t), lines('-A -u 10.96.0.10:5060 -s rr -p 300 --pe sip -o'));
  // Neither: nothing added.
  const plain = [svc('udp', '10.96.0.10', 5060, 'rr', [], { persistence: 300 })];
  assert.equal(formatList(1, plain, { header: false }).split('\n')[2], 'UDP  10.96.0.10:5060 rr persistent 300');
  assert.equal(formatSave(plain), lines('-A -u 10.96.0.10:5060 -s rr -p 300'));
});

test('print_largenum at each unit boundary: < 10^8 as is, then K, M, G, T, each cut to 8 digits', () => {
  const cases: [number, string][] = [
    [99999999, ' 99999999'],
    [100000000, '  100000K'],
    [999999999, '  999999K'],
    [1000000000, '    1000M'],
    [5000000000, '    5000M'],
    [99999999999, '   99999M'],
    [100000000000, '     100G'],
    [99999999999999, '   99999G'],
    [100000000000000, '     100T'],
  ];
  assert.deepEqual(
    cases.map(([n]) => [n, largeNum(n, false)]),
    cases,
  );
  // --exact: "%*llu", width 9 up to 8 digits, else one more than the digits.
  assert.deepEqual(
    [1, 12345678, 123456789, 1e14].map((n) => largeNum(n, true)),
    ['        1', ' 12345678', ' 123456789', ' 100000000000000'],
  );
  // The same numbers through --stats, service and server lines alike.
  const st = { conns: 99999999, inPkts: 100000000, outPkts: 1000000000, inBytes: 100000000000, outBytes: 100000000000000 };
  const t = [svc('tcp', '10.96.0.10', 80, 'rr', [{ ...rs('10.200.11.2', 80, 'masq', 1), stats: st }], { stats: st })];
  assert.deepEqual(formatList(1, t, { stats: true, header: false }).split('\n').slice(2, 4), [
    'TCP  10.96.0.10:80                99999999  100000K    1000M     100G     100T',
    '  -> 10.200.11.2:80               99999999  100000K    1000M     100G     100T',
  ]);
});

test('-Lnc: the expiry is "%02d:%02d", seconds padded too', () => {
  const c = (expiresIn: number) => ({
    protocol: 'TCP',
    client: '10.200.1.2:40000',
    virtual: '10.96.0.10:80',
    realServer: '10.200.11.2:80',
    state: 'ESTABLISHED',
    expiresIn,
  });
  assert.deepEqual(
    formatConnections([c(65), c(5.9), c(3599.5), c(5400), c(-1)])
      .split('\n')
      .slice(2, -1)
      .map((l) => l.slice(4, 10)),
    ['01:05 ', '00:05 ', '59:59 ', '90:00 ', '00:00 '],
  );
});

test('without -n an IPv4 service name is cut at 33 characters (svc_name), an IPv6 one is not', () => {
  const long = 'a-very-long-virtual-service-hostname.example';
  const names = { host: () => long, service: () => 'http' };
  const t = [svc('tcp', '10.96.0.10', 80, 'rr', []), svc('tcp', 'fd00::10', 80, 'rr', [])];
  assert.deepEqual(formatList(1, t, { names, header: false }).split('\n').slice(2, 4), [
    'TCP  a-very-long-virtual-service- rr',
    `TCP  [${long}]:http rr`,
  ]);
});

test('libipvs orders IPv4 before IPv6 (af) before any address comparison', () => {
  const x = [
    { address: '2001:db8::2', port: 80 },
    { address: '10.0.0.2', port: 80 },
    { address: '2001:db8::1', port: 80 },
    { address: '10.0.0.1', port: 80 },
  ];
  const order = ['10.0.0.1', '10.0.0.2', '2001:db8::1', '2001:db8::2'];
  assert.deepEqual(
    sortRealServers(x).map((r) => r.address),
    order,
  );
  assert.deepEqual(
    sortRealServers([...x].reverse()).map((r) => r.address),
    order,
  );
});

test("glibcSort is glibc's merge sort: stable, equal elements keep their order", () => {
  const items = [
    { k: 2, id: 'a' },
    { k: 1, id: 'b' },
    { k: 2, id: 'c' },
    { k: 1, id: 'd' },
    { k: 1, id: 'e' },
  ];
  assert.deepEqual(
    glibcSort(items, (x, y) => x.k - y.k).map((x) => x.id),
    ['b', 'd', 'e', 'a', 'c'],
  );
  assert.deepEqual(
    items.map((x) => x.id),
    ['a', 'b', 'c', 'd', 'e'],
    'the input is left as it was',
  );
});

test('uvsadm -L --drain: service, server, time draining as HH:MM:SS (hours unbounded), connections, deadline or -', () => {
  assert.equal(
    formatDrains(2, [
      {
        service: 'tcp 10.96.0.10:80',
        realServer: '10.200.11.2:8080',
        drainingFor: 3725.9,
        deadline: '2026-12-01T21:00:00.000Z',
        activeConns: 3,
        inactConns: 12,
      },
      {
        service: 'sctp [fd00:200::10]:3868',
        realServer: '[fd00:200:11::2]:3868',
        drainingFor: 360009.7,
        deadline: null,
        activeConns: 0,
        inactConns: 1,
      },
    ]),
    lines(
      'Draining real servers (checked every 2 s)',
      'Prot LocalAddress:Port      -> RemoteAddress:Port        Since     ActiveConn InActConn  Deadline',
      'TCP  10.96.0.10:80          -> 10.200.11.2:8080          01:02:05  3          12         2026-12-01T21:00:00.000Z',
      'SCTP [fd00:200::10]:3868    -> [fd00:200:11::2]:3868     100:00:09 0          1          -',
    ),
  );
  assert.equal(
    formatDrains(0.5, []),
    lines(
      'Draining real servers (checked every 0.5 s)',
      'Prot LocalAddress:Port      -> RemoteAddress:Port        Since     ActiveConn InActConn  Deadline',
    ),
  );
});

test('uvsadm -L --health: sorted by service and server, up or DOWN, checks, the last error or -', () => {
  const h = (service: string, realServer: string, healthy: boolean, checks: number, lastError: string | null) => ({
    service,
    realServer,
    healthy,
    consecutiveOk: healthy ? checks : 0,
    consecutiveFail: healthy ? 0 : checks,
    lastError,
    checks,
  });
  const input = [
    h('udp 10.96.0.10:53', '10.200.11.2:53', true, 7, null),
    h('tcp 10.96.0.10:80', '10.200.12.2:8080', false, 41, 'HTTP 503, expected 200'),
    h('tcp 10.96.0.10:80', '10.200.11.2:8080', true, 40, null),
  ];
  assert.equal(
    formatHealth(input),
    lines(
      'Prot LocalAddress:Port      -> RemoteAddress:Port        Health  Checks   Last error',
      'TCP  10.96.0.10:80          -> 10.200.11.2:8080          up      40       -',
      'TCP  10.96.0.10:80          -> 10.200.12.2:8080          DOWN    41       HTTP 503, expected 200',
      'UDP  10.96.0.10:53          -> 10.200.11.2:53            up      7        -',
    ),
  );
  assert.equal(input[0]!.service, 'udp 10.96.0.10:53', 'the caller’s array is not reordered');
});

test('uvsadm -L --workers: id, up or DOWN, restarts, I/O path (- while starting), packets', () => {
  assert.equal(
    formatWorkers([
      { id: 0, ready: true, restarts: 0, io: 'io_uring', rxPackets: 123456789, txPackets: 123456000 },
      { id: 1, ready: false, restarts: 2, io: null, rxPackets: 0, txPackets: 0 },
    ]),
    lines(
      'Worker  State  Restarts  I/O       RxPkts       TxPkts',
      '0       up     0         io_uring  123456789    123456000',
      '1       DOWN   2         -         0            0',
    ),
  );
});

test('uvsadm -L --workers ends with the queue steering, and why not ebpf when auto fell back', () => {
  const w = [{ id: 0, ready: true, restarts: 0, io: 'io_uring', rxPackets: 1, txPackets: 1 }];
  const head = ['Worker  State  Restarts  I/O       RxPkts       TxPkts', '0       up     0         io_uring  1            1'];
  assert.equal(formatWorkers(w, { path: 'ebpf', reason: null }), lines(...head, 'Queue steering: ebpf'));
  assert.equal(
    formatWorkers(w, { path: 'automq', reason: 'bpf(BPF_PROG_LOAD): Operation not permitted' }),
    lines(...head, 'Queue steering: automq (bpf(BPF_PROG_LOAD): Operation not permitted)'),
  );
});

test('uvsadm -L --defense: room, each defense under its sysctl name, rates, drops, refusals, full-NAT pools', () => {
  const view = {
    amemthresh: 1024,
    freeEntries: 100,
    capacity: 4096,
    nomem: true,
    amDroprate: 10,
    dropRate: 7,
    secureTcpTimeout: 3,
    maxHalfOpenPerSource: 64,
    dropEntryScope: 'halfOpen' as const,
    defenses: [
      { name: 'dropEntry' as const, configured: 1, mode: 1, active: true },
      { name: 'dropPacket' as const, configured: 2, mode: 2, active: true },
      { name: 'secureTcp' as const, configured: 0, mode: 0, active: false },
      { name: 'halfOpenPerSource' as const, configured: 3, mode: 3, active: false },
    ],
    fullnatPools: [{ realServer: '10.200.11.2:8080', used: 5, capacity: 64512 }],
    synProxyMss: 1460,
    synProxyWscale: 7,
    synProxyPending: 2,
    synProxyHeld: 3,
    droppedHalfOpen: 11,
    droppedIdle: 12,
    secureTcpShortened: 13,
    refused: { dropPacket: 14, halfOpenPerSource: 15, tableFull: 16, fullnatPortsExhausted: 17 },
  };
  assert.equal(
    formatDefense(view),
    lines(
      'Overload defenses: 100 of 4096 entries free, amemthresh 1024: SHORT OF ROOM',
      'Defense               Set  Mode  Active',
      'drop_entry            1    1     yes',
      'drop_packet           2    2     yes',
      'secure_tcp            0    0     no',
      'half_open_per_source  3    3     no',
      'am_droprate 10, drop rate now 1/7, secure_tcp half-open timeout 3 s, half-open limit per source 64',
      'drop_entry drops: half-open entries only, nearest their timer first (dropEntryScope halfOpen)',
      'Dropped entries: 11 half-open, 12 idle; secure_tcp shortened 13',
      'Refused new flows: 14 drop_packet, 15 half-open limit, 16 table full, 17 full-NAT ports exhausted',
      'Full-NAT pool 10.200.11.2:8080: 5 of 64512 address:port pairs in use',
    ),
  );
  // The SYN proxy's line, when its counts are given, before the pools.
  const sp = formatDefense({
    ...view,
    defenses: [...view.defenses, { name: 'synProxy' as const, configured: 1, mode: 1, active: true }],
    synProxyCounts: { cookies: 100, accepted: 90, badCookies: 4, held: 20, heldRefused: 1, serverFailures: 5 },
  }).split('\n');
  assert.deepEqual(sp.slice(6, 7).concat(sp.slice(10, 13)), [
    'syn_proxy             1    1     yes',
    'Refused new flows: 14 drop_packet, 15 half-open limit, 16 table full, 17 full-NAT ports exhausted',
    'SYN proxy: 100 cookies sent, 90 accepted, 4 bad; 2 waiting for their server, 3 packets held (20 in all, 1 refused); 5 refused by the server',
    'Full-NAT pool 10.200.11.2:8080: 5 of 64512 address:port pairs in use',
  ]);
  // The kernel's scope says what it may take.
  assert.match(
    formatDefense({ ...view, dropEntryScope: 'kernel' }),
    /^drop_entry drops: as the kernel, half-open entries and idle ones with 1-8 packets, established ones too \(dropEntryScope kernel\)$/m,
  );
  // No drop rate in force: "-" (drop_packet's 1/rate only while it drops).
  assert.match(formatDefense({ ...view, dropRate: 0, nomem: false }), /^am_droprate 10, drop rate now -, secure_tcp/m);
  assert.match(formatDefense({ ...view, dropRate: 0, nomem: false }), /^Overload defenses: .*: room$/m);
});
