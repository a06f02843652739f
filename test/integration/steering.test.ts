/**
 * Queue steering (lb/native/steer.c, docs/steering.md) against the kernel: a multi-queue TUN
 * device in a namespace of its own, the steering program attached, and crafted packets written
 * into the device that the kernel forwards back out of it — through its queue selection. The
 * queue each comes back on must be the one lb/steering.ts says (the key: the client's endpoint),
 * both directions of a masq connection must share a queue, and the queue must not depend on the
 * queue a packet was written from. A control run without the program shows what the device does
 * on its own (the queue that last wrote the flow), so the checks above cannot pass by accident.
 * Then uvsd without CAP_BPF and CAP_SYS_ADMIN, as in a container: auto falls back to the device's
 * steering and says why, traffic flows; a forced ebpf refuses to start, naming the reason.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP } from '../../lab/lab';
import { steeringQueue } from '../../lb/steering';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import { checksum, put16, put32 } from '../../net/packet';

const ROOT = join(__dirname, '..', '..', '..');
const PROBE = join(ROOT, 'dist', 'test', 'helpers', 'steer-probe.js');
const isRoot = process.getuid?.() === 0;
const NS = `uvst${process.pid % 100000}-steer`;
const DEV = 'uvsteer0';

/** IPv4 packet: proto 6/17 with ports (TCP: 20-byte header; UDP: 8), or 1 (ICMP echo); a marker in the payload. */
function pkt4(o: { src: string; dst: string; proto: number; sport?: number; dport?: number; frag?: number; mark: number }): Uint8Array {
  const l4 = o.proto === 6 ? 20 : 8;
  const b = new Uint8Array(20 + l4 + 4);
  b[0] = 0x45;
  put16(b, 2, b.length);
  put16(b, 4, o.mark & 0xffff);
  put16(b, 6, o.frag ?? 0);
  b[8] = 64;
  b[9] = o.proto;
  put32(b, 12, parseIPv4(o.src)!);
  put32(b, 16, parseIPv4(o.dst)!);
  if (o.proto === 6 || o.proto === 17) {
    put16(b, 20, o.sport!);
    put16(b, 22, o.dport!);
    if (o.proto === 6) {
      b[32] = 0x50;
      b[33] = 0x10; // ACK
      put16(b, 34, 512);
    } else put16(b, 24, l4 + 4);
  } else b[20] = 8; // echo request
  put32(b, 20 + l4, o.mark);
  put16(b, 10, checksum(b, 0, 20, 0));
  return b;
}

/** IPv6 packet: next header 17 (UDP) with ports, or 58 (ICMPv6 echo); a marker in the payload. */
function pkt6(o: { src: string; dst: string; next: number; sport?: number; dport?: number; mark: number }): Uint8Array {
  const b = new Uint8Array(40 + 8 + 4);
  b[0] = 0x60;
  put16(b, 4, 12);
  b[6] = o.next;
  b[7] = 64;
  parseIPv6(o.src)!.forEach((w, i) => put32(b, 8 + 4 * i, w));
  parseIPv6(o.dst)!.forEach((w, i) => put32(b, 24 + 4 * i, w));
  if (o.next === 17) {
    put16(b, 40, o.sport!);
    put16(b, 42, o.dport!);
    put16(b, 44, 12);
  } else b[40] = 128;
  put32(b, 48, o.mark);
  return b;
}

interface Case {
  name: string;
  pkt: Uint8Array;
  /** Index of the other direction's packet of the same masq connection. */
  pairOf?: number;
}

function cases(): Case[] {
  const out: Case[] = [];
  let mark = 1;
  for (let i = 0; i < 40; i++) {
    const proto = i % 2 ? 6 : 17;
    const client = `10.99.1.${1 + (i % 200)}`;
    const cport = randomInt(32768, 61000);
    const rs = `10.99.2.${1 + (i % 3)}`;
    out.push({
      name: `v4 ${proto} ${client}:${cport} → VIP:80`,
      pkt: pkt4({ src: client, dst: '10.99.0.10', proto, sport: cport, dport: 80, mark: mark++ }),
    });
    out.push({
      name: `v4 ${proto} ${rs}:8080 → ${client}:${cport} (reply)`,
      pkt: pkt4({ src: rs, dst: client, proto, sport: 8080, dport: cport, mark: mark++ }),
      pairOf: out.length - 1,
    });
  }
  for (let i = 0; i < 16; i++) {
    const client = `fd99::1:${(i + 1).toString(16)}`;
    const cport = randomInt(32768, 61000);
    out.push({
      name: `v6 udp ${client}:${cport} → VIP:53`,
      pkt: pkt6({ src: client, dst: 'fd99::10', next: 17, sport: cport, dport: 53, mark: mark++ }),
    });
    out.push({
      name: `v6 udp fd99::2:1:5353 → ${client}:${cport} (reply)`,
      pkt: pkt6({ src: 'fd99::2:1', dst: client, next: 17, sport: 5353, dport: cport, mark: mark++ }),
      pairOf: out.length - 1,
    });
  }
  for (let i = 0; i < 8; i++) {
    out.push({
      name: `v4 udp 53 ↔ 53 #${i}`,
      pkt: pkt4({ src: `10.99.3.${i + 1}`, dst: '10.99.0.10', proto: 17, sport: 53, dport: 53, mark: mark++ }),
    });
    out.push({ name: `v4 icmp #${i}`, pkt: pkt4({ src: `10.99.4.${i + 1}`, dst: '10.99.0.10', proto: 1, mark: mark++ }) });
    // A later fragment: its bytes where the ports would be are payload, not ports.
    out.push({
      name: `v4 later fragment #${i}`,
      pkt: pkt4({ src: `10.99.5.${i + 1}`, dst: '10.99.0.10', proto: 17, sport: 40000 + i, dport: 80, frag: 185, mark: mark++ }),
    });
    out.push({ name: `v6 icmp #${i}`, pkt: pkt6({ src: `fd99::5:${i + 1}`, dst: 'fd99::10', next: 58, mark: mark++ }) });
  }
  return out;
}

function probe(queues: number, seed: number | null, cs: Case[]): { attach: string | null; queues: number[] } {
  execFileSync('ip', ['netns', 'add', NS]);
  try {
    const input = {
      dev: DEV,
      queues,
      seed,
      packets: cs.map((c, i) => ({ hex: Buffer.from(c.pkt).toString('hex'), writeQueue: i % queues })),
    };
    const r = spawnSync('ip', ['netns', 'exec', NS, process.execPath, PROBE, JSON.stringify(input)], { encoding: 'utf8', timeout: 30000 });
    if (r.status !== 0) throw new Error(`steer-probe failed (${r.status}): ${r.stderr}`);
    return JSON.parse(r.stdout.trim()) as { attach: string | null; queues: number[] };
  } finally {
    execFileSync('ip', ['netns', 'del', NS], { stdio: 'ignore' });
  }
}

describe('queue steering on a real multi-queue TUN device', {
  skip: isRoot ? false : 'needs root (network namespaces, TUN)',
  timeout: 120_000,
}, () => {
  // A namespace an interrupted run left behind.
  before(() => spawnSync('ip', ['netns', 'del', NS], { stdio: 'ignore' }));
  after(() => {
    spawnSync('ip', ['netns', 'del', NS], { stdio: 'ignore' });
  });

  for (const nq of [2, 3]) {
    test(`with the program, ${nq} queues: the queue is the client endpoint's, whichever queue wrote the packet`, (t) => {
      const seed = randomInt(0, 2 ** 32);
      const cs = cases();
      const r = probe(nq, seed, cs);
      if (r.attach && /EPERM|Operation not permitted|ENOSYS|not implemented|Inappropriate ioctl/i.test(r.attach)) {
        t.skip(`this kernel or process refuses the steering program: ${r.attach}`);
        return;
      }
      assert.equal(r.attach, '', `steerAttach: ${r.attach}`);
      const seen = new Array<number>(nq).fill(0);
      cs.forEach((c, i) => {
        const q = r.queues[i]!;
        assert.notEqual(q, -1, `${c.name}: never came back out of the device`);
        assert.equal(
          q,
          steeringQueue(c.pkt, seed, nq),
          `${c.name}: queue ${q}, the key says ${steeringQueue(c.pkt, seed, nq)} (seed ${seed})`,
        );
        if (c.pairOf !== undefined) assert.equal(q, r.queues[c.pairOf], `${c.name}: not on its forward direction's queue (seed ${seed})`);
        seen[q]!++;
      });
      // 136 packets spread over the queues: each gets a fair share (binomial, far from the bounds).
      for (let q = 0; q < nq; q++)
        assert.ok(seen[q]! > cs.length / nq / 3, `queue ${q} got ${seen[q]} of ${cs.length} (seed ${seed}): ${seen.join(', ')}`);
    });
  }

  test('without the program (control): the device splits connections and ignores the key', () => {
    const seed = randomInt(0, 2 ** 32);
    const cs = cases();
    const r = probe(2, null, cs);
    assert.equal(r.attach, null);
    assert.ok(
      r.queues.every((q) => q !== -1),
      'a packet did not come back',
    );
    // automq hashes a flow it has not learnt: a masq connection's two directions are two flows.
    // 56 pairs on 2 queues: none split would happen 1 time in 2^56.
    const pairsSplit = cs.filter((c, i) => c.pairOf !== undefined && r.queues[i] !== r.queues[c.pairOf]).length;
    assert.ok(pairsSplit > 0, 'every masq pair shared a queue without the program');
    const asKeyed = cs.filter((c, i) => r.queues[i] === steeringQueue(c.pkt, seed, 2)).length;
    assert.ok(asKeyed < cs.length * 0.8, `${asKeyed} of ${cs.length} on the key's queue without the program`);
  });
});

describe('uvsd without CAP_BPF and CAP_SYS_ADMIN (a container)', {
  skip: isRoot ? false : 'needs root (network namespaces, TUN)',
  timeout: 120_000,
}, () => {
  const lab = new Lab({ prefix: `uvsc${process.pid % 100000}` });
  // setpriv drops them from the bounding set before uvsd's node is executed: it never has them.
  const noBpf = ['setpriv', '--bounding-set=-bpf,-sys_admin', '--'];
  const services = [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
  ];
  before(async () => {
    lab.up();
    await lab.waitServers();
  });
  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('steering auto: the device keeps its own steering, uvsd says why, and traffic flows', async () => {
    await lab.startUvsd(lab.writeConfig(lab.config(services)), 15000, [], noBpf);
    const st = (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
    assert.equal(st.steering.path, 'automq');
    assert.match(st.steering.reason ?? '', /^bpf\(BPF_PROG_LOAD\): Operation not permitted/);
    const listing = execFileSync(
      process.execPath,
      [join(ROOT, 'dist', 'control', 'uvsadm.js'), '--socket', lab.socket, '-L', '--workers'],
      {
        encoding: 'utf8',
      },
    );
    assert.match(listing, /^Queue steering: automq \(bpf\(BPF_PROG_LOAD\): Operation not permitted\)$/m);
    assert.match(readFileSync(join(lab.dir, 'uvsd.log'), 'utf8'), /queue steering: eBPF program refused, using the device's flow table/);
    const servers = new Set<string>();
    for (let i = 0; i < 6; i++) servers.add(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}/`]).trim());
    assert.equal(servers.size, 3, `rr over three servers without the program: ${[...servers].join(', ')}`);
    await lab.stopUvsd();
  });

  test('steering ebpf: uvsd refuses to start and names the reason', async () => {
    const cfg = lab.writeConfig(lab.config(services, { dataplane: { steering: 'ebpf' } }), 'forced.yaml');
    await assert.rejects(lab.startUvsd(cfg, 15000, [], noBpf), /uvsd exited with [1-9]/);
    assert.match(
      readFileSync(join(lab.dir, 'uvsd.log'), 'utf8'),
      /dataplane\.steering is ebpf but the program cannot be attached: bpf\(BPF_PROG_LOAD\): Operation not permitted/,
    );
  });
});
