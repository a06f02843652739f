/**
 * uvs simulate: the scenario contract (persistence, thresholds, trash, timers, previews) and its
 * errors, through runScenario().
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runScenario, ScenarioError } from '../../control/simulate';

type Ev = Record<string, unknown>;
const SVC = { address: '10.96.0.10', port: 80 };
const rs = (...as: string[]) => as.map((a) => ({ address: a, port: 80, weight: 1 }));
const connect = (client: string, clientPort: number): Ev => ({ connect: { client, clientPort } });

function run(s: Record<string, unknown>): Record<string, unknown>[] {
  return runScenario({ service: SVC, ...s }).map((l) => JSON.parse(l) as Record<string, unknown>);
}
/** The real servers of the connect lines, "a.b.c.d" without ":80". */
function servers(s: Record<string, unknown>): (string | null)[] {
  return run(s)
    .filter((l) => 'realServer' in l)
    .map((l) => (l.realServer === null ? null : String(l.realServer).replace(/:80$/, '')));
}
function failure(s: Record<string, unknown>): ScenarioError {
  try {
    runScenario({ service: SVC, ...s });
  } catch (e) {
    if (e instanceof ScenarioError) return e;
    throw e;
  }
  assert.fail('the scenario was accepted');
}

test('one line per connect, with the event index, the real server and the connect number', () => {
  const out = run({
    scheduler: 'rr',
    realServers: rs('10.0.0.1', '10.0.0.2'),
    events: [connect('1.1.1.1', 1), { advance: 1 }, connect('1.1.1.1', 2)],
  });
  assert.deepEqual(out, [
    { event: 0, realServer: '10.0.0.2:80', connect: 0 },
    { event: 2, realServer: '10.0.0.1:80', connect: 1 },
  ]);
});

test('persistence with netmask 255.255.255.0 sends 10.1.2.3 and 10.1.2.99 to the same server, another /24 elsewhere', () => {
  const s = { scheduler: 'rr', persistence: 300, netmask: '255.255.255.0', realServers: rs('10.0.0.1', '10.0.0.2', '10.0.0.3') };
  assert.deepEqual(
    servers({
      ...s,
      events: [connect('10.1.2.3', 1000), connect('10.1.2.99', 1000), connect('10.1.3.3', 1000), connect('10.1.2.3', 1001)],
    }),
    ['10.0.0.3', '10.0.0.3', '10.0.0.2', '10.0.0.3'],
  );
  // without persistence each connect moves on
  assert.deepEqual(
    servers({
      scheduler: 'rr',
      realServers: rs('10.0.0.1', '10.0.0.2', '10.0.0.3'),
      events: [connect('10.1.2.3', 1000), connect('10.1.2.99', 1000)],
    }),
    ['10.0.0.3', '10.0.0.2'],
  );
});

test('a persistent client keeps reaching a weight-0 server, unless expireQuiescentTemplate is true', () => {
  const events = [connect('10.1.2.3', 1), { setWeight: { realServer: '10.0.0.2:80', weight: 0 } }, connect('10.1.2.3', 2)];
  const s = { scheduler: 'rr', persistence: 300, realServers: rs('10.0.0.1', '10.0.0.2'), events };
  assert.deepEqual(servers(s), ['10.0.0.2', '10.0.0.2']);
  assert.deepEqual(servers({ ...s, expireQuiescentTemplate: true }), ['10.0.0.2', '10.0.0.1']);
});

test('a template of a deleted server is never matched again, even after the server comes back', () => {
  const events = [
    connect('10.1.2.3', 1),
    { delete: '10.0.0.2:80' },
    connect('10.1.2.3', 2), // template invalidated: scheduled anew
    { add: { address: '10.0.0.2', port: 80, weight: 1 } },
    connect('10.1.2.3', 3), // the new template (10.0.0.1) holds
  ];
  assert.deepEqual(servers({ scheduler: 'rr', persistence: 300, realServers: rs('10.0.0.1', '10.0.0.2'), events }), [
    '10.0.0.2',
    '10.0.0.1',
    '10.0.0.1',
  ]);
  // deleted and re-added before any lookup: the template still holds
  const back = [connect('10.1.2.3', 1), { delete: '10.0.0.2:80' }, { add: { address: '10.0.0.2', port: 80 } }, connect('10.1.2.3', 2)];
  assert.deepEqual(servers({ scheduler: 'rr', persistence: 300, realServers: rs('10.0.0.1', '10.0.0.2'), events: back }), [
    '10.0.0.2',
    '10.0.0.2',
  ]);
});

test('each connection through a template re-arms it to now + timeout', () => {
  const s = { scheduler: 'rr', persistence: 100, realServers: rs('10.0.0.1', '10.0.0.2') };
  const events = [
    connect('10.1.2.3', 1),
    { expire: 0 },
    { advance: 90 },
    connect('10.1.2.3', 2), // t=90: template alive, re-armed to 190
    { expire: 1 },
    { advance: 99 },
    connect('10.1.2.3', 3), // t=189: still alive, re-armed to 289
    { expire: 2 },
    { advance: 100 },
    connect('10.1.2.3', 4), // t=289: it died at 289, before this event
  ];
  assert.deepEqual(servers({ ...s, events }), ['10.0.0.2', '10.0.0.2', '10.0.0.2', '10.0.0.1']);
});

test('a template firing while it controls a connection is re-armed for 60 s, and 60 s stays its timeout', () => {
  const s = { scheduler: 'rr', persistence: 10, realServers: rs('10.0.0.1', '10.0.0.2') };
  const events = [
    connect('10.1.2.3', 1), // t=0 → .2, template until 10
    { advance: 10 }, // fires with a live connection: re-armed to 70
    { expire: 0 },
    { advance: 59 },
    connect('10.1.2.3', 2), // t=69: alive; re-armed to 69 + 60 = 129 (not 69 + 10)
    { expire: 1 },
    { advance: 50 },
    connect('10.1.2.3', 3), // t=119: alive thanks to the 60-s timeout
    { expire: 2 },
    { advance: 60 },
    connect('10.1.2.3', 4), // t=179: gone (re-armed to 179 at t=119, fired at 179 before this)
  ];
  assert.deepEqual(servers({ ...s, events }), ['10.0.0.2', '10.0.0.2', '10.0.0.2', '10.0.0.1']);
});

test('at the same instant connections expire before templates: a template whose last connection ends with it dies', () => {
  // TCP connection and template both due at t=900: the connection goes first, the template then
  // controls nothing and is freed instead of being re-armed.
  const events = [connect('10.1.2.3', 1), { advance: 900 }, connect('10.1.2.3', 2)];
  assert.deepEqual(servers({ scheduler: 'rr', persistence: 900, realServers: rs('10.0.0.1', '10.0.0.2'), events }), [
    '10.0.0.2',
    '10.0.0.1',
  ]);
});

test('thresholds -x 2 -y 1: OVERLOAD from the 2nd connection until total connections drop below 1', () => {
  const realServers = [
    { address: '10.0.0.2', weight: 1 },
    { address: '10.0.0.1', weight: 2, upper: 2, lower: 1 },
  ];
  const events = [
    connect('1.1.1.1', 1), // A
    connect('1.1.1.1', 2), // A: now 2 ≥ 2 → OVERLOAD
    connect('1.1.1.1', 3), // B
    { expire: 0 }, // A has 1, not < 1: still overloaded
    connect('1.1.1.1', 4), // B
    { finish: 1 }, // active → inactive: no re-evaluation
    connect('1.1.1.1', 5), // B
    { expire: 1 }, // 0 < 1: cleared
    connect('1.1.1.1', 6), // A
  ];
  assert.deepEqual(servers({ scheduler: 'fo', realServers, events }), [
    '10.0.0.1',
    '10.0.0.1',
    '10.0.0.2',
    '10.0.0.2',
    '10.0.0.2',
    '10.0.0.1',
  ]);
});

test('without a lower threshold OVERLOAD clears when total·4 < upper·3; raising upper clears it at once', () => {
  const realServers = [
    { address: '10.0.0.2', weight: 1 },
    { address: '10.0.0.1', weight: 2, upper: 4 },
  ];
  const four = [connect('1.1.1.1', 1), connect('1.1.1.1', 2), connect('1.1.1.1', 3), connect('1.1.1.1', 4)];
  const events = [
    ...four, // A ×4: OVERLOAD
    { expire: 0 }, // 3·4 = 12 < 12? no
    connect('1.1.1.1', 5), // B
    { expire: 1 }, // 2·4 < 12: cleared
    connect('1.1.1.1', 6), // A (3 again: below 4)
    connect('1.1.1.1', 7), // A (4: OVERLOAD)
    connect('1.1.1.1', 8), // B
    { setThresholds: { realServer: '10.0.0.1:80', upper: 10, lower: 0 } }, // raised: cleared
    connect('1.1.1.1', 9), // A
  ];
  assert.deepEqual(servers({ scheduler: 'fo', realServers, events }), [
    ...['10.0.0.1', '10.0.0.1', '10.0.0.1', '10.0.0.1'],
    '10.0.0.2',
    '10.0.0.1',
    '10.0.0.1',
    '10.0.0.2',
    '10.0.0.1',
  ]);
});

test('delete then add revives the server from the trash with its connection counts', () => {
  const events = [
    connect('1.1.1.1', 1), // lc: .2 (first in list)
    connect('1.1.1.1', 2), // .1
    connect('1.1.1.1', 3), // .2 (tie, first)
    { delete: '10.0.0.2:80' },
    connect('1.1.1.1', 4), // only .1
    { add: { address: '10.0.0.2', port: 80, weight: 1 } }, // back at the head with 2 active
    connect('1.1.1.1', 5), // .1 has 2, .2 has 2: tie, .2 first
    connect('1.1.1.1', 6), // .2 has 3 now: .1
  ];
  assert.deepEqual(servers({ scheduler: 'lc', realServers: rs('10.0.0.1', '10.0.0.2'), events }), [
    '10.0.0.2',
    '10.0.0.1',
    '10.0.0.2',
    '10.0.0.1',
    '10.0.0.2',
    '10.0.0.1',
  ]);
});

test('TCP finish moves a connection to InActConn for 120 s; UDP connects count as inactive for 300 s', () => {
  const tcpEvents = [connect('1.1.1.1', 1), { finish: 0 }, connect('1.1.1.1', 2), connect('1.1.1.1', 3)];
  // lc: after finish .2 has overhead 1, .1 has 0 → .1; then .1 has 256 → .2
  assert.deepEqual(servers({ scheduler: 'lc', realServers: rs('10.0.0.1', '10.0.0.2'), events: tcpEvents }), [
    '10.0.0.2',
    '10.0.0.1',
    '10.0.0.2',
  ]);
  // the finished connection is tracked until its TIME_WAIT ends
  assert.match(
    failure({
      scheduler: 'lc',
      realServers: rs('10.0.0.1'),
      events: [connect('1.1.1.1', 1), { finish: 0 }, { advance: 119 }, connect('1.1.1.1', 1)],
    }).path,
    /clientPort/,
  );
  assert.deepEqual(
    servers({
      scheduler: 'lc',
      realServers: rs('10.0.0.1'),
      events: [connect('1.1.1.1', 1), { finish: 0 }, { advance: 120 }, connect('1.1.1.1', 1)],
    }),
    ['10.0.0.1', '10.0.0.1'],
  );
  // UDP: inactive (overhead 1), finish is a no-op, gone after 300 s
  const udp = [connect('1.1.1.1', 1), { finish: 0 }, connect('1.1.1.1', 2), connect('1.1.1.1', 3), { advance: 300 }, connect('1.1.1.1', 4)];
  assert.deepEqual(servers({ scheduler: 'lc', protocol: 'udp', realServers: rs('10.0.0.1', '10.0.0.2'), events: udp }), [
    '10.0.0.2',
    '10.0.0.1',
    '10.0.0.2',
    '10.0.0.2',
  ]);
});

test('finish and expire of a null or already expired connection are no-ops; K counts null connects too', () => {
  const events = [
    connect('1.1.1.1', 1),
    { setWeight: { realServer: '10.0.0.1:80', weight: 1 } },
    connect('1.1.1.1', 2),
    { expire: 1 },
    { expire: 1 },
    { finish: 1 },
    { expire: 0 },
  ];
  const out = run({ scheduler: 'rr', realServers: [{ address: '10.0.0.1', weight: 0 }], events });
  assert.deepEqual(
    out.map((l) => l.realServer),
    [null, '10.0.0.1:80'],
  );
});

test('a preview reports moved slots and flows without changing the service', () => {
  const base = { scheduler: 'mh', realServers: rs('10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4') };
  const clients = Array.from({ length: 200 }, (_, i) => connect(`172.16.${i >> 8}.${i & 255}`, 5000));
  const out = run({ ...base, events: [...clients, { preview: { delete: ['10.0.0.3:80'] } }, connect('192.168.1.100', 1)] });
  const p = out[200]!;
  assert.equal(p.event, 200);
  assert.equal(p.slots, 4093);
  const onDeleted = out.slice(0, 200).filter((l) => l.realServer === '10.0.0.3:80').length;
  assert.ok((p.slotsMoved as number) >= 0.25 && (p.slotsMoved as number) < 0.3, `${p.slotsMoved}`);
  assert.ok((p.flowsChanged as number) >= onDeleted);
  assert.ok((p.flowsMoved as number) < 0.32);
  // the service is unchanged: the next connect goes where it would have gone
  const plain = run({ ...base, events: [...clients, connect('192.168.1.100', 1)] });
  assert.deepEqual(out[201], { ...plain[200], event: 201 });
});

test('a preview of weight 0 on mh moves no slot but every flow on that server', () => {
  const base = { scheduler: 'mh', realServers: rs('10.0.0.1', '10.0.0.2', '10.0.0.3') };
  const clients = Array.from({ length: 90 }, (_, i) => connect(`172.16.0.${i}`, 5000));
  const out = run({ ...base, events: [...clients, { preview: { setWeight: [{ realServer: '10.0.0.1:80', weight: 0 }] } }] });
  const p = out[90]!;
  assert.equal(p.slotsMoved, 0);
  assert.equal(p.flowsChanged, out.slice(0, 90).filter((l) => l.realServer === '10.0.0.1:80').length);
});

test('IPv6 services print endpoints as [addr]:port in RFC 5952 form', () => {
  const out = run({
    service: { address: '2001:db8::10', port: 80 },
    scheduler: 'sh',
    realServers: [{ address: '2001:DB8:0:0:0:0:0:1', port: 8080 }],
    events: [connect('2001:db8:1::5', 1), { setWeight: { realServer: '[2001:db8::1]:8080', weight: 2 } }, connect('2001:db8:1::5', 2)],
  });
  assert.deepEqual(
    out.map((l) => l.realServer),
    ['[2001:db8::1]:8080', '[2001:db8::1]:8080'],
  );
});

test('twos decisions follow the seed', () => {
  const s = (seed: number) => ({
    scheduler: 'twos',
    seed,
    realServers: rs('10.0.0.1', '10.0.0.2', '10.0.0.3'),
    events: Array.from({ length: 30 }, (_, i) => connect('1.1.1.1', i + 1)),
  });
  assert.deepEqual(servers(s(5)), servers(s(5)));
  assert.notDeepEqual(servers(s(5)), servers(s(6)));
});

test('bad scenarios are rejected with the field that is wrong', () => {
  const r = rs('10.0.0.1');
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ realServers: r, events: [{ add: { address: '10.0.0.1', port: 80 } }] }, 'events[0].add', /already in the real-server list/],
    [{ realServers: r, events: [{ delete: '10.0.0.9:80' }] }, 'events[0].delete', /not in the real-server list/],
    [
      { realServers: r, events: [{ delete: '10.0.0.1:80' }, { setWeight: { realServer: '10.0.0.1:80', weight: 1 } }] },
      'events[1].setWeight.realServer',
      /not in the real-server list/,
    ],
    [
      { realServers: r, events: [{ setWeight: { realServer: '10.0.0.1:80', weight: 65536 } }] },
      'events[0].setWeight.weight',
      /between 0 and 65535/,
    ],
    [{ realServers: [{ address: '10.0.0.1', weight: -1 }], events: [] }, 'realServers[0].weight', /between 0 and 65535/],
    [
      { realServers: r, events: [{ setThresholds: { realServer: '10.0.0.1:80', upper: -1, lower: 0 } }] },
      'events[0].setThresholds.upper',
      /between 0/,
    ],
    [
      { realServers: r, events: [{ setThresholds: { realServer: '10.0.0.1:80', upper: 1, lower: 2 } }] },
      'events[0].setThresholds.lower',
      /must not exceed upper/,
    ],
    [{ scheduler: 'mh', mhTableSize: 4096, realServers: r, events: [] }, 'mhTableSize', /251, 509/],
    [{ scheduler: 'rr', flags: ['mh-port'], realServers: r, events: [] }, 'flags[0]', /needs scheduler mh/],
    [{ scheduler: 'mh', flags: ['sh-fallback'], realServers: r, events: [] }, 'flags[0]', /needs scheduler sh/],
    [{ protocol: 'sctp', realServers: r, events: [] }, 'protocol', /tcp" or "udp/],
    [{ service: { address: '10.96.0.10', port: 0 }, realServers: r, events: [] }, 'service.port', /between 1 and 65535/],
    [
      { realServers: r, events: [connect('1.1.1.1', 7), connect('1.1.1.1', 7)] },
      'events[1].connect.clientPort',
      /already has a tracked connection \(connect 0\)/,
    ],
    [{ realServers: r, events: [{ jump: 1 }] }, 'events[0]', /unknown event type "jump"/],
    [{ realServers: r, events: [connect('1.1.1.1', 7), { finish: 1 }] }, 'events[1].finish', /1 connect event/],
    [{ realServers: r, events: [connect('2001:db8::1', 7)] }, 'events[0].connect.client', /IPv4 address like the service/],
    [{ realServers: r, events: [], bogus: 1 }, 'bogus', /unknown field/],
    [{ scheduler: 'nope', events: [] }, 'scheduler', /unknown scheduler "nope"/],
    [{ realServers: r, events: [{ preview: { delete: ['10.0.0.7:80'] } }] }, 'events[0].preview.delete[0]', /not a real server/],
    [
      { scheduler: 'mh', flags: ['mh-port'], realServers: r, events: [{ preview: { scheduler: 'sh' } }] },
      'events[0].preview.flags[0]',
      /needs scheduler mh/,
    ],
    [{ realServers: r, events: [{ advance: -1 }] }, 'events[0].advance', /seconds ≥ 0/],
  ];
  for (const [s, path, msg] of cases) {
    const e = failure(s);
    assert.equal(e.path, path, e.message);
    assert.match(e.message, msg);
  }
});

test('flag-1..3 are accepted with any scheduler', () => {
  assert.deepEqual(
    servers({ scheduler: 'rr', flags: ['flag-1', 'flag-2', 'flag-3'], realServers: rs('10.0.0.1'), events: [connect('1.1.1.1', 1)] }),
    ['10.0.0.1'],
  );
});
