/**
 * Queue steering (lb/native/steer.c, docs/steering.md) against the kernel: a multi-queue TUN
 * device in a namespace of its own, the steering program attached, and crafted packets written
 * into the device that the kernel forwards back out of it — through its queue selection. The
 * queue each comes back on must be the one lb/steering.ts says (the key: the client's endpoint),
 * both directions of a masq connection must share a queue, and the queue must not depend on the
 * queue a packet was written from. Sources an attacker picks knowing the algorithm but not the
 * key (issue 25) must spread over the queues there too. The program's value itself is compared
 * with the specification's on thousands of packets (BPF_PROG_TEST_RUN). A control run without
 * the program shows what the device does on its own (the queue that last wrote the flow), so the
 * checks above cannot pass by accident.
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
import { type SteeringKey, steeringKey, steeringQueue, steeringTable, steeringValue } from '../../lb/steering';
import { tunAddon } from '../../lb/tun';
import { parseIPv4, parseIPv6 } from '../../net/addr';
import { checksum, put16, put32 } from '../../net/packet';

const ROOT = join(__dirname, '..', '..', '..');
const PROBE = join(ROOT, 'dist', 'test', 'helpers', 'steer-probe.js');
const isRoot = process.getuid?.() === 0;
const NS = `uvst${process.pid % 100000}-steer`;
const DEV = 'uvsteer0';
/** The program's VIP ranges and full-NAT pool, as uvsd passes dataplane.vipCidrs and fullnat.addresses. */
const VIP_CIDRS = ['10.99.0.0/24', 'fd99::/120'];
const POOL = ['10.99.9.1', 'fd99::9:1'];

function randomKey(): SteeringKey {
  return steeringKey(randomInt(0, 2 ** 32), randomInt(0, 2 ** 32), VIP_CIDRS, POOL);
}

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
  for (let i = 0; i < 12; i++) {
    // A client whose port is below the service's, and (every other one) the real server's: keyed
    // on its own endpoint all the same, both ways.
    const client = `10.99.6.${1 + i}`;
    const cport = randomInt(1000, 8000);
    const rport = i % 2 ? 443 : 9000;
    out.push({
      name: `v4 tcp ${client}:${cport} → VIP:8000`,
      pkt: pkt4({ src: client, dst: '10.99.0.10', proto: 6, sport: cport, dport: 8000, mark: mark++ }),
    });
    out.push({
      name: `v4 tcp 10.99.2.1:${rport} → ${client}:${cport} (reply)`,
      pkt: pkt4({ src: '10.99.2.1', dst: client, proto: 6, sport: rport, dport: cport, mark: mark++ }),
      pairOf: out.length - 1,
    });
    // Full-NAT replies to a pool address, its port above or below the server's: the 4-tuple.
    const lport = i % 2 ? randomInt(8081, 65536) : randomInt(1024, 8080);
    out.push({
      name: `v4 tcp 10.99.2.${1 + (i % 3)}:8080 → pool:${lport}`,
      pkt: pkt4({ src: `10.99.2.${1 + (i % 3)}`, dst: POOL[0]!, proto: 6, sport: 8080, dport: lport, mark: mark++ }),
    });
    out.push({
      name: `v6 udp fd99::2:1:5353 → pool:${lport}`,
      pkt: pkt6({ src: 'fd99::2:1', dst: POOL[1]!, next: 17, sport: 5353, dport: lport, mark: mark++ }),
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

/**
 * Sources an attacker picks knowing the algorithm but not the key (issue 25), `per` of each class:
 * before the keyed hash each class went to one queue whatever the seed. Sources the kernel
 * forwards (no martian: 0/8, 127/8, multicast and above).
 */
function aimedCases(per: number): { cls: string; cases: Case[] }[] {
  let mark = 1_000_000;
  const low = randomInt(0, 2 ** 18);
  const fold = randomInt(0, 2 ** 32);
  const highBits: Case[] = [];
  for (const i of [...Array(2 ** 14).keys()].sort(() => Math.random() - 0.5)) {
    const a = ((i << 18) | low) >>> 0;
    const top = a >>> 24;
    if (top === 0 || top === 127 || top >= 224 || top === 10) continue;
    const src = [a >>> 24, (a >>> 16) & 255, (a >>> 8) & 255, a & 255].join('.');
    highBits.push({
      name: `aimed v4 ${src}:40000 → VIP:80`,
      pkt: pkt4({ src, dst: '10.99.0.10', proto: 6, sport: 40000, dport: 80, mark: mark++ }),
    });
    if (highBits.length === per) break;
  }
  const fold64: Case[] = [];
  const lowPorts: Case[] = [];
  const answers: Case[] = [];
  const pool: Case[] = [];
  for (let i = 0; i < per; i++) {
    const iid = randomInt(0, 2 ** 32);
    const w3 = (iid ^ fold) >>> 0;
    const src = `fd98:0:0:1:${(iid >>> 16).toString(16)}:${(iid & 0xffff).toString(16)}:${(w3 >>> 16).toString(16)}:${(w3 & 0xffff).toString(16)}`;
    fold64.push({ name: `aimed v6 ${src} → VIP:80`, pkt: pkt6({ src, dst: 'fd99::10', next: 17, sport: 40000, dport: 80, mark: mark++ }) });
    const a = `10.99.${randomInt(128, 256)}.${randomInt(1, 255)}`; // routed back into the device, for the answers
    const sport = randomInt(1, 80);
    lowPorts.push({
      name: `aimed v4 ${a}:${sport} → VIP:80`,
      pkt: pkt4({ src: a, dst: '10.99.0.10', proto: 6, sport, dport: 80, mark: mark++ }),
    });
    answers.push({
      name: `aimed v4 10.99.2.${1 + (i % 3)}:8080 → ${a}:${sport} (the server's answer)`,
      pkt: pkt4({ src: `10.99.2.${1 + (i % 3)}`, dst: a, proto: 6, sport: 8080, dport: sport, mark: mark++ }),
    });
    const b = `10.97.${randomInt(0, 256)}.${randomInt(1, 255)}`;
    const bport = randomInt(1, 40000);
    pool.push({
      name: `aimed v4 ${b}:${bport} → pool:40000`,
      pkt: pkt4({ src: b, dst: POOL[0]!, proto: 17, sport: bport, dport: 40000, mark: mark++ }),
    });
  }
  return [
    { cls: 'IPv4 sources differing only above bit 17', cases: highBits },
    { cls: 'IPv6 sources in one /64 with one 32-bit fold', cases: fold64 },
    { cls: 'IPv4 sources with ports below the service port', cases: lowPorts },
    { cls: "three real servers' answers to them", cases: answers },
    { cls: 'IPv4 sources to one pool address and port, from lower ports', cases: pool },
  ];
}

function probe(queues: number, key: SteeringKey | null, cs: Case[]): { attach: string | null; queues: number[] } {
  execFileSync('ip', ['netns', 'add', NS]);
  try {
    const input = {
      dev: DEV,
      queues,
      key: key && { k0: key.k0, k1: key.k1, vipCidrs: VIP_CIDRS, pool: POOL },
      packets: cs.map((c, i) => ({ hex: Buffer.from(c.pkt).toString('hex'), writeQueue: i % queues })),
    };
    const r = spawnSync('ip', ['netns', 'exec', NS, process.execPath, PROBE], {
      input: JSON.stringify(input),
      encoding: 'utf8',
      timeout: 30000,
    });
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
    test(`with the program, ${nq} queues: the queue is the client endpoint's, whichever queue wrote the packet; aimed sources spread`, (t) => {
      const key = randomKey();
      const aimed = aimedCases(512);
      const cs = cases();
      const regular = cs.length;
      for (const a of aimed) cs.push(...a.cases);
      const r = probe(nq, key, cs);
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
          steeringQueue(c.pkt, key, nq),
          `${c.name}: queue ${q}, the key says ${steeringQueue(c.pkt, key, nq)} (key ${key.k0}:${key.k1})`,
        );
        if (c.pairOf !== undefined)
          assert.equal(q, r.queues[c.pairOf], `${c.name}: not on its forward direction's queue (key ${key.k0}:${key.k1})`);
        if (i < regular) seen[q]!++;
      });
      // 192 packets spread over the queues: each gets a fair share (binomial, far from the bounds).
      for (let q = 0; q < nq; q++)
        assert.ok(seen[q]! > regular / nq / 3, `queue ${q} got ${seen[q]} of ${regular} (key ${key.k0}:${key.k1}): ${seen.join(', ')}`);
      // Each aimed class, 512 packets: each queue within 40 % of 1/N (6.4 binomial deviations with
      // 3 queues); before the keyed hash, every class went to one queue.
      let at = regular;
      for (const a of aimed) {
        const per = new Array<number>(nq).fill(0);
        for (let i = 0; i < a.cases.length; i++) per[r.queues[at + i]!]!++;
        at += a.cases.length;
        for (let q = 0; q < nq; q++) {
          const share = (per[q]! / a.cases.length) * nq;
          assert.ok(
            share > 0.6 && share < 1.4,
            `${a.cls}: queue ${q} got ${per[q]} of ${a.cases.length}: ${per.join(', ')} (key ${key.k0}:${key.k1})`,
          );
        }
      }
    });
  }

  test("the kernel's program returns the specification's value, to the bit, on every kind of packet, with and without VIP ranges and pools of either family (BPF_PROG_TEST_RUN)", (t) => {
    const tun = tunAddon();
    const pkts = [...cases(), ...aimedCases(256).flatMap((a) => a.cases)].map((c) => c.pkt);
    // And random bytes behind a valid version nibble: any protocol, fragment bits, IHL, ports.
    for (let i = 0; i < 2000; i++) {
      const b = new Uint8Array(80);
      for (let j = 0; j < b.length; j++) b[j] = randomInt(0, 256);
      b[0] = i % 2 ? 0x45 : 0x60 | (b[0]! & 0x0f);
      if (i % 4 === 1) b[9] = [6, 17, 132][i % 3]!;
      if (i % 4 === 2) b[6] = [6, 17, 132][i % 3]!;
      if (i % 8 === 1) put32(b, 16, parseIPv4('10.99.0.10')!);
      if (i % 8 === 3) put32(b, 16, parseIPv4(POOL[0]!)!);
      if (i % 8 === 2) parseIPv6('fd99::10')!.forEach((w, k) => put32(b, 24 + 4 * k, w));
      if (i % 8 === 4) parseIPv6(POOL[1]!)!.forEach((w, k) => put32(b, 24 + 4 * k, w));
      pkts.push(b);
    }
    for (const [vips, pool] of [
      [VIP_CIDRS, POOL],
      [[VIP_CIDRS[0]!], [POOL[0]!]],
      [VIP_CIDRS, []],
      [[], [POOL[1]!]],
      [[], []],
      [['0.0.0.0/0', '::/0', '10.99.0.0/16', 'fd99::/16'], POOL],
    ]) {
      const key = steeringKey(randomInt(0, 2 ** 32), randomInt(0, 2 ** 32), vips!, pool!);
      let fd: number;
      try {
        fd = tun.steerLoad(key.k0, key.k1, steeringTable(key));
      } catch (e) {
        const m = (e as Error).message;
        if (/Operation not permitted|not implemented/.test(m)) return t.skip(`this kernel or process refuses the steering program: ${m}`);
        throw new Error(`VIP ranges ${vips!.join(' ')}, pool ${pool!.join(' ')}: ${m}`);
      }
      try {
        for (const p of pkts) {
          const [v] = tun.steerRun(fd, p, 1);
          assert.equal(
            v,
            steeringValue(p, key),
            `${Buffer.from(p).toString('hex')} (key ${key.k0}:${key.k1}, VIP ranges ${vips!.join(' ')}, pool ${pool!.join(' ')})`,
          );
        }
      } finally {
        tun.closeFd(fd);
      }
    }
    // More VIP ranges and pool addresses than the program takes: refused, saying why.
    const many = steeringKey(
      1,
      2,
      [],
      Array.from({ length: 257 }, (_, i) => `10.98.${i >> 7}.${(i & 127) + 1}`),
    );
    assert.throws(() => tun.steerLoad(1, 2, steeringTable(many)), /257 VIP ranges and full-NAT addresses, at most 256/);
  });

  test('without the program (control): the device splits connections and ignores the key', () => {
    const key = randomKey();
    const cs = cases();
    const r = probe(2, null, cs);
    assert.equal(r.attach, null);
    assert.ok(
      r.queues.every((q) => q !== -1),
      'a packet did not come back',
    );
    // automq hashes a flow it has not learnt: a masq connection's two directions are two flows.
    // 68 pairs on 2 queues: none split would happen 1 time in 2^68.
    const pairsSplit = cs.filter((c, i) => c.pairOf !== undefined && r.queues[i] !== r.queues[c.pairOf]).length;
    assert.ok(pairsSplit > 0, 'every masq pair shared a queue without the program');
    const asKeyed = cs.filter((c, i) => r.queues[i] === steeringQueue(c.pkt, key, 2)).length;
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
    await assert.rejects(lab.startUvsd(cfg, 15000, [], noBpf), /uvsd \S+ exited \([1-9]/);
    assert.match(
      readFileSync(join(lab.dir, 'uvsd.log'), 'utf8'),
      /dataplane\.steering is ebpf but the program cannot be attached: bpf\(BPF_PROG_LOAD\): Operation not permitted/,
    );
  });
});
