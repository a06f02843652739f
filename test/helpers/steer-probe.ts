/**
 * Runs inside a network namespace (ip netns exec NS node steer-probe.js < JSON): makes a
 * multi-queue TUN device, attaches the steering program (unless key is null) built as uvsd
 * builds it (lb/steering.ts steeringKey), routes the test prefixes back into the device and
 * writes each packet into the queue it names. The kernel forwards every packet out of the device
 * again — through its queue selection — and this reads all queues and prints, as one JSON line,
 * the queue each packet came back on (−1: not seen).
 *
 * Input: { dev, queues, key: { k0, k1, vipCidrs, pool } | null, packets: [{ hex, writeQueue }] }.
 * Output: { attach: ''|reason|null, queues: number[] }.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { steeringKey, steeringTable } from '../../lb/steering';
import { tunAddon } from '../../lb/tun';

interface Input {
  dev: string;
  queues: number;
  key: { k0: number; k1: number; vipCidrs: string[]; pool: string[] } | null;
  packets: { hex: string; writeQueue: number }[];
}

// On stdin: a few thousand packets pass the 128 KB an argument may hold.
const input = JSON.parse(readFileSync(0, 'utf8')) as Input;
const tun = tunAddon();
const fds: number[] = [];
for (let i = 0; i < input.queues; i++) fds.push(tun.openQueue(input.dev, false));
const k = input.key;
const attach = k === null ? null : tun.steerAttach(fds[0]!, k.k0, k.k1, steeringTable(steeringKey(k.k0, k.k1, k.vipCidrs, k.pool)));
const sh = (args: string[]) => execFileSync('ip', args, { stdio: 'ignore' });
sh(['link', 'set', 'dev', input.dev, 'up']);
writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
for (const c of ['all', input.dev]) {
  writeFileSync(`/proc/sys/net/ipv4/conf/${c}/rp_filter`, '0');
  writeFileSync(`/proc/sys/net/ipv4/conf/${c}/send_redirects`, '0');
}
writeFileSync(`/proc/sys/net/ipv6/conf/${input.dev}/disable_ipv6`, '0');
writeFileSync('/proc/sys/net/ipv6/conf/all/forwarding', '1');
sh(['route', 'replace', '10.99.0.0/16', 'dev', input.dev]);
sh(['-6', 'route', 'replace', 'fd99::/16', 'dev', input.dev]);

const sent = input.packets.map((p) => Buffer.from(p.hex, 'hex'));
const SLOT = 2048;
const buf = new Uint8Array(SLOT * 64);
const lens = new Int32Array(64);
const wOffs = new Int32Array(1);
const wLens = new Int32Array(1);

/** The same packet, as forwarded: equal but for the TTL / hop limit and the IPv4 header checksum. */
function same(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  const v4 = (a[0]! & 0xf0) === 0x40;
  for (let i = 0; i < a.length; i++) {
    if (v4 ? i === 8 || i === 10 || i === 11 : i === 7) continue;
    if (a[i] !== b[i]) return false;
  }
  return true;
}

const queues = sent.map(() => -1);
let left = sent.length;
/** Reads what every queue holds (waiting up to timeoutMs on each), matching packets to those sent. */
function drain(timeoutMs: number): void {
  for (let q = 0; q < fds.length; q++) {
    const n = tun.readBatch(fds[q]!, buf, lens, 64, SLOT, timeoutMs, timeoutMs > 0);
    for (let k = 0; k < n; k++) {
      const got = buf.subarray(k * SLOT, k * SLOT + lens[k]!);
      for (let i = 0; i < sent.length; i++) {
        if (queues[i] === -1 && same(got, sent[i]!)) {
          queues[i] = q;
          left--;
          break;
        }
      }
    }
  }
}

const wbuf = new Uint8Array(SLOT);
for (let i = 0; i < sent.length; i++) {
  const p = sent[i]!;
  wbuf.set(p, 0);
  wLens[0] = p.length;
  const n = tun.writeBatch(fds[input.packets[i]!.writeQueue]!, wbuf, wOffs, wLens, 1);
  if (n !== 1) throw new Error(`write of packet ${i} returned ${n}`);
  // A queue holds tx_queue_len (500) packets: read as we go, so that none is dropped for want of room.
  if (i % 32 === 31) drain(0);
}
const deadline = Date.now() + 3000;
while (left > 0 && Date.now() < deadline) drain(20);
process.stdout.write(JSON.stringify({ attach, queues }) + '\n');
for (const fd of fds) tun.closeFd(fd);
