/**
 * `uvs decap` on a real server (issue 12, defect 12), in two namespaces of its own: a "director"
 * side holding the director's address and an attacker's, and a real server running uvs decap.
 * IPIP packets are crafted with python3 raw sockets (outer source chosen freely, as a spoofer
 * would); a UDP listener on the real server on 0.0.0.0 reports what the host received.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const isRoot = process.getuid?.() === 0;
const P = `uvd${process.pid % 100000}`;
const NS_D = `${P}-d`;
const NS_R = `${P}-r`;
const DIRECTOR = '10.251.0.1';
const ATTACKER = '10.251.0.2';
const RS = '10.251.0.3';
const VIP = '10.250.0.10';
const VIP_KEPT = '10.250.0.11'; // on lo before decap starts: must still be there after

const SEND = `
import socket, struct, sys
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def ip(src, dst, proto, payload):
    h = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(payload), 0, 0, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack('!H', csum(h)) + h[12:] + payload
outer_src, inner_dst, tag = sys.argv[1], sys.argv[2], sys.argv[3].encode()
udp = struct.pack('!HHHH', 40000, 5454, 8 + len(tag), 0) + tag
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for _ in range(3): s.sendto(ip(outer_src, '${RS}', 4, ip('10.252.0.1', inner_dst, 17, udp)), ('${RS}', 0))
`;
const LISTEN = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('0.0.0.0', 5454))
while True:
    d, a = s.recvfrom(2048)
    print(d.decode(), flush=True)
`;

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 20000, killSignal: 'SIGKILL' });
}
const inNs = (ns: string, cmd: string, args: string[]) => sh('ip', ['netns', 'exec', ns, cmd, ...args]);
const sysctl = (name: string) => inNs(NS_R, 'cat', [`/proc/sys/net/ipv4/conf/${name}/rp_filter`]).trim();

describe('uvs decap', { skip: isRoot ? false : 'needs root (network namespaces, TUN, raw sockets)', timeout: 120_000 }, () => {
  let listener: ChildProcess | null = null;
  let decap: ChildProcess | null = null;
  let received = '';
  let decapOut = '';

  const waitFor = async (what: string, fn: () => boolean, ms = 15000) => {
    const deadline = Date.now() + ms;
    while (!fn()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; decap said: ${decapOut}`);
      await sleep(50);
    }
  };

  before(async () => {
    for (const ns of [NS_D, NS_R]) sh('ip', ['netns', 'add', ns]);
    sh('ip', ['link', 'add', `${P}a`, 'netns', NS_D, 'type', 'veth', 'peer', 'name', `${P}b`, 'netns', NS_R]);
    for (const a of [DIRECTOR, ATTACKER]) inNs(NS_D, 'ip', ['addr', 'add', `${a}/24`, 'dev', `${P}a`]);
    inNs(NS_R, 'ip', ['addr', 'add', `${RS}/24`, 'dev', `${P}b`]);
    for (const [ns, dev] of [
      [NS_D, `${P}a`],
      [NS_R, `${P}b`],
      [NS_D, 'lo'],
      [NS_R, 'lo'],
    ] as const)
      inNs(ns, 'ip', ['link', 'set', dev, 'up']);
    inNs(NS_R, 'ip', ['addr', 'add', `${VIP_KEPT}/32`, 'dev', 'lo']);
    inNs(NS_R, 'sh', ['-c', 'echo 1 > /proc/sys/net/ipv4/conf/all/rp_filter']);
    listener = spawn('ip', ['netns', 'exec', NS_R, 'python3', '-c', LISTEN], { stdio: ['ignore', 'pipe', 'ignore'] });
    listener.stdout!.on('data', (d: Buffer) => (received += d.toString()));
  });

  after(async () => {
    decap?.kill('SIGKILL');
    listener?.kill('SIGKILL');
    await sleep(200);
    for (const ns of [NS_D, NS_R]) {
      try {
        sh('ip', ['netns', 'del', ns]);
      } catch {
        /* already gone */
      }
    }
  });

  test('only a director tunnelling to a VIP gets through; rp_filter and lo are as before once it stops', async () => {
    decap = spawn(
      'ip',
      [
        'netns',
        'exec',
        NS_R,
        process.execPath,
        join(ROOT, 'dist', 'control', 'uvs.js'),
        'decap',
        '--vips',
        `${VIP},${VIP_KEPT}`,
        '--directors',
        DIRECTOR,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    decap.stdout!.on('data', (d: Buffer) => (decapOut += d.toString()));
    decap.stderr!.on('data', (d: Buffer) => (decapOut += d.toString()));
    await waitFor('uvs decap to start', () => decapOut.includes('uvs decap:'));
    assert.equal(sysctl('all'), '0', 'rp_filter is off while it runs');
    const send = (src: string, dst: string, tag: string) => inNs(NS_D, 'python3', ['-c', SEND, src, dst, tag]);
    send(ATTACKER, VIP, 'spoofed-source');
    send(DIRECTOR, RS, 'foreign-destination'); // the real server's own address, not a VIP
    send(DIRECTOR, VIP, 'good');
    await waitFor("the director's packet for the VIP", () => received.includes('good'));
    send(DIRECTOR, VIP, 'last');
    await waitFor('a second good packet (everything sent before it has been handled)', () => received.includes('last'));
    assert.ok(!received.includes('spoofed-source'), `a packet from a non-director was injected: ${received}`);
    assert.ok(!received.includes('foreign-destination'), `an inner packet to a non-VIP was injected: ${received}`);

    const exited = new Promise<number | null>((r) => decap!.once('exit', (c) => r(c)));
    decap.kill('SIGTERM');
    assert.equal(await exited, 0);
    decap = null;
    assert.equal(sysctl('all'), '1', 'rp_filter restored');
    const lo = inNs(NS_R, 'ip', ['-4', 'addr', 'show', 'dev', 'lo']);
    assert.ok(!lo.includes(`${VIP}/32`), 'the VIP decap added is removed');
    assert.ok(lo.includes(`${VIP_KEPT}/32`), 'the address that was there before stays');
    assert.match(decapOut, /"foreignDestination":[1-9]/, `dropped and counted: ${decapOut}`);
  });

  test('--directors is required and --help describes it', () => {
    const run = (args: string[]) => {
      try {
        // In the test's namespace: a decap that did start would change only what the test removes.
        return { code: 0, out: inNs(NS_R, process.execPath, [join(ROOT, 'dist', 'control', 'uvs.js'), 'decap', ...args]) };
      } catch (e) {
        const x = e as { status: number; stderr: string };
        return { code: x.status, out: x.stderr };
      }
    };
    const missing = run(['--vips', VIP]);
    assert.equal(missing.code, 2);
    assert.match(missing.out, /--directors is required/);
    const help = run(['--help']);
    assert.equal(help.code, 0);
    assert.match(help.out, /--directors/);
    assert.match(help.out, /rp_filter/);
  });
});
