import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatConnections, formatList, formatTimeouts, largeNum } from '../../control/ipvsadm/format';

const zero = { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0 };
const rs = (address: string, port: number, weight: number, a: number, i: number, stats = zero) => ({
  address,
  port,
  forwarding: 'masq',
  weight,
  activeConns: a,
  inactConns: i,
  stats,
});

test('-Ln matches ipvsadm byte for byte, sorted by protocol, address and port', () => {
  const out = formatList(4096, [
    { protocol: 'udp', address: '10.0.0.100', port: 53, scheduler: 'rr', schedFlags: [], persistence: 360, stats: zero, realServers: [] },
    {
      protocol: 'tcp',
      address: '10.0.0.100',
      port: 80,
      scheduler: 'wlc',
      schedFlags: [],
      persistence: 0,
      stats: zero,
      realServers: [rs('10.0.0.2', 80, 2, 0, 0), rs('10.0.0.1', 80, 1, 3, 12)],
    },
  ]);
  assert.equal(
    out,
    [
      'IP Virtual Server version 1.2.1 (size=4096)',
      'Prot LocalAddress:Port Scheduler Flags',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  10.0.0.100:80 wlc',
      '  -> 10.0.0.1:80                  Masq    1      3          12        ',
      '  -> 10.0.0.2:80                  Masq    2      0          0         ',
      'UDP  10.0.0.100:53 rr persistent 360',
      '',
    ].join('\n'),
  );
});

test('--stats uses print_largenum scaling', () => {
  const st = { conns: 15, inPkts: 1234, outPkts: 1000, inBytes: 98765, outBytes: 123e9 };
  const out = formatList(
    4096,
    [
      {
        protocol: 'tcp',
        address: '10.0.0.100',
        port: 80,
        scheduler: 'wlc',
        schedFlags: [],
        persistence: 0,
        stats: st,
        realServers: [rs('10.0.0.1', 80, 1, 0, 0, st)],
      },
    ],
    { stats: true, header: false },
  );
  assert.equal(
    out,
    [
      'Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes',
      '  -> RemoteAddress:Port',
      'TCP  10.0.0.100:80                      15     1234     1000    98765     123G',
      '  -> 10.0.0.1:80                        15     1234     1000    98765     123G',
      '',
    ].join('\n'),
  );
  assert.equal(largeNum(123456789, false), '  123456K');
  assert.equal(largeNum(123456789, true), ' 123456789');
});

test('-Lnc prints expiry as MM:SS with unbounded minutes', () => {
  assert.equal(
    formatConnections([
      {
        protocol: 'TCP',
        client: '192.168.1.10:51234',
        virtual: '10.0.0.100:80',
        realServer: '10.0.0.1:80',
        state: 'ESTABLISHED',
        expiresIn: 898.7,
      },
    ]),
    'IPVS connection entries\npro expire state       source             virtual            destination\nTCP 14:58  ESTABLISHED 192.168.1.10:51234 10.0.0.100:80      10.0.0.1:80\n',
  );
  assert.equal(formatTimeouts({ tcp: 900, tcpFin: 120, udp: 300 }), 'Timeout (tcp tcpfin udp): 900 120 300\n');
});

test('IPv4 services list before IPv6 ones, IPv6 in [addr]:port, ordered by address bytes', () => {
  const svc = (address: string, port = 80) => ({
    protocol: 'tcp',
    address,
    port,
    scheduler: 'rr',
    schedFlags: [],
    persistence: 0,
    realServers: [],
  });
  const text = formatList(65536, [svc('fd00::20'), svc('10.0.0.2'), svc('fd00::3'), svc('10.0.0.1')] as never);
  const lines = text.split('\n').filter((l) => l.startsWith('TCP'));
  assert.deepEqual(
    lines.map((l) => l.split(/\s+/)[1]),
    ['10.0.0.1:80', '10.0.0.2:80', '[fd00::3]:80', '[fd00::20]:80'],
  );
});
