/**
 * uvsadm's listings against ipvsadm's printf formats. The expected text was printed by a small C
 * program calling printf with ipvsadm.c's format strings verbatim (print_title,
 * print_service_entry, print_largenum, list_conn) on the same data — byte for byte, trailing
 * spaces included.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  addrPort,
  formatConnections,
  formatList,
  formatSave,
  glibcSort,
  schedFlagsText,
  sortRealServers,
  sortServices,
  type FmtRealServer,
  type Names,
} from '../../control/ipvsadm/format';
import { lines, svc, zero } from '../helpers/ipvsadm';

const rs = (
  address: string,
  port: number,
  weight: number,
  activeConns: number,
  inactConns: number,
  more: Partial<FmtRealServer> = {},
): FmtRealServer => ({
  address,
  port,
  forwarding: 'masq',
  weight,
  activeConns,
  inactConns,
  stats: zero,
  ...more,
});

// Services and servers deliberately out of order: the listing sorts them like libipvs.
const table = [
  svc('udp', '10.200.0.10', 53, 'mh', [rs('10.200.11.2', 5353, 1, 0, 15)], { schedFlags: ['mh-port'], persistence: 60 }),
  svc('tcp', '10.200.0.11', 80, 'rr', [], { schedFlags: ['flag-3', 'flag-1'] }),
  svc('tcp', '10.200.0.10', 443, 'sh', [rs('10.200.11.2', 443, 1, 0, 0)], {
    schedFlags: ['sh-port', 'sh-fallback'],
    persistence: 360,
    netmask: '255.255.255.0',
  }),
  svc('tcp', '10.200.0.10', 80, 'wrr', [
    rs('10.200.13.2', 8080, 65535, 4294967295, 0),
    rs('10.200.11.2', 8080, 3, 12, 345),
    rs('10.200.12.2', 8080, 0, 0, 7),
  ]),
];

test('-Ln: version line, title, services sorted by protocol/address/port with schedulers, flags, persistence and mask', () => {
  assert.equal(
    formatList(65536, table),
    lines(
      'IP Virtual Server version 1.2.1 (size=65536)',
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  10.200.0.10:80 wrr',
      '  -> 10.200.11.2:8080             Masq    3      12         345       ',
      '  -> 10.200.12.2:8080             Masq    0      0          7         ',
      '  -> 10.200.13.2:8080             Masq    65535  4294967295 0         ',
      'TCP  10.200.0.10:443 sh (sh-fallback,sh-port) persistent 360 mask 255.255.255.0',
      '  -> 10.200.11.2:443              Masq    1      0          0         ',
      'TCP  10.200.0.11:80 rr (flag-1,flag-3)',
      'UDP  10.200.0.10:53 mh (mh-port) persistent 60',
      '  -> 10.200.11.2:5353             Masq    1      0          15        ',
    ),
  );
});

test('-L <service> prints no version line; --nosort keeps the API (kernel) order', () => {
  const one = formatList(65536, [table[3]!], { header: false, nosort: true });
  assert.equal(
    one,
    lines(
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  10.200.0.10:80 wrr',
      '  -> 10.200.13.2:8080             Masq    65535  4294967295 0         ',
      '  -> 10.200.11.2:8080             Masq    3      12         345       ',
      '  -> 10.200.12.2:8080             Masq    0      0          7         ',
    ),
  );
  const order = formatList(1, table, { nosort: true })
    .split('\n')
    .filter((l) => /^(TCP|UDP) /.test(l));
  assert.deepEqual(
    order.map((l) => l.split(' ')[2]),
    ['10.200.0.10:53', '10.200.0.11:80', '10.200.0.10:443', '10.200.0.10:80'],
  );
});

const big = { conns: 15, inPkts: 123456789, outPkts: 99999999, inBytes: 1234567890123, outBytes: 123456789012345 };

test('--stats scales with print_largenum (K, M, G, T) and --exact expands', () => {
  const t = [svc('tcp', '10.200.0.10', 80, 'wlc', [rs('10.200.11.2', 8080, 1, 0, 0, { stats: big })], { stats: big })];
  assert.equal(
    formatList(1, t, { stats: true, header: false }),
    lines(
      'Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes',
      '  -> RemoteAddress:Port',
      'TCP  10.200.0.10:80                     15  123456K 99999999    1234G     123T',
      '  -> 10.200.11.2:8080                   15  123456K 99999999    1234G     123T',
    ),
  );
  assert.equal(
    formatList(1, t, { stats: true, exact: true, header: false }).split('\n').slice(2).join('\n'),
    lines(
      'TCP  10.200.0.10:80                     15 123456789 99999999 1234567890123 123456789012345',
      '  -> 10.200.11.2:8080                   15 123456789 99999999 1234567890123 123456789012345',
    ),
  );
});

test('--rate: service rates all through print_largenum, server cps/pps as %8llu', () => {
  const rates = { cps: 25, inPps: 1200, outPps: 1100, inBps: 1500000, outBps: 987654321 };
  const t = [svc('tcp', '10.200.0.10', 80, 'wlc', [rs('10.200.11.2', 8080, 1, 0, 0, { rates })], { rates })];
  assert.equal(
    formatList(1, t, { rate: true, header: false }),
    lines(
      'Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS',
      '  -> RemoteAddress:Port',
      'TCP  10.200.0.10:80                     25     1200     1100  1500000  987654K',
      '  -> 10.200.11.2:8080                   25     1200     1100  1500000  987654K',
    ),
  );
  // No rates from the daemon: zeros, in the same layout.
  const none = formatList(1, [svc('tcp', '10.200.0.10', 80, 'wlc', [rs('10.200.11.2', 8080, 1, 0, 0)])], { rate: true, header: false });
  assert.equal(none.split('\n')[3], '  -> 10.200.11.2:8080                    0        0        0        0        0');
});

test('--thresholds, --persistent-conn and --tun-info use their own titles and server lines', () => {
  const t = [
    svc('tcp', '10.200.0.10', 80, 'wlc', [
      rs('10.200.12.2', 8080, 1, 0, 0),
      rs('10.200.11.2', 8080, 2, 3, 4, { upperThreshold: 100, lowerThreshold: 75, persistConns: 5 }),
    ]),
  ];
  assert.equal(
    formatList(1, t, { thresholds: true, header: false }),
    lines(
      'Prot LocalAddress:Port            Uthreshold Lthreshold ActiveConn InActConn ',
      '  -> RemoteAddress:Port',
      'TCP  10.200.0.10:80 wlc',
      '  -> 10.200.11.2:8080             100        75         3          4         ',
      '  -> 10.200.12.2:8080             0          0          0          0         ',
    ),
  );
  const p = [svc('tcp', '10.200.0.10', 80, 'wlc', [t[0]!.realServers[1]!], { persistence: 360 })];
  assert.equal(
    formatList(1, p, { persistentConn: true, header: false }),
    lines(
      'Prot LocalAddress:Port            Weight    PersistConn ActiveConn InActConn ',
      '  -> RemoteAddress:Port',
      'TCP  10.200.0.10:80 wlc persistent 360',
      '  -> 10.200.11.2:8080             2         5           3          4         ',
    ),
  );
  assert.equal(
    formatList(1, [svc('tcp', '10.200.0.10', 80, 'wlc', [rs('10.200.11.2', 8080, 1, 3, 4)])], { tunInfo: true, header: false }),
    lines(
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn',
      'TCP  10.200.0.10:80 wlc',
      '  -> 10.200.11.2:8080             Masq    n/a           1      3          4         ',
    ),
  );
});

test('many real servers are listed in address order, numerically within a /16', () => {
  const many = Array.from({ length: 40 }, (_, i) =>
    rs(`10.200.${11 + (i % 4)}.${2 + Math.floor(i / 4) * 3}`, 8080 + (i % 2), 1 + (i % 5), i, 2 * i),
  );
  const out = formatList(1, [svc('tcp', '10.200.0.10', 80, 'lc', [...many].reverse())], { header: false })
    .split('\n')
    .slice(3, -1);
  assert.equal(out.length, 40);
  const addrs = out.map((l) => l.slice(5, 33).trim());
  const key = (a: string) => {
    const [ip, port] = a.split(':');
    return ip!.split('.').reduce((x, o) => x * 256 + Number(o), 0) * 65536 + Number(port);
  };
  assert.deepEqual(
    addrs,
    [...addrs].sort((a, b) => key(a) - key(b)),
  );
  for (const l of out) assert.match(l, /^ {2}-> \S+ +Masq {4}\d+ +\d+ +\d+ +$/);
});

test("sorting keeps libipvs's 32-bit comparator: 192.168.x lists before 10.x", () => {
  const s = sortServices([svc('tcp', '10.0.0.1', 80, 'rr', []), svc('tcp', '192.168.0.1', 80, 'rr', [])]);
  assert.deepEqual(
    s.map((x) => x.address),
    ['192.168.0.1', '10.0.0.1'],
  );
  assert.deepEqual(
    sortServices([svc('udp', '10.0.0.1', 1, 'rr', []), svc('tcp', '10.0.0.2', 2, 'rr', [])]).map((x) => x.protocol),
    ['tcp', 'udp'],
  );
});

test('scheduler flags print by bit and scheduler, as print_sched_flags', () => {
  assert.equal(schedFlagsText('sh', ['flag-2', 'flag-1']), 'sh-fallback,sh-port');
  assert.equal(schedFlagsText('mh', ['mh-fallback']), 'mh-fallback');
  assert.equal(schedFlagsText('rr', ['flag-2']), 'flag-2');
  assert.equal(schedFlagsText('sh', ['flag-3']), '', 'sh has no name for SCHED3');
});

test('-S prints -A/-a rules, sorted, with -p, -M and -b, no title', () => {
  assert.equal(
    formatSave(table),
    lines(
      '-A -t 10.200.0.10:80 -s wrr',
      '-a -t 10.200.0.10:80 -r 10.200.11.2:8080 -m -w 3',
      '-a -t 10.200.0.10:80 -r 10.200.12.2:8080 -m -w 0',
      '-a -t 10.200.0.10:80 -r 10.200.13.2:8080 -m -w 65535',
      '-A -t 10.200.0.10:443 -s sh -p 360 -M 255.255.255.0 -b sh-fallback,sh-port',
      '-a -t 10.200.0.10:443 -r 10.200.11.2:443 -m -w 1',
      '-A -t 10.200.0.11:80 -s rr -b flag-1,flag-3',
      '-A -u 10.200.0.10:53 -s mh -p 60 -b mh-port',
      '-a -u 10.200.0.10:53 -r 10.200.11.2:5353 -m -w 1',
    ),
  );
  assert.equal(formatSave([]), '');
  // ipvsadm drops thresholds from -S; uvs keeps them so that -S | -R loses nothing.
  assert.equal(
    formatSave([
      svc('tcp', '10.200.0.10', 80, 'wlc', [
        rs('10.200.11.2', 8080, 1, 0, 0, { upperThreshold: 100, lowerThreshold: 50 }),
        rs('10.200.12.2', 8080, 1, 0, 0, { upperThreshold: 7 }),
      ]),
    ]),
    lines(
      '-A -t 10.200.0.10:80 -s wlc',
      '-a -t 10.200.0.10:80 -r 10.200.11.2:8080 -m -w 1 -x 100 -y 50',
      '-a -t 10.200.0.10:80 -r 10.200.12.2:8080 -m -w 1 -x 7',
    ),
  );
  // uvs's own --proxy-protocol goes with its full-NAT servers, so that -S | -R keeps it.
  assert.equal(
    formatSave([svc('tcp', '10.200.0.10', 80, 'rr', [rs('10.200.11.2', 8080, 1, 0, 0, { forwarding: 'fullnat', proxyProtocol: 'v2' })])]),
    lines('-A -t 10.200.0.10:80 -s rr', '-a -t 10.200.0.10:80 -r 10.200.11.2:8080 --fullnat -w 1 --proxy-protocol v2'),
  );
});

test('-Lnc with --persistent-conn gains the pe columns in the title only', () => {
  const c = [
    {
      protocol: 'UDP',
      client: '10.200.1.2:40000',
      virtual: '10.200.0.10:53',
      realServer: '10.200.11.2:5353',
      state: 'UDP',
      expiresIn: 299.9,
    },
  ];
  assert.equal(
    formatConnections(c, { persistentConn: true }),
    lines(
      'IPVS connection entries',
      'pro expire state       source             virtual            destination        pe name          pe_data',
      'UDP 04:59  UDP         10.200.1.2:40000   10.200.0.10:53     10.200.11.2:5353',
    ),
  );
});

test('SCTP services list as "SCTP  addr:port sched" after TCP and UDP (protocol 132), and save as --sctp-service', () => {
  const t = [svc('sctp', '10.200.0.10', 3868, 'rr', [rs('10.200.11.2', 13868, 1, 2, 1)]), ...table.slice(0, 1)];
  assert.equal(
    formatList(4096, t),
    lines(
      'IP Virtual Server version 1.2.1 (size=4096)',
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'UDP  10.200.0.10:53 mh (mh-port) persistent 60',
      '  -> 10.200.11.2:5353             Masq    1      0          15        ',
      'SCTP 10.200.0.10:3868 rr',
      '  -> 10.200.11.2:13868            Masq    1      2          1         ',
    ),
  );
  assert.equal(
    formatSave(t.slice(0, 1)),
    lines('-A --sctp-service 10.200.0.10:3868 -s rr', '-a --sctp-service 10.200.0.10:3868 -r 10.200.11.2:13868 -m -w 1'),
  );
});

// The orders below were printed by a small C program that sorts the same entries with glibc 2.36's
// qsort and a comparator of libipvs's shape (`int r = ntohl(a) - ntohl(b)` per 32-bit word, then
// the port). Those comparisons are not transitive (10.x < 100.x < 200.x < 10.x), so only the same
// algorithm gives the same order.
test('services and servers sort as libipvs + glibc qsort order them, signed word differences included', () => {
  const v4 = [
    '200.0.0.1:80',
    '10.0.0.1:80',
    '100.0.0.1:80',
    '10.0.0.1:443',
    '192.168.1.1:80',
    '50.0.0.1:80',
    '150.0.0.1:80',
    '10.200.0.10:80',
    '250.0.0.1:80',
  ];
  const v4Sorted = [
    '150.0.0.1:80',
    '192.168.1.1:80',
    '200.0.0.1:80',
    '250.0.0.1:80',
    '10.0.0.1:80',
    '10.0.0.1:443',
    '10.200.0.10:80',
    '50.0.0.1:80',
    '100.0.0.1:80',
  ];
  const split = (x: string) => {
    const i = x.lastIndexOf(':');
    return { address: x.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(x.slice(i + 1)) };
  };
  const name = (x: { address: string; port: number }) => (x.address.includes(':') ? `[${x.address}]:${x.port}` : `${x.address}:${x.port}`);
  assert.deepEqual(sortRealServers(v4.map(split)).map(name), v4Sorted);
  assert.deepEqual(sortServices(v4.map((x) => svc('tcp', split(x).address, split(x).port, 'rr', []))).map(name), v4Sorted);
  const v6 = [
    '[2001:db8::1]:80',
    '[9000::1]:80',
    '[fd00::1]:80',
    '[fd00:200::10]:80',
    '[2001:db8::1]:443',
    '[fd00::1]:8080',
    '[9000::2]:80',
  ];
  const v6Sorted = [
    '[2001:db8::1]:80',
    '[9000::1]:80',
    '[9000::2]:80',
    '[fd00::1]:80',
    '[fd00::1]:8080',
    '[fd00:200::10]:80',
    '[2001:db8::1]:443',
  ];
  assert.deepEqual(sortRealServers(v6.map(split)).map(name), v6Sorted);
  assert.deepEqual(sortServices(v6.map((x) => svc('udp', split(x).address, split(x).port, 'rr', []))).map(name), v6Sorted);
  // The case the issue names: fd00:: is 0xfd000000 - 0x20010db8 > 2^31 away, so it lists first.
  assert.deepEqual(sortServices([svc('tcp', '2001:db8::1', 80, 'rr', []), svc('tcp', 'fd00:200::10', 80, 'rr', [])]).map(name), [
    '[fd00:200::10]:80',
    '[2001:db8::1]:80',
  ]);
  // An input where TimSort (Array.prototype.sort) and glibc's merge sort disagree: glibc's order.
  const cycle = ['16.0.0.1', '158.0.0.1', '126.0.0.1', '52.0.0.1', '228.0.0.1', '17.0.0.1', '205.0.0.1', '37.0.0.1', '6.0.0.1'];
  assert.deepEqual(
    sortRealServers(cycle.map((address) => ({ address, port: 80 }))).map((x) => x.address),
    ['205.0.0.1', '228.0.0.1', '6.0.0.1', '17.0.0.1', '37.0.0.1', '52.0.0.1', '126.0.0.1', '158.0.0.1', '16.0.0.1'],
  );
  assert.deepEqual(
    glibcSort([3, 1, 2, 1], (a, b) => a - b),
    [1, 1, 2, 3],
  );
});

test('an IPv6 persistent service prints its mask only when it is not /128, in every listing and in -S', () => {
  const v6 = (netmask: string) => [
    svc('tcp', 'fd00:200::10', 80, 'rr', [rs('fd00:200:11::2', 8080, 1, 0, 0)], { persistence: 300, netmask }),
  ];
  for (const o of [{}, { thresholds: true }, { persistentConn: true }, { tunInfo: true }, { header: false }]) {
    const line = (nm: string) =>
      formatList(1, v6(nm), o)
        .split('\n')
        .find((l) => l.startsWith('TCP '));
    assert.equal(line('128'), 'TCP  [fd00:200::10]:80 rr persistent 300', JSON.stringify(o));
    assert.equal(line('64'), 'TCP  [fd00:200::10]:80 rr persistent 300 mask 64', JSON.stringify(o));
  }
  assert.equal(formatSave(v6('128')).split('\n')[0], '-A -t [fd00:200::10]:80 -s rr -p 300');
  assert.equal(formatSave(v6('64')).split('\n')[0], '-A -t [fd00:200::10]:80 -s rr -p 300 -M 64');
  // IPv4 keeps its dotted mask, and none for 255.255.255.255.
  assert.equal(
    formatSave([svc('tcp', '10.0.0.1', 80, 'rr', [], { persistence: 300, netmask: '255.255.255.255' })]),
    lines('-A -t 10.0.0.1:80 -s rr -p 300'),
  );
});

test('without -n, names replace numbers where found (addrport_to_anyname), cut as ipvsadm cuts them', () => {
  const hosts: Record<string, string> = {
    '10.200.0.10': 'web.lb.example',
    '10.200.11.2': 'a-rather-long-real-server-name.example',
    'fd00:200::10': 'web6',
  };
  const services: Record<string, string> = { '80/tcp': 'http', '8080/tcp': 'http-alt', '53/udp': 'domain' };
  const names: Names = { host: (a) => hosts[a] ?? null, service: (p, proto) => services[`${p}/${proto}`] ?? null };
  const t = [
    svc('tcp', '10.200.0.10', 80, 'rr', [rs('10.200.11.2', 8080, 1, 0, 0), rs('10.200.12.2', 8080, 1, 0, 0)]),
    svc('udp', '10.200.0.10', 53, 'rr', [rs('10.200.12.2', 5353, 1, 0, 0)]),
    svc('tcp', 'fd00:200::10', 80, 'rr', [rs('fd00:200:11::2', 8080, 1, 0, 0)]),
  ];
  assert.equal(
    formatList(1, t, { names, header: false }),
    lines(
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  web.lb.example:http rr',
      '  -> a-rather-long-real-server-na Masq    1      0          0         ',
      '  -> 10.200.12.2:http-alt         Masq    1      0          0         ',
      'UDP  web.lb.example:domain rr',
      '  -> 10.200.12.2:5353             Masq    1      0          0         ',
      'TCP  [web6]:http rr',
      '  -> [fd00:200:11::2]:http-alt    Masq    1      0          0         ',
    ),
  );
  assert.equal(
    formatSave(t.slice(0, 1), names),
    lines(
      '-A -t web.lb.example:http -s rr',
      '-a -t web.lb.example:http -r a-rather-long-real-server-name.example:http-alt -m -w 1',
      '-a -t web.lb.example:http -r 10.200.12.2:http-alt -m -w 1',
    ),
  );
  const c = [
    {
      protocol: 'TCP',
      client: '10.200.1.2:40000',
      virtual: '10.200.0.10:80',
      realServer: '[fd00:200:11::2]:8080',
      state: 'ESTABLISHED',
      expiresIn: 899,
    },
  ];
  assert.equal(
    formatConnections(c, { names }).split('\n')[2],
    'TCP 14:59  ESTABLISHED 10.200.1.2:40000   web.lb.example:http [fd00:200:11::2]:http-alt',
  );
  assert.equal(
    addrPort('10.0.0.1', 80, 'tcp', { host: () => 'x'.repeat(80), service: () => 'http' }).length,
    59,
    "addrport_to_anyname's 60-byte buffer",
  );
  // No names (-n): numbers, the same text as before.
  assert.equal(formatList(1, t), formatList(1, t, { names: { host: () => null, service: () => null } }));
});
