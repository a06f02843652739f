/**
 * uvsadm against a running uvsd in the namespace lab, driven as a child process the way an
 * ipvsadm user (or script) drives ipvsadm: the table is built with -A/-a, traffic from the client
 * namespace follows every change (-e weight 0, -d, -E), --set and -Z take effect, -S | -C | -R
 * restores the same table, and refusals carry ipvsadm's messages and exit statuses.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sleep } from '../../lab/lab';
import { servicesTable } from '../../control/ipvsadm/names';
import { needTool } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const UVSADM = join(ROOT, 'dist', 'control', 'uvsadm.js');
const isRoot = process.getuid?.() === 0;

describe('uvsadm drives uvsd like ipvsadm drives IPVS', {
  skip: needTool(isRoot, 'root (network namespaces, TUN)'),
  timeout: 600_000,
}, () => {
  const lab = new Lab({ prefix: `uva${process.pid % 100000}` });
  const [rs1, rs2, rs3] = lab.rsAddrs as [string, string, string];
  const web = `${LAB_VIP}:80`;

  /** Runs uvsadm (stdin optional) and returns what it printed and its exit status. */
  const uvsadm = (args: string, input?: string) => {
    const r = spawnSync(process.execPath, [UVSADM, '--socket', lab.socket, ...args.split(' ').filter(Boolean)], {
      encoding: 'utf8',
      input,
      timeout: 30000,
    });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  /**
   * uvsadm in a network namespace of its own with no interface up (`unshare -n`; it disappears
   * with the process): its reverse-DNS queries fail at once, so names come only from the files —
   * deterministic whatever resolver this machine has. The API socket is a file, reachable.
   */
  const uvsadmNoNet = (args: string) => {
    const t0 = Date.now();
    const r = spawnSync('unshare', ['-n', process.execPath, UVSADM, '--socket', lab.socket, ...args.split(' ').filter(Boolean)], {
      encoding: 'utf8',
      timeout: 30000,
    });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr, ms: Date.now() - t0 };
  };
  /** uvsadm that must succeed: its stdout. */
  const ok = (args: string, input?: string) => {
    const r = uvsadm(args, input);
    assert.equal(r.status, 0, `uvsadm ${args}: exit ${r.status}: ${r.stderr}`);
    return r.stdout;
  };
  const curlMany = (n: number, url = `http://${LAB_VIP}/`): Record<string, number> => {
    const text = lab.exec(lab.clientNs, 'sh', ['-c', `for i in $(seq ${n}); do curl -s -m 5 ${url} || echo FAIL; done`], 120000);
    const counts: Record<string, number> = {};
    for (const l of text.split('\n').filter(Boolean)) counts[l] = (counts[l] ?? 0) + 1;
    return counts;
  };
  /** The "  -> addr:port ..." line of a real server in a listing. */
  const destLine = (listing: string, rs: string, port = 8080) => listing.split('\n').find((l) => l.startsWith(`  -> ${rs}:${port} `));

  before(async () => {
    lab.up();
    await lab.waitServers();
    await lab.startUvsd(lab.writeConfig(lab.config([], { dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR] } })));
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('-A and -a build a service that carries traffic; -Ln shows it in ipvsadm layout', () => {
    assert.equal(
      ok('-Ln'),
      'IP Virtual Server version 1.2.1 (size=65536)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n',
    );
    ok(`-A -t ${web} -s rr`);
    for (const rs of [rs1, rs2, rs3]) ok(`-a -t ${web} -r ${rs}:8080 -m`);
    assert.deepEqual(curlMany(6), { rs1: 2, rs2: 2, rs3: 2 });
    const list = ok('-Ln');
    const lines = list.split('\n');
    assert.equal(lines[3], `TCP  ${web} rr`);
    assert.deepEqual(
      lines.slice(4, 7).map((l) => l.slice(0, 48)),
      [rs1, rs2, rs3].map((rs) => `  -> ${`${rs}:8080`.padEnd(28)} Masq    ${'1'.padEnd(6)}`),
    );
    for (const rs of [rs1, rs2, rs3])
      assert.match(destLine(list, rs)!, /^ {2}-> \S+ +Masq {4}1 {6}\d+ +2 +$/, 'two finished connections each (TIME_WAIT → InActConn)');
    // -L <service>: no version line; -Lnc: the connection entries.
    assert.equal(ok(`-L -n -t ${web}`).split('\n')[0], 'Prot LocalAddress:Port Scheduler Flags');
    const conns = ok('-Lnc').split('\n');
    assert.deepEqual(conns.slice(0, 2), [
      'IPVS connection entries',
      'pro expire state       source             virtual            destination',
    ]);
    assert.ok(conns.filter((l) => l.startsWith('TCP ') && l.includes(` ${web} `)).length >= 6);
  });

  test('-e -w 0 quiesces a server, -d removes it, -e brings the weight back', () => {
    ok(`-e -t ${web} -r ${rs2}:8080 -w 0`);
    assert.match(destLine(ok('-Ln'), rs2)!, /Masq {4}0 {6}/);
    const quiet = curlMany(6);
    assert.equal(quiet.rs2, undefined, `no new connection to a weight-0 server: ${JSON.stringify(quiet)}`);
    ok(`-e -t ${web} -r ${rs2}:8080 -w 2`);
    assert.match(destLine(ok('-Ln'), rs2)!, /Masq {4}2 {6}/);
    ok(`-d -t ${web} -r ${rs3}:8080`);
    const after = curlMany(6);
    assert.equal(after.rs3, undefined, `the deleted server gets nothing: ${JSON.stringify(after)}`);
    assert.equal(after.FAIL, undefined);
    // A deleted TCP server with connections left drains (listed at weight 0 until they expire) but is
    // no longer configuration: -S does not print it.
    const line = destLine(ok('-Ln'), rs3);
    assert.ok(line === undefined || /Masq {4}0 {6}/.test(line), String(line));
    assert.doesNotMatch(ok('-Sn'), new RegExp(rs3.replace(/\./g, '\\.')));
    ok(`-a -t ${web} -r ${rs3}:8080 -m -w 1`);
  });

  test('-E replaces the scheduler (and flags); wrr then follows the weights', () => {
    ok(`-E -t ${web} -s wrr`);
    assert.equal(ok(`-Ln -t ${web}`).split('\n')[2], `TCP  ${web} wrr`);
    ok(`-e -t ${web} -r ${rs1}:8080 -w 3`);
    ok(`-e -t ${web} -r ${rs2}:8080 -w 2`);
    ok(`-e -t ${web} -r ${rs3}:8080 -w 1`);
    assert.deepEqual(curlMany(12), { rs1: 6, rs2: 4, rs3: 2 });
    ok(`-E -t ${web} -s sh -b sh-port`);
    assert.equal(ok(`-Ln -t ${web}`).split('\n')[2], `TCP  ${web} sh (sh-port)`);
    ok(`-E -t ${web} -s rr`);
    assert.equal(ok(`-Ln -t ${web}`).split('\n')[2], `TCP  ${web} rr`, 'an edit without -b clears the flags');
  });

  test('--set changes the timeouts (0 keeps a value); -L --timeout shows them', () => {
    assert.equal(ok('-L --timeout'), 'Timeout (tcp tcpfin udp): 900 120 300\n');
    ok('--set 600 0 200');
    assert.equal(ok('-L --timeout'), 'Timeout (tcp tcpfin udp): 600 120 200\n');
    ok('--set 900 0 300');
    assert.equal(ok('--timeout'), 'Timeout (tcp tcpfin udp): 900 120 300\n');
  });

  test('--stats counts the traffic, --rate estimates it, -Z zeroes the counters', async () => {
    ok('-Z');
    // Traffic across three estimator periods (2 s each).
    lab.exec(lab.clientNs, 'sh', ['-c', `for i in $(seq 30); do curl -s -m 5 http://${LAB_VIP}/ >/dev/null; sleep 0.2; done`], 120000);
    const stats = ok('-Ln --stats --exact').split('\n');
    assert.equal(stats[1], 'Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes');
    const svc = stats.find((l) => l.startsWith(`TCP  ${web}`))!;
    const nums = svc.slice(33).trim().split(/\s+/).map(Number);
    assert.equal(nums[0], 30, `30 connections since -Z: ${svc}`);
    assert.ok(nums[1]! >= 30 * 5 && nums[2]! >= 30 * 4 && nums[3]! > 0 && nums[4]! > 0, svc);
    const rate = ok('-Ln --rate').split('\n');
    assert.equal(rate[1], 'Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS');
    const rateNums = rate
      .find((l) => l.startsWith(`TCP  ${web}`))!
      .slice(33)
      .trim()
      .split(/\s+/)
      .map(Number);
    assert.ok(rateNums[1]! > 0 && rateNums[3]! > 0, `packets and bytes per second estimated: ${rateNums}`);
    ok('-Z');
    const zeroed = ok('-Ln --stats --exact')
      .split('\n')
      .find((l) => l.startsWith(`TCP  ${web}`))!;
    assert.deepEqual(zeroed.slice(33).trim().split(/\s+/).map(Number), [0, 0, 0, 0, 0]);
    ok(`-Z -t ${web}`);
    await sleep(10);
  });

  test('-S | -C | -R restores the same table, atomically', () => {
    ok(`-A -u ${LAB_VIP}:53 -s wlc`);
    ok(`-a -u ${LAB_VIP}:53 -r ${rs1}:5353 -w 3 -x 100 -y 50`);
    ok(`-A -t ${LAB_VIP}:81 -s mh -b mh-fallback,mh-port`);
    ok(`-a -t ${LAB_VIP}:81 -r ${rs2}:8080 -w 1`);
    const saved = ok('-Sn');
    assert.deepEqual(
      saved.split('\n').filter((l) => l.startsWith('-A')),
      [`-A -t ${web} -s rr`, `-A -t ${LAB_VIP}:81 -s mh -b mh-fallback,mh-port`, `-A -u ${LAB_VIP}:53 -s wlc`],
    );
    assert.match(saved, new RegExp(`^-a -u ${LAB_VIP}:53 -r ${rs1}:5353 -m -w 3 -x 100 -y 50$`.replace(/\./g, '\\.'), 'm'));
    const thresholds = ok('-Ln --thresholds');
    assert.match(destLine(thresholds, rs1, 5353)!, /^ {2}-> 10\.200\.11\.2:5353 +100 +50 +0 +0 +$/);
    // Sorted: the kernel order (--nosort) changes with a restore, for ipvsadm too.
    const before = ok('-Ln').replace(/ +\d+ +\d+ +$/gm, ''); // without the connection counts

    ok('-C');
    assert.equal(ok('-Sn'), '');
    ok('-R', saved);
    assert.equal(ok('-Sn'), saved, 'the same rules after the round trip');
    assert.equal(ok('-Ln').replace(/ +\d+ +\d+ +$/gm, ''), before, 'the same services and servers, weights and flags');
    assert.match(destLine(ok('-Ln --thresholds'), rs1, 5353)!, / +100 +50 +/);
    assert.deepEqual(Object.keys(curlMany(3)).sort(), ['rs1', 'rs2', 'rs3']);
    assert.equal(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}:81/`]).trim(), 'rs2');

    // A restore that fails on its third line changes nothing, not even its first two.
    const bad = uvsadm('-R', `-A -t ${LAB_VIP}:82 -s rr\n-a -t ${LAB_VIP}:82 -r ${rs1}:8080\n-a -t ${LAB_VIP}:83 -r ${rs1}:8080\n`);
    assert.equal(bad.status, 255);
    assert.equal(bad.stderr.split('\n')[0], 'Service not defined');
    assert.match(bad.stderr, /UVS_ERR_API_NOT_FOUND/);
    assert.match(bad.stderr, /restore refused at line 3 \(-a -t 10\.200\.0\.10:83 -r 10\.200\.11\.2:8080\); nothing was changed/);
    assert.equal(ok('-Sn'), saved);
    // A bad line is refused before anything is sent.
    const syntax = uvsadm('-R', `-A -t ${LAB_VIP}:82 -s rr\n-A -t ${LAB_VIP}\n`);
    assert.deepEqual([syntax.status, syntax.stderr.split('\n')[0]], [2, 'Zero port specified for non-persistent service']);
    assert.equal(ok('-Sn'), saved);
  });

  test("refusals: ipvsadm's message, then uvsd's code and reason; usage errors exit 255, bad values 2", () => {
    const dup = uvsadm(`-A -t ${web} -s rr`);
    assert.equal(dup.status, 255);
    assert.equal(dup.stderr.split('\n')[0], 'Service already exists');
    assert.match(dup.stderr.split('\n')[1]!, /^uvsadm: UVS_ERR_API_CONFLICT: /);
    const dupRs = uvsadm(`-a -t ${web} -r ${rs1}:8080`);
    assert.deepEqual([dupRs.status, dupRs.stderr.split('\n')[0]], [255, 'Destination already exists']);
    const noSvc = uvsadm(`-D -t ${LAB_VIP}:9999`);
    assert.deepEqual([noSvc.status, noSvc.stderr.split('\n')[0]], [255, 'No such service']);
    const noRs = uvsadm(`-d -t ${web} -r 10.200.11.99:8080`);
    assert.deepEqual([noRs.status, noRs.stderr.split('\n')[0]], [255, 'No such destination']);
    const noZero = uvsadm(`-Z -t ${LAB_VIP}:9999`);
    assert.deepEqual([noZero.status, noZero.stderr.split('\n')[0]], [255, 'No such service']);
    const noList = uvsadm(`-L -t ${LAB_VIP}:9999`);
    assert.deepEqual([noList.status, noList.stderr], [1, 'No such service\n']);
    const sched = uvsadm(`-A -t ${LAB_VIP}:85 -s nosuch`);
    assert.deepEqual([sched.status, sched.stderr.split('\n')[0]], [255, 'Scheduler or persistence engine not found']);
    // What uvs cannot do: uvsd says why.
    const dr = uvsadm(`-a -t ${web} -r 10.200.13.9:8080 -g`);
    assert.equal(dr.status, 255);
    assert.match(dr.stderr, /^uvsadm: UVS_ERR_CONFIG_UNSUPPORTED: realServer\.forwarding: direct routing needs layer-2 frames/m);
    const tun = uvsadm(`-a -t ${web} -r 10.200.13.9:8080 -i`);
    assert.equal(tun.status, 255);
    // This lab's uvsd has no dataplane.tunnelSource, so -i is refused, naming what is missing.
    assert.match(tun.stderr, /UVS_ERR_CONFIG_INVALID: .*tunnel needs dataplane\.tunnelSource/);
    // SCTP services: added, listed and saved as ipvsadm prints them, deleted.
    ok(`-A --sctp-service ${LAB_VIP}:80 -s rr`);
    ok(`-a --sctp-service ${LAB_VIP}:80 -r 10.200.11.2:3868`);
    const sctpList = ok(`-Ln --sctp-service ${LAB_VIP}:80`).split('\n');
    assert.equal(sctpList[2], `SCTP ${LAB_VIP}:80 rr`);
    assert.match(sctpList[3]!, /^  -> 10\.200\.11\.2:3868 +Masq +1 +0 +0 +$/);
    assert.match(ok('-Sn'), new RegExp(`^-a --sctp-service ${LAB_VIP}:80 -r 10\\.200\\.11\\.2:3868 -m -w 1$`, 'm'));
    ok(`-D --sctp-service ${LAB_VIP}:80`);
    const outside = uvsadm('-A -t 10.9.9.9:80');
    assert.equal(outside.status, 255);
    assert.match(outside.stderr, /not inside dataplane\.vipCidrs/);
    // Persistence (-p, -M): accepted, listed and saved as ipvsadm prints them; -E without -p drops it.
    const p = uvsadm(`-A -t ${LAB_VIP}:86 -s rr -p 60 -M 255.255.255.0`);
    assert.deepEqual([p.status, p.stderr], [0, ''], '-p is accepted');
    assert.match(ok(`-Ln -t ${LAB_VIP}:86`), new RegExp(`TCP  ${LAB_VIP}:86 rr persistent 60 mask 255\\.255\\.255\\.0`));
    assert.match(ok('-Sn'), new RegExp(`-A -t ${LAB_VIP}:86 -s rr -p 60 -M 255\\.255\\.255\\.0`));
    ok(`-E -t ${LAB_VIP}:86 -s rr`);
    assert.equal(ok(`-Ln -t ${LAB_VIP}:86`).split('\n')[2], `TCP  ${LAB_VIP}:86 rr`, '-E without -p removes persistence');
    ok(`-D -t ${LAB_VIP}:86`);
    // Usage and value errors never reach uvsd.
    assert.deepEqual(uvsadm('-n -L'), { status: 255, stdout: '', stderr: "Try `uvsadm -h' or 'uvsadm --help' for more information.\n" });
    assert.deepEqual(uvsadm(`-A -t ${LAB_VIP}`), { status: 2, stdout: '', stderr: 'Zero port specified for non-persistent service\n' });
    assert.equal(uvsadm(`-A -f 7`).status, 2);
    assert.equal(uvsadm('--start-daemon master').status, 2);
    // The table is untouched by all of that.
    assert.doesNotMatch(ok('-Sn'), /:8[56] |10\.200\.13\.9|10\.9\.9\.9/);
  });

  test('without -n: service names from /etc/services, host names by reverse DNS, numbers when none answers', () => {
    const svcName = (port: number, proto: string) => servicesTable().get(`${port}/${proto}`) ?? String(port);
    const list = uvsadmNoNet(`-L -t ${web}`);
    assert.equal(list.status, 0, list.stderr);
    // 10.200.x.x has no PTR record reachable from here: the addresses stay numeric, the ports get names.
    assert.equal(list.stdout.split('\n')[2], `TCP  ${LAB_VIP}:${svcName(80, 'tcp')} rr`);
    assert.ok(destLine(list.stdout.replace(new RegExp(`:${svcName(8080, 'tcp')} `, 'g'), ':8080 '), rs1), list.stdout);
    assert.ok(list.ms < 10_000, `no resolver costs the listing its budget, not a timeout per address: ${list.ms} ms`);
    // -S without -n writes the names too, and -R reads them back.
    const named = uvsadmNoNet('-S').stdout;
    assert.match(named, new RegExp(`^-A -t ${LAB_VIP.replace(/\./g, '\\.')}:${svcName(80, 'tcp')} -s `, 'm'));
    const numeric = ok('-Sn');
    ok('-C');
    ok('-R', named);
    assert.equal(ok('-Sn'), numeric, '-S | -R through names restores the same table');
    // -n stays numeric, and -Lnc too.
    assert.equal(ok(`-Ln -t ${web}`).split('\n')[2], `TCP  ${web} rr`);
    assert.match(uvsadmNoNet('-Lc').stdout, /^IPVS connection entries\n/);
  });

  test('an IPv6 service is found however its address is spelled, and its /128 persistence prints no mask', () => {
    const v6 = `[${LAB_VIP6}]:80`;
    ok(`-A -t ${v6} -s rr -p 120`);
    ok(`-a -t ${v6} -r [fd00:200:11::2]:8080 -m`);
    const upper = '[FD00:200:0:0:0::10]:80';
    assert.equal(ok(`-Ln -t ${upper}`).split('\n')[2], `TCP  ${v6} rr persistent 120`, 'no " mask 128"');
    ok(`-Z -t ${upper}`);
    assert.match(ok('-Sn'), new RegExp(`^-A -t \\[${LAB_VIP6}\\]:80 -s rr -p 120$`, 'm'), 'no " -M 128"');
    ok(`-e -t ${upper} -r [FD00:200:11:0::2]:8080 -w 3`);
    assert.match(ok(`-Ln -t ${v6}`), /-> \[fd00:200:11::2\]:8080 +Masq +3 /);
    ok(`-D -t ${upper}`);
    assert.deepEqual(uvsadm(`-L -t ${v6}`).stderr, 'No such service\n');
  });

  test('-L --daemon prints nothing and exits 0; --tun-type gue is refused before uvsd is asked', () => {
    assert.deepEqual(uvsadm('-L --daemon'), { status: 0, stdout: '', stderr: '' });
    const gue = uvsadm(`-a -t ${web} -r 10.200.13.9 -i --tun-type gue --tun-port 6080`);
    assert.equal(gue.status, 2);
    assert.match(gue.stderr, /^uvsadm: gue tunnels \(--tun-type gue\) are not supported/);
    assert.doesNotMatch(ok('-Sn'), /10\.200\.13\.9/);
    // A refusal whose path is the operation itself reads "CODE: reason", not "CODE: : reason".
    const noRs = uvsadm(`-d -t ${web} -r 10.200.11.99:8080`);
    assert.equal(noRs.stderr.split('\n')[1], `uvsadm: UVS_ERR_API_NOT_FOUND: no real server 10.200.11.99:8080 in tcp ${web}`);
  });

  test("uvs's own options keep working next to the classic ones", () => {
    assert.match(ok('-L --drain'), /^Draining real servers \(checked every \d+(\.\d+)? s\)\n/);
    assert.match(ok('--health'), /^Prot LocalAddress:Port +-> RemoteAddress:Port +Health/);
    assert.match(ok('-h'), /default forwarding method is masquerading \(-m\)/);
    const unreachable = spawnSync(process.execPath, [UVSADM, '--socket', '/nonexistent/uvsd.sock', '-Ln'], { encoding: 'utf8' });
    assert.equal(unreachable.status, 2);
    assert.match(unreachable.stderr, /cannot reach uvsd at \/nonexistent\/uvsd\.sock/);
  });
});
