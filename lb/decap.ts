/**
 * `uvs decap`: the real-server side of IPIP / ip6ip6 tunnel forwarding, in userspace, for hosts
 * whose kernel has no ipip / ip6_tunnel driver (containers, CI sandboxes). It receives IP-in-IP
 * packets (protocol 4; IPv6 in IPv6: next header 41) on a raw socket, strips the outer header
 * and writes the inner packet — still addressed to the
 * VIP — into a TUN device, so the local stack delivers it to the service, which answers the client
 * directly (direct server return). The VIPs are added to `lo` so the host accepts them.
 * With a kernel ipip driver, use that instead (tunl0 plus the VIP on lo).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import * as P from './packet';
import { tunAddon } from './tun';

const IPPROTO_IPIP = 4;
const BATCH = 64;
const SLOT = 65536;

function ip(args: string[], allowFail = false): void {
  try {
    execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    if (!allowFail) throw new Error(`ip ${args.join(' ')}: ${String((e as { stderr?: Buffer }).stderr ?? e).trim()}`);
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

export async function decapCommand(args: string[]): Promise<number> {
  let device = 'uvsdec0';
  let vips: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--device') device = args[++i] ?? device;
    else if (args[i] === '--vips') vips = (args[++i] ?? '').split(',').filter(Boolean);
    else {
      console.error('usage: uvs decap --vips VIP[,VIP…] [--device NAME]');
      return 2;
    }
  }
  if (vips.length === 0) {
    console.error('uvs decap: --vips is required (the virtual addresses this real server answers for)');
    return 2;
  }
  const v4 = vips.filter((v) => !v.includes(':'));
  const v6 = vips.filter((v) => v.includes(':'));
  const tun = tunAddon();
  const tfd = tun.openQueue(device);
  // IPIP for IPv4 VIPs (the whole packet arrives), ip6ip6 for IPv6 ones (the payload arrives).
  const raws: { fd: number; family: 4 | 6 }[] = [];
  if (v4.length > 0) raws.push({ fd: tun.openRaw(IPPROTO_IPIP, 4), family: 4 });
  if (v6.length > 0) raws.push({ fd: tun.openRaw(P.IPPROTO_IPV6, 6), family: 6 });
  ip(['link', 'set', 'dev', device, 'up']);
  for (const v of v4) ip(['addr', 'add', `${v}/32`, 'dev', 'lo'], true);
  for (const v of v6) ip(['addr', 'add', `${v}/128`, 'dev', 'lo'], true);
  // Inner packets arrive on the TUN device with the clients' source addresses.
  for (const k of [`conf/${device}/rp_filter`, 'conf/all/rp_filter']) writeFileSync(`/proc/sys/net/ipv4/${k}`, '0');
  const cleanup = () => {
    for (const v of v4) ip(['addr', 'del', `${v}/32`, 'dev', 'lo'], true);
    for (const v of v6) ip(['addr', 'del', `${v}/128`, 'dev', 'lo'], true);
    for (const r of raws) tun.closeFd(r.fd);
    tun.closeFd(tfd);
  };
  let stop = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => (stop = true));
  const buf = new Uint8Array(BATCH * SLOT);
  const lens = new Int32Array(BATCH);
  const offs = new Int32Array(BATCH);
  const wlens = new Int32Array(BATCH);
  let packets = 0;
  console.log(`uvs decap: ${raws.map((r) => (r.family === 4 ? 'IPIP' : 'ip6ip6')).join(' + ')} → ${device} for ${vips.join(', ')}`);
  await new Promise<void>((resolve) => {
    const loop = () => {
      if (stop) return resolve();
      for (const r of raws) {
        // Both families: a 1 ms wait on each in turn (a lab tool; the director is not slowed).
        const n = tun.readBatch(r.fd, buf, lens, BATCH, SLOT, raws.length > 1 ? 1 : 50);
        let w = 0;
        for (let i = 0; i < n; i++) {
          const o = i * SLOT;
          const ihl = r.family === 6 ? 0 : (buf[o]! & 15) << 2;
          if (r.family === 4 && (lens[i]! <= ihl + 20 || buf[o + 9] !== IPPROTO_IPIP)) continue;
          if (r.family === 6 && (lens[i]! < P.IP6_HLEN || buf[o]! >> 4 !== 6)) continue;
          offs[w] = o + ihl;
          wlens[w] = lens[i]! - ihl;
          finishChecksum(buf, o + ihl, lens[i]! - ihl);
          w++;
        }
        if (w > 0) packets += Math.max(0, tun.writeBatch(tfd, buf, offs, wlens, w));
      }
      setImmediate(loop);
    };
    loop();
  });
  cleanup();
  console.log(`uvs decap: stopped after ${packets} packets`);
  return 0;
}
