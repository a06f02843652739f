/**
 * uvsadm's command line: ipvsadm's options (short, long, clustered as popt allows) become API
 * operations; bad input gets ipvsadm's message and exit status (255 usage, 2 fail()).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { daemonError } from '../../control/ipvsadm/answers';
import type { Command, ParseEnv } from '../../control/ipvsadm/command';
import { usage } from '../../control/ipvsadm/help';
import { parseArgs, splitSocket } from '../../control/ipvsadm/parse';
import { inetAton, stringToNumber } from '../../control/ipvsadm/values';

const env: ParseEnv = {
  lookupHost: (n) => ({ web: '10.200.0.10', rs1: '10.200.11.2' })[n] ?? null,
  lookupService: (n, p) => (n === 'http' && p === 'tcp' ? 80 : n === 'domain' ? 53 : null),
};
const argv = (s: string) => s.split(' ').filter(Boolean);
function ok(s: string): Command {
  const r = parseArgs(argv(s), env);
  assert.ok(r.ok, `${s}: ${r.ok ? '' : r.stderr}`);
  return r.command;
}
function bad(s: string, stderr: string, exit = 2): void {
  const r = parseArgs(argv(s), env);
  assert.ok(!r.ok, `${s} should fail`);
  assert.deepEqual([r.stderr, r.exit], [`${stderr}\n`, exit], s);
}
const ops = (s: string) => {
  const c = ok(s);
  assert.equal(c.kind, 'edit', s);
  return c.kind === 'edit' ? c.ops : [];
};
const TRY = "Try `uvsadm -h' or 'uvsadm --help' for more information.";
const vip = { protocol: 'tcp', address: '10.200.0.10', port: 80 };

test('-A/--add-service: scheduler default wlc, -s, -b flags, -p with optional timeout, -M', () => {
  assert.deepEqual(ops('-A -t 10.200.0.10:80'), [{ op: 'addService', service: { ...vip, scheduler: 'wlc' } }]);
  assert.deepEqual(ops('--add-service --tcp-service 10.200.0.10:80 --scheduler rr'), [
    { op: 'addService', service: { ...vip, scheduler: 'rr' } },
  ]);
  assert.deepEqual(ops('-A --tcp-service=10.200.0.10:80 --scheduler=sh --sched-flags=sh-port,sh-fallback'), [
    { op: 'addService', service: { ...vip, scheduler: 'sh', schedFlags: ['sh-port', 'sh-fallback'] } },
  ]);
  assert.deepEqual(ops('-A -u 10.200.0.10:53 -s mh -b mh-fallback'), [
    { op: 'addService', service: { protocol: 'udp', address: '10.200.0.10', port: 53, scheduler: 'mh', schedFlags: ['mh-fallback'] } },
  ]);
  assert.deepEqual(ops('-A -t 10.200.0.10:80 -p'), [{ op: 'addService', service: { ...vip, scheduler: 'wlc', persistence: 360 } }]);
  assert.deepEqual(ops('-A -t 10.200.0.10:80 -p 600 -s lc'), [
    { op: 'addService', service: { ...vip, scheduler: 'lc', persistence: 600 } },
  ]);
  assert.deepEqual(
    ops('-A -t 10.200.0.10:80 -p -s lc'),
    [{ op: 'addService', service: { ...vip, scheduler: 'lc', persistence: 360 } }],
    '-p does not take an argument starting with -',
  );
  assert.deepEqual(ops('-A -t 10.200.0.10:80 -p60'), [{ op: 'addService', service: { ...vip, scheduler: 'wlc', persistence: 60 } }]);
  assert.deepEqual(ops('-A -t 10.200.0.10:80 --persistent=90 -M 255.255.255.0'), [
    { op: 'addService', service: { ...vip, scheduler: 'wlc', persistence: 90, netmask: '255.255.255.0' } },
  ]);
  assert.deepEqual(
    ops('-A -t 10.200.0.10 -p'),
    [{ op: 'addService', service: { ...vip, port: 0, scheduler: 'wlc', persistence: 360 } }],
    'port 0 is allowed when persistent',
  );
  assert.deepEqual(
    ops('-A --sctp-service 10.200.0.10:80'),
    [{ op: 'addService', service: { ...vip, protocol: 'sctp', scheduler: 'wlc' } }],
    'SCTP services go to uvsd like TCP and UDP ones',
  );
});

test('combined short options as popt takes them: -At ADDR, -Ln, -mw3, -p=60', () => {
  assert.deepEqual(ops('-At 10.200.0.10:80 -s wrr'), [{ op: 'addService', service: { ...vip, scheduler: 'wrr' } }]);
  assert.deepEqual(ops('-at 10.200.0.10:80 -r 10.200.11.2:8080 -mw3'), [
    { op: 'addRealServer', ref: vip, realServer: { address: '10.200.11.2', port: 8080, weight: 3 } },
  ]);
  assert.deepEqual(ops('-A -t 10.200.0.10:80 -p=60'), [{ op: 'addService', service: { ...vip, scheduler: 'wlc', persistence: 60 } }]);
  const l = ok('-Lnc');
  assert.deepEqual([l.kind, l.kind === 'list' && l.what, l.kind === 'list' && l.format.numeric], ['list', 'connections', true]);
});

test('addresses: inet_aton forms, /etc/hosts names, /etc/services ports, IPv6 passed to uvsd', () => {
  assert.equal(inetAton('10.1'), (10 << 24) + 1);
  assert.equal(inetAton('0x0a.0.0.010'), (10 << 24) + 8);
  assert.equal(inetAton('1.2.3.256'), null);
  assert.equal(inetAton('09.1.1.1'), null);
  assert.deepEqual(ops('-A -t web:http'), [{ op: 'addService', service: { ...vip, scheduler: 'wlc' } }]);
  assert.deepEqual(ops('-A -u 10.200.0.10:domain'), [
    { op: 'addService', service: { protocol: 'udp', address: '10.200.0.10', port: 53, scheduler: 'wlc' } },
  ]);
  assert.deepEqual(ops('-A -t 10.200.10:80'), [{ op: 'addService', service: { ...vip, address: '10.200.0.10', scheduler: 'wlc' } }]);
  assert.deepEqual(ops('-A -t [2001:db8::1]:80'), [{ op: 'addService', service: { ...vip, address: '2001:db8::1', scheduler: 'wlc' } }]);
  bad('-A -t 1234', 'illegal virtual server address[:port] specified');
  bad('-A -t 10.200.0.10:', 'illegal virtual server address[:port] specified');
  bad('-A -t nowhere:80', 'illegal virtual server address[:port] specified');
  bad('-A -t 10.200.0.10:65536', 'illegal virtual server address[:port] specified');
  bad('-a -t 10.200.0.10:80 -r 99', 'illegal real server address[:port] specified');
});

test('-E replaces the service settings: no -s means wlc, no -p means no persistence', () => {
  assert.deepEqual(ops('-E -t 10.200.0.10:80'), [{ op: 'editService', service: { ...vip, scheduler: 'wlc' } }]);
  assert.deepEqual(ops('--edit-service -t 10.200.0.10:80 -s rr -b flag-1 -p 30'), [
    { op: 'editService', service: { ...vip, scheduler: 'rr', schedFlags: ['flag-1'], persistence: 30 } },
  ]);
});

test('-D, -C, --set, -Z', () => {
  assert.deepEqual(ops('-D -t 10.200.0.10:80'), [{ op: 'deleteService', ref: vip }]);
  assert.deepEqual(ops('--delete-service --udp-service 10.200.0.10:53'), [
    { op: 'deleteService', ref: { protocol: 'udp', address: '10.200.0.10', port: 53 } },
  ]);
  assert.deepEqual(ops('-C'), [{ op: 'clear' }]);
  assert.deepEqual(ops('--clear'), [{ op: 'clear' }]);
  assert.deepEqual(ops('--set 900 0 300'), [{ op: 'setTimeouts', tcp: 900, tcpFin: 0, udp: 300 }]);
  assert.deepEqual(ok('-Z'), { kind: 'zero' });
  assert.deepEqual(ok('--zero -t 10.200.0.10:80'), { kind: 'zero', service: vip });
});

test('-a/-e/-d: -r without a port is the service port, -w -x -y, forwarding -m (default) -g -i', () => {
  assert.deepEqual(ops('-a -t 10.200.0.10:80 -r 10.200.11.2'), [
    { op: 'addRealServer', ref: vip, realServer: { address: '10.200.11.2', port: 80, weight: 1 } },
  ]);
  assert.deepEqual(ops('-a -r rs1:8080 -t 10.200.0.10:80 -w 0 -x 100 -y 50'), [
    {
      op: 'addRealServer',
      ref: vip,
      realServer: { address: '10.200.11.2', port: 8080, weight: 0, upperThreshold: 100, lowerThreshold: 50 },
    },
  ]);
  assert.deepEqual(
    ops('--add-server -t 10.200.0.10:80 --real-server 10.200.11.2:8080 --masquerading --weight 5 --u-threshold 9 --l-threshold 3'),
    [
      {
        op: 'addRealServer',
        ref: vip,
        realServer: { address: '10.200.11.2', port: 8080, weight: 5, upperThreshold: 9, lowerThreshold: 3 },
      },
    ],
  );
  // -g and -i go to uvsd (which refuses them, saying why); their server port is the service's.
  assert.deepEqual(ops('-a -t 10.200.0.10:80 -r 10.200.11.2:8080 -g'), [
    { op: 'addRealServer', ref: vip, realServer: { address: '10.200.11.2', port: 80, weight: 1, forwarding: 'route' } },
  ]);
  assert.deepEqual(ops('-a -t 10.200.0.10:80 -r 10.200.11.2:8080 --ipip'), [
    { op: 'addRealServer', ref: vip, realServer: { address: '10.200.11.2', port: 80, weight: 1, forwarding: 'tunnel' } },
  ]);
  // -e replaces every setting like the kernel: weight back to 1, thresholds to 0, masq.
  assert.deepEqual(ops('-e -t 10.200.0.10:80 -r 10.200.11.2:8080 -x 10'), [
    {
      op: 'editRealServer',
      ref: vip,
      realServer: { address: '10.200.11.2', port: 8080, weight: 1, forwarding: 'masq', upperThreshold: 10, lowerThreshold: 0 },
    },
  ]);
  assert.deepEqual(ops('--edit-server -t 10.200.0.10:80 -r 10.200.11.2:8080 -w 0'), [
    {
      op: 'editRealServer',
      ref: vip,
      realServer: { address: '10.200.11.2', port: 8080, weight: 0, forwarding: 'masq', upperThreshold: 0, lowerThreshold: 0 },
    },
  ]);
  assert.deepEqual(ops('-d -t 10.200.0.10:80 -r 10.200.11.2'), [{ op: 'deleteRealServer', ref: vip, address: '10.200.11.2', port: 80 }]);
  assert.deepEqual(ops('--delete-server -t 10.200.0.10:80 -r 10.200.11.2:8080'), [
    { op: 'deleteRealServer', ref: vip, address: '10.200.11.2', port: 8080 },
  ]);
});

test('listings: -L/-l, --list, no argument, a service, and every list option', () => {
  const f = {
    numeric: false,
    stats: false,
    rate: false,
    thresholds: false,
    persistentConn: false,
    tunInfo: false,
    exact: false,
    nosort: false,
  };
  assert.deepEqual(parseArgs([]), { ok: true, command: { kind: 'list', what: 'services', format: f } });
  assert.deepEqual(ok('-L'), { kind: 'list', what: 'services', format: f });
  assert.deepEqual(ok('-l'), { kind: 'list', what: 'services', format: f });
  assert.deepEqual(ok('--list -t 10.200.0.10:80'), { kind: 'list', what: 'services', format: f, service: vip });
  assert.deepEqual(ok('-Ln --stats --exact'), {
    kind: 'list',
    what: 'services',
    format: { ...f, numeric: true, stats: true, exact: true },
  });
  assert.deepEqual(ok('-L -X --rate --nosort --sort'), {
    kind: 'list',
    what: 'services',
    format: { ...f, rate: true, exact: true, nosort: true },
  });
  assert.deepEqual(ok('-L --thresholds --persistent-conn --tun-info'), {
    kind: 'list',
    what: 'services',
    format: { ...f, thresholds: true, persistentConn: true, tunInfo: true },
  });
  assert.deepEqual(ok('-L --connection --persistent-conn'), { kind: 'list', what: 'connections', format: { ...f, persistentConn: true } });
  assert.deepEqual(ok('-L --timeout'), { kind: 'list', what: 'timeout', format: f });
  assert.deepEqual(ok('-S'), { kind: 'save', numeric: false });
  assert.deepEqual(ok('-Sn'), { kind: 'save', numeric: true });
  assert.deepEqual(ok('--save --numeric'), { kind: 'save', numeric: true });
  assert.deepEqual(ok('-R'), { kind: 'restore' });
  assert.deepEqual(ok('--restore'), { kind: 'restore' });
});

test('uvs additions keep working: --drain, --health, --timeout alone, --reload, --kill-worker, --socket', () => {
  const f = {
    numeric: false,
    stats: false,
    rate: false,
    thresholds: false,
    persistentConn: false,
    tunInfo: false,
    exact: false,
    nosort: false,
  };
  assert.deepEqual(ok('--drain'), { kind: 'list', what: 'drain', format: f });
  assert.deepEqual(ok('-L --health'), { kind: 'list', what: 'health', format: f });
  assert.deepEqual(ok('--timeout'), { kind: 'list', what: 'timeout', format: f });
  assert.deepEqual(ok('--reload'), { kind: 'reload' });
  assert.deepEqual(ok('--kill-worker 1'), { kind: 'killWorker', worker: '1' });
  assert.deepEqual(splitSocket(['--socket', '/tmp/s', '-Ln']), { socket: '/tmp/s', rest: ['-Ln'] });
  assert.deepEqual(splitSocket(['-Ln', '--socket=/tmp/s']), { socket: '/tmp/s', rest: ['-Ln'] });
  assert.deepEqual(splitSocket(['-L', '--socket']), { error: '--socket: missing argument\n' });
  bad('-L --drain --stats', 'options conflicts in the list command');
  bad('-L --health -c', "The option 'health' conflicts with the 'connection' option in the 'list' command");
});

test('--workers lists the dataplane workers, alone or after -L, and conflicts like the other listings', () => {
  const f = {
    numeric: false,
    stats: false,
    rate: false,
    thresholds: false,
    persistentConn: false,
    tunInfo: false,
    exact: false,
    nosort: false,
  };
  assert.deepEqual(ok('--workers'), { kind: 'list', what: 'workers', format: f });
  assert.deepEqual(ok('-L --workers'), { kind: 'list', what: 'workers', format: f });
  bad('-L --workers --rate', 'options conflicts in the list command');
  bad('-L --workers --health', "The option 'workers' conflicts with the 'health' option in the 'list' command");
});

test('-h prints the usage (exit 0) and says what uvs does differently', () => {
  const h = ok('-h');
  assert.equal(h.kind, 'help');
  assert.deepEqual(ok('--help'), h);
  const text = usage();
  assert.match(text, /^ {2}uvsadm -A\|E virtual-service \[-s scheduler\] \[-p \[timeout\]\]/m);
  assert.match(text, /--masquerading -m .*the default in uvs; ipvsadm's is -g/);
  assert.match(text, /default forwarding method is masquerading \(-m\)/);
  assert.match(text, /--rate .*estimator/);
  // -p works (uvsd keeps persistence templates); what is refused is said, what works is not.
  assert.match(text, /--persistent {3}-p \[timeout\] {9}persistent service \(default timeout 360\)\n/);
  assert.doesNotMatch(text, /refused by uvsd until persistence/);
  assert.doesNotMatch(text, /always numeric|Names are never resolved/);
  assert.match(text, /--tun-type .*\n.*uvs: ipip only/);
  assert.equal(ok('-v').kind, 'version');
});

test('usage errors: tryhelp and exit 255 (-1), popt errors name the argument', () => {
  bad('-n -L', TRY, 255); // the first option must be the command
  bad('-t 10.200.0.10:80 -A', TRY, 255);
  bad('--bogus', TRY, 255);
  bad('foo', TRY, 255);
  bad('-6', TRY, 255);
  bad('-L --bogus', '--bogus: unknown option', 255);
  bad('-Lq', '-Lq: unknown option', 255);
  bad('-A -t', '-t: missing argument', 255);
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -mw', '-mw: missing argument', 255);
  bad('-L --stats=1', '--stats=1: option does not take an argument', 255);
  bad('--set -1 0 0', '-1: unknown option', 255);
});

test('ipvsadm fail() messages, exit 2', () => {
  bad('-A -t 10.200.0.10', 'Zero port specified for non-persistent service');
  bad('-E -t 10.200.0.10:0', 'Zero port specified for non-persistent service');
  bad('-A -t 10.200.0.10:80 -D', 'multiple commands specified');
  bad('-L -A', 'multiple commands specified');
  bad('-A -t 10.200.0.10:80 -u 10.200.0.10:80', "multiple 'service-address' options specified");
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -m -g', "multiple 'forwarding-method' options specified");
  bad('-a -t 10.200.0.10:80 -w 2', "You need to supply the 'real-server' option for the 'add-server' command");
  bad('-e -t 10.200.0.10:80', "You need to supply the 'real-server' option for the 'edit-server' command");
  bad('-d -r 10.200.11.2', "You need to supply the 'service-address' option for the 'delete-server' command");
  bad('-A -s rr', "You need to supply the 'service-address' option for the 'add-service' command");
  bad('-d -t 10.200.0.10:80 -r 10.200.11.2 -w 1', "Illegal 'weight' option with the 'delete-server' command");
  bad('-D -t 10.200.0.10:80 -s rr', "Illegal 'scheduler' option with the 'delete-service' command");
  bad('-C -t 10.200.0.10:80', "Illegal 'service-address' option with the 'flush' command");
  bad('-A -t 10.200.0.10:80 -r 10.200.11.2', "Illegal 'real-server' option with the 'add-service' command");
  bad('-S -c', "Illegal 'connection' option with the 'save' command");
  bad('-S --nosort', "Illegal 'nosort' option with the 'save' command");
  bad('-R -n', "Illegal 'numeric' option with the 'restore' command");
  bad('-Z -t 10.200.0.10:80 -n', "Illegal 'numeric' option with the 'zero' command");
  bad('--set 1 2 3 -n', "Illegal 'numeric' option with the 'set' command");
  bad('-L -c -t 10.200.0.10:80', "The option 'service-address' conflicts with the 'connection' option in the 'list' command");
  bad('-L -c --timeout', "The option 'timeout' conflicts with the 'connection' option in the 'list' command");
  bad('-L -c --stats', 'options conflicts in the list command');
  bad('-L --timeout --persistent-conn', 'options conflicts in the list command');
  bad('-A -t 10.200.0.10:80 -b sh-port', "incompatible scheduler flag `sh-port'");
  bad('-A -t 10.200.0.10:80 -s sh -b mh-port', "incompatible scheduler flag `mh-port'");
  bad('-A -t 10.200.0.10:80 -b flag-9', "invalid scheduler flag `flag-9'");
  bad('-A -t 10.200.0.10:80 -p 0', "invalid timeout value `0' specified");
  bad('-A -t 10.200.0.10:80 -p 2678401', "invalid timeout value `2678401' specified");
  bad('-A -t 10.200.0.10:80 -p rr', "invalid timeout value `rr' specified");
  bad('-A -t 10.200.0.10:80 -M 255.255.255.x', 'illegal virtual server persistent mask specified');
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -w 65536', 'illegal weight specified');
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -w -1', 'illegal weight specified');
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -x 2147483648', 'illegal u_threshold specified');
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -y x', 'illegal l_threshold specified');
  bad('--set 1 2', '--set option requires 3 timeout values');
  bad('--set 1 2 2678401', "invalid timeout value `2678401' specified");
  bad('--set 1 2 3 4', 'unexpected argument 4');
  bad('-L extra', 'unexpected argument extra');
  bad('-A -t 10.200.0.10:80 -o', 'One-Packet Scheduling is only for UDP virtual services');
  bad('-A -t 10.200.0.10:80 -6', '-6 used before -f\n');
  bad('-a -t 10.200.0.10:80 -r [2001:db8::2]:80', 'Different address family is allowed only for tunneling servers');
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 --tun-type gre', 'Tunnel options conflict with forward method');
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gue', "You need to supply the 'tun-port' option for the 'gue' tunnel type");
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type ipip --tun-port 6080', "Illegal 'tun-port' option with the 'ipip' tunnel type");
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type bad', 'illegal tunnel type specified');
  bad('-A -f 0', "invalid fwmark value `0' specified");
  bad('--start-daemon primary', 'illegal start-daemon parameter specified');
  bad('--stop-daemon primary', 'illegal start_daemon specified');
  bad('--start-daemon master --syncid 256', 'illegal syncid specified');
  bad('--start-daemon master --mcast-group 10.0.0.1', "invalid IPv4 mcast-group `10.0.0.1'");
});

test('what uvs cannot do fails clearly: fwmark, --pe, -o, the sync daemon', () => {
  bad(
    '-A -f 1',
    'uvsadm: fwmark services (-f) are not supported: packets reach uvs through a TUN device, which does not carry netfilter marks',
  );
  bad(
    '-a -f 1 -r 10.200.11.2:80',
    'uvsadm: fwmark services (-f) are not supported: packets reach uvs through a TUN device, which does not carry netfilter marks',
  );
  bad('-A -t 10.200.0.10:80 -p --pe sip', 'uvsadm: persistence engines (--pe) are not supported');
  bad('-A -u 10.200.0.10:53 -o', 'uvsadm: one-packet scheduling (-o/--ops) is not supported yet');
  const sync = 'uvsadm: uvs has no IPVS connection-sync daemon: uvs instances share connection state through Redis instead';
  bad('--start-daemon master --mcast-interface eth1 --syncid 3', sync);
  bad('--stop-daemon backup', sync);
});

test('-L --daemon is a listing (of no sync daemon: uvsadm prints nothing and exits 0)', () => {
  const f = {
    numeric: false,
    stats: false,
    rate: false,
    thresholds: false,
    persistentConn: false,
    tunInfo: false,
    exact: false,
    nosort: false,
  };
  assert.deepEqual(ok('-L --daemon'), { kind: 'list', what: 'daemon', format: f });
  assert.deepEqual(ok('-Ln --daemon'), { kind: 'list', what: 'daemon', format: { ...f, numeric: true } });
  bad('-L --daemon --stats', 'options conflicts in the list command');
  bad('-L --daemon --timeout', "The option 'daemon' conflicts with the 'timeout' option in the 'list' command");
});

test("--tun-type gue and gre are refused with exit 2 after ipvsadm's own checks, never silently made IPIP", () => {
  const refused = (t: string) =>
    `uvsadm: ${t} tunnels (--tun-type ${t}) are not supported: uvs encapsulates in IPIP (IPv6: ip6ip6) only, --tun-type ipip`;
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gue --tun-port 6080', refused('gue'));
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gue --tun-port 6080 --tun-csum', refused('gue'));
  bad('-e -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gre --tun-nocsum', refused('gre'));
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gre', refused('gre'));
  // ipvsadm's checks still come first: a missing --tun-port, an option the type does not take.
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gue', "You need to supply the 'tun-port' option for the 'gue' tunnel type");
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type gre --tun-port 1', "Illegal 'tun-port' option with the 'gre' tunnel type");
  // ipip, the type uvs has, stays accepted.
  assert.deepEqual(ops('-a -t 10.200.0.10:80 -r 10.200.11.2 -i --tun-type ipip'), [
    { op: 'addRealServer', ref: vip, realServer: { address: '10.200.11.2', port: 80, weight: 1, forwarding: 'tunnel' } },
  ]);
});

test('an IPv6 service or server spelled any way becomes the one spelling uvsd keeps (every lookup finds it)', () => {
  const v6 = { protocol: 'tcp', address: 'fd00:200::10', port: 80 };
  for (const spelling of ['[FD00:200::10]:80', '[fd00:200:0:0:0:0:0:10]:80', '[fd00:0200:0000::0010]:80']) {
    assert.deepEqual(ok(`-L -t ${spelling}`), {
      kind: 'list',
      what: 'services',
      service: v6,
      format: {
        numeric: false,
        stats: false,
        rate: false,
        thresholds: false,
        persistentConn: false,
        tunInfo: false,
        exact: false,
        nosort: false,
      },
    });
    assert.deepEqual(ok(`-Z -t ${spelling}`), { kind: 'zero', service: v6 });
    assert.deepEqual(ops(`-D -t ${spelling}`), [{ op: 'deleteService', ref: v6 }]);
    assert.deepEqual(ops(`-a -t ${spelling} -r [FD00:200:11:0::2]:8080`), [
      { op: 'addRealServer', ref: v6, realServer: { address: 'fd00:200:11::2', port: 8080, weight: 1 } },
    ]);
  }
});

test('the daemon\'s refusal loses the batch\'s ops[i] prefix, with no stray ": :"', () => {
  assert.equal(
    daemonError(
      { code: 'UVS_ERR_API_NOT_FOUND', message: 'ops[0]: no real server 10.200.11.99:8080 in tcp 10.200.0.10:80', path: 'ops[0]' },
      404,
    ),
    'uvsadm: UVS_ERR_API_NOT_FOUND: no real server 10.200.11.99:8080 in tcp 10.200.0.10:80\n',
  );
  assert.equal(
    daemonError({ code: 'UVS_ERR_CONFIG_INVALID', message: 'ops[12].realServer.weight: must be 0..65535' }, 400),
    'uvsadm: UVS_ERR_CONFIG_INVALID: realServer.weight: must be 0..65535\n',
  );
  assert.equal(
    daemonError({ code: 'UVS_ERR_API_NOT_FOUND', message: 'service: no service tcp 10.0.0.1:80' }, 404),
    'uvsadm: UVS_ERR_API_NOT_FOUND: service: no service tcp 10.0.0.1:80\n',
  );
  assert.equal(daemonError({}, 502), 'uvsadm: 502: request failed\n');
});

test('string_to_number accepts what strtol accepts, whole and in range', () => {
  assert.equal(stringToNumber('+5', 0, 10), 5);
  assert.equal(stringToNumber(' 7', 0, 10), 7);
  assert.equal(stringToNumber('-0', 0, 10), 0);
  assert.equal(stringToNumber('5 ', 0, 10), -1);
  assert.equal(stringToNumber('0x10', 0, 100), -1);
  assert.equal(stringToNumber('', 0, 10), -1);
  assert.equal(stringToNumber('11', 0, 10), -1);
});

test('--proxy-protocol (uvs): on -a and -e, v1|v2|none; -e without it leaves the setting alone; anything else refused', () => {
  const rs = { address: '10.200.11.2', port: 8080 };
  assert.deepEqual(ops('-a -t 10.200.0.10:80 -r 10.200.11.2:8080 --fullnat --proxy-protocol v2'), [
    { op: 'addRealServer', ref: vip, realServer: { ...rs, weight: 1, forwarding: 'fullnat', proxyProtocol: 'v2' } },
  ]);
  assert.deepEqual(ops('-e -t 10.200.0.10:80 -r 10.200.11.2:8080 --fullnat --proxy-protocol=none'), [
    {
      op: 'editRealServer',
      ref: vip,
      realServer: { ...rs, weight: 1, forwarding: 'fullnat', upperThreshold: 0, lowerThreshold: 0, proxyProtocol: 'none' },
    },
  ]);
  assert.deepEqual(ops('-e -t 10.200.0.10:80 -r 10.200.11.2:8080 --fullnat -w 2'), [
    { op: 'editRealServer', ref: vip, realServer: { ...rs, weight: 2, forwarding: 'fullnat', upperThreshold: 0, lowerThreshold: 0 } },
  ]);
  bad('-a -t 10.200.0.10:80 -r 10.200.11.2:8080 --fullnat --proxy-protocol v3', 'illegal proxy protocol specified (v1, v2 or none)');
  assert.ok(!parseArgs(argv('-A -t 10.200.0.10:80 --proxy-protocol v2'), env).ok, 'a real-server option, not a service one');
  assert.match(usage('uvsadm'), /--proxy-protocol v1\|v2\|none/);
});
