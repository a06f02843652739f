/**
 * `uvs decap`: the real-server side of IPIP / ip6ip6 tunnel forwarding, in userspace, for hosts
 * whose kernel has no ipip / ip6_tunnel driver (containers, CI sandboxes). It receives IP-in-IP
 * packets (protocol 4; IPv6 in IPv6: next header 41) on a raw socket, strips the outer header
 * and writes the inner packet — still addressed to the
 * VIP — into a TUN device, so the local stack delivers it to the service, which answers the client
 * directly (direct server return). The VIPs are added to `lo` so the host accepts them.
 * With a kernel ipip driver, use that instead (tunl0 plus the VIP on lo).
 *
 * Whatever it writes into the TUN device the host takes as arriving from the network, with any
 * source address, so it accepts only what a director sends for a VIP: tunnelled packets from the
 * --directors addresses (one raw socket connected to each: the kernel filters by source, which is
 * also the only way to see an ip6ip6 packet's outer source) whose inner packet is of the outer
 * family and addressed to one of the --vips. Everything else is dropped and counted. What it
 * changes on the host — rp_filter (`all` and the device's), the VIPs on `lo` — it puts back as
 * it was on exit (SIGINT, SIGTERM, or an error).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { parseIPv4, parseIPv6 } from '../net/addr';
import * as P from '../net/packet';
import { tunAddon } from './tun';

const IPPROTO_IPIP = 4;
const BATCH = 64;
const SLOT = 65536;

/** Runs `ip`; false when it failed and failing is allowed. */
function ip(args: string[], allowFail = false): boolean {
  try {
    execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    return true;
  } catch (e) {
    if (!allowFail) throw new Error(`ip ${args.join(' ')}: ${String((e as { stderr?: Buffer }).stderr ?? e).trim()}`);
    return false;
  }
}

/**
 * A director with device offloads leaves the inner TCP/UDP checksum partial (the pseudo-header
 * sum, for the last NIC to complete). A kernel tunnel device keeps that state on the skb; a raw
 * socket loses it, so an inner checksum that does not verify but holds exactly the pseudo-header
 * sum is completed here before the packet enters the TUN device. IPv4 or IPv6 (no extension
 * headers) inner packets.
 */
function finishChecksum(b: Uint8Array, off: number, len: number): void {
  const v6 = b[off]! >> 4 === 6;
  let hl: number, proto: number, total: number, pseudo: number;
  if (v6) {
    if (len < P.IP6_HLEN) return;
    hl = P.IP6_HLEN;
    proto = b[off + P.IP6_NEXT]!;
    total = P.IP6_HLEN + P.u16(b, off + P.IP6_PLEN);
    pseudo = P.pseudoSum6(b, off + P.IP6_SRC, off + P.IP6_DST, proto, total - hl);
  } else {
    hl = (b[off]! & 15) << 2;
    proto = b[off + P.IP_PROTO]!;
    total = P.u16(b, off + P.IP_TOTLEN);
    if (hl < 20 || (P.u16(b, off + P.IP_FRAG) & P.IP_FRAG_MASK) !== 0) return;
    pseudo = P.pseudoSum(P.u32(b, off + P.IP_SRC), P.u32(b, off + P.IP_DST), proto, total - hl);
  }
  if ((proto !== P.IPPROTO_TCP && proto !== P.IPPROTO_UDP) || total > len) return;
  const l4len = total - hl;
  const field = off + hl + (proto === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM);
  if (l4len < (proto === P.IPPROTO_TCP ? P.TCP_MIN_HLEN : P.UDP_HLEN)) return;
  if (!v6 && proto === P.IPPROTO_UDP && P.u16(b, field) === 0) return; // no checksum
  if (P.sum16(b, off + hl, l4len, pseudo) === 0xffff) return; // complete and valid
  if (P.u16(b, field) !== P.fold16(pseudo)) return; // damaged: the stack will drop it
  P.completeChecksum(b, off + hl, off + total, field, proto === P.IPPROTO_UDP);
}

export const DECAP_USAGE = `usage: uvs decap --vips VIP[,VIP…] --directors ADDR[,ADDR…] [--device NAME]

Real-server side of tunnel forwarding (IPIP for IPv4 VIPs, ip6ip6 for IPv6 ones) without a kernel
driver: tunnelled packets are read on raw sockets, and the inner packet is written into a TUN
device (default uvsdec0) for the local stack; the VIPs are added to lo.

  --vips       the virtual addresses this server answers for; inner packets to anything else
               are dropped
  --directors  the outer source addresses the directors tunnel from (their
               dataplane.tunnelSource / tunnelSource6); packets from anyone else are never read
  --device     the TUN device's name

It sets net.ipv4.conf.{all,DEVICE}.rp_filter to 0 while it runs (inner packets carry the clients'
addresses) and puts back on exit (SIGINT, SIGTERM) every value it changed and removes only the
VIP addresses it added.`;

function parseList(v: string | undefined): string[] {
  return (v ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
}

/** An rp_filter sysctl's current value, or null if it cannot be read. */
function readSysctl(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

export async function decapCommand(args: string[]): Promise<number> {
  let device = 'uvsdec0';
  let vips: string[] = [];
  let directors: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--device') device = args[++i] ?? device;
    else if (args[i] === '--vips') vips = parseList(args[++i]);
    else if (args[i] === '--directors') directors = parseList(args[++i]);
    else if (args[i] === '--help' || args[i] === '-h') {
      console.log(DECAP_USAGE);
      return 0;
    } else {
      console.error(DECAP_USAGE);
      return 2;
    }
  }
  if (vips.length === 0 || directors.length === 0) {
    console.error(`uvs decap: ${vips.length === 0 ? '--vips' : '--directors'} is required\n${DECAP_USAGE}`);
    return 2;
  }
  const bad = [...vips, ...directors].find((a) => parseIPv4(a) === null && parseIPv6(a) === null);
  if (bad !== undefined) {
    console.error(`uvs decap: ${JSON.stringify(bad)} is not an IPv4 or IPv6 address`);
    return 2;
  }
  const v4 = vips.filter((v) => !v.includes(':'));
  const v6 = vips.filter((v) => v.includes(':'));
  const d4 = directors.filter((v) => !v.includes(':'));
  const d6 = directors.filter((v) => v.includes(':'));
  if ((v4.length > 0 && d4.length === 0) || (v6.length > 0 && d6.length === 0)) {
    console.error(
      `uvs decap: ${v4.length > 0 && d4.length === 0 ? 'IPv4' : 'IPv6'} VIPs need a director address of that family in --directors`,
    );
    return 2;
  }
  // The VIPs as the words inner destinations are compared with (network order, as P.u32 reads).
  const vip4 = Int32Array.from(v4.map((a) => parseIPv4(a)!));
  const vip6 = new Int32Array(v6.length * 4);
  v6.forEach((a, i) => vip6.set(parseIPv6(a)!, i * 4));
  const dir4 = Int32Array.from(d4.map((a) => parseIPv4(a)!));

  const tun = tunAddon();
  const raws: { fd: number; family: 4 | 6 }[] = [];
  const added: string[] = [];
  const sysctls: { path: string; was: string }[] = [];
  let tfd = -1;
  const cleanup = () => {
    for (const s of sysctls.reverse()) {
      try {
        writeFileSync(s.path, s.was);
      } catch {
        /* the device is gone with its sysctls */
      }
    }
    for (const a of added) ip(['addr', 'del', a, 'dev', 'lo'], true);
    for (const r of raws) tun.closeFd(r.fd);
    if (tfd >= 0) tun.closeFd(tfd);
  };
  let stop = false;
  const onSignal = () => (stop = true);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, onSignal);
  const drops = { notTunnel: 0, foreignSource: 0, foreignDestination: 0 };
  let packets = 0;
  try {
    tfd = tun.openQueue(device);
    // IPIP for IPv4 VIPs (the whole packet arrives), ip6ip6 for IPv6 ones (the payload arrives);
    // one socket per director, connected: the kernel hands it only that director's packets.
    for (const d of d4) if (v4.length > 0) raws.push({ fd: tun.openRaw(IPPROTO_IPIP, 4, d), family: 4 });
    for (const d of d6) if (v6.length > 0) raws.push({ fd: tun.openRaw(P.IPPROTO_IPV6, 6, d), family: 6 });
    ip(['link', 'set', 'dev', device, 'up']);
    for (const a of [...v4.map((v) => `${v}/32`), ...v6.map((v) => `${v}/128`)]) {
      if (ip(['addr', 'add', a, 'dev', 'lo'], true)) added.push(a); // one that was there stays there
    }
    // Inner packets arrive on the TUN device with the clients' source addresses: the effective
    // rp_filter is the maximum of `all` and the device's, so both go to 0, and back on exit.
    for (const k of [`conf/${device}/rp_filter`, 'conf/all/rp_filter']) {
      const path = `/proc/sys/net/ipv4/${k}`;
      const was = readSysctl(path);
      if (was === null || was === '0') continue;
      writeFileSync(path, '0');
      sysctls.push({ path, was });
    }
    const buf = new Uint8Array(BATCH * SLOT);
    const lens = new Int32Array(BATCH);
    const offs = new Int32Array(BATCH);
    const wlens = new Int32Array(BATCH);
    console.log(
      `uvs decap: ${[...new Set(raws.map((r) => (r.family === 4 ? 'IPIP' : 'ip6ip6')))].join(' + ')} from ${directors.join(', ')} → ${device} for ${vips.join(', ')}` +
        (sysctls.length ? ` (rp_filter 0 on ${sysctls.map((s) => s.path.split('/')[6]).join(', ')} until exit)` : ''),
    );
    await new Promise<void>((resolve) => {
      const loop = () => {
        if (stop) return resolve();
        for (const r of raws) {
          // Several sockets: a 1 ms wait on each in turn (a lab tool; the director is not slowed).
          const n = tun.readBatch(r.fd, buf, lens, BATCH, SLOT, raws.length > 1 ? 1 : 50);
          let w = 0;
          for (let i = 0; i < n; i++) {
            const o = i * SLOT;
            const len = lens[i]!;
            let inner: number;
            if (r.family === 4) {
              const ihl = (buf[o]! & 15) << 2;
              if (len < ihl + 20 || buf[o + P.IP_PROTO] !== IPPROTO_IPIP || buf[o + ihl]! >> 4 !== 4) {
                drops.notTunnel++;
                continue;
              }
              if (!inList(dir4, P.u32(buf, o + P.IP_SRC) | 0, 1)) {
                drops.foreignSource++; // the kernel filtered already; kept as a second lock
                continue;
              }
              inner = o + ihl;
              if (!inList(vip4, P.u32(buf, inner + P.IP_DST) | 0, 1)) {
                drops.foreignDestination++;
                continue;
              }
            } else {
              inner = o;
              if (len < P.IP6_HLEN || buf[o]! >> 4 !== 6) {
                drops.notTunnel++;
                continue;
              }
              if (!inList6(vip6, buf, inner + P.IP6_DST)) {
                drops.foreignDestination++;
                continue;
              }
            }
            offs[w] = inner;
            wlens[w] = len - (inner - o);
            finishChecksum(buf, inner, len - (inner - o));
            w++;
          }
          if (w > 0) packets += Math.max(0, tun.writeBatch(tfd, buf, offs, wlens, w));
        }
        setImmediate(loop);
      };
      loop();
    });
  } finally {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.off(sig, onSignal);
    cleanup();
  }
  console.log(
    `uvs decap: stopped after ${packets} packets; dropped ${JSON.stringify(drops)}; restored ${sysctls.length} rp_filter value(s), removed ${added.length} address(es) from lo`,
  );
  return 0;
}

function inList(list: Int32Array, v: number, stride: number): boolean {
  for (let i = 0; i < list.length; i += stride) if (list[i] === v) return true;
  return false;
}

/** Whether the 16 bytes at `at` are one of the IPv6 addresses in `list` (4 words each, as parseIPv6 gives). */
function inList6(list: Int32Array, b: Uint8Array, at: number): boolean {
  for (let i = 0; i < list.length; i += 4) {
    let same = true;
    for (let w = 0; w < 4 && same; w++) same = (P.u32(b, at + w * 4) | 0) === list[i + w];
    if (same) return true;
  }
  return false;
}
