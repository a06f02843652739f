/**
 * `uvs decap`: the real-server side of IPIP tunnel forwarding, in userspace, for hosts whose
 * kernel has no ipip driver (containers, CI sandboxes). It receives IP-in-IP packets (protocol 4)
 * on a raw socket, strips the outer header and writes the inner packet — still addressed to the
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
 * sum, for the last NIC to complete). A kernel ipip device keeps that state on the skb; a raw
 * socket loses it, so an inner checksum that does not verify but holds exactly the pseudo-header
 * sum is completed here before the packet enters the TUN device.
 */
function finishChecksum(b: Uint8Array, off: number, len: number): void {
  const ihl = (b[off]! & 15) << 2;
  const proto = b[off + P.IP_PROTO]!;
  const totlen = P.u16(b, off + P.IP_TOTLEN);
  if ((proto !== P.IPPROTO_TCP && proto !== P.IPPROTO_UDP) || totlen > len || ihl < 20 || (P.u16(b, off + P.IP_FRAG) & P.IP_FRAG_MASK) !== 0) return;
  const l4len = totlen - ihl;
  const field = off + ihl + (proto === P.IPPROTO_TCP ? P.TCP_CSUM : P.UDP_CSUM);
  if (l4len < (proto === P.IPPROTO_TCP ? P.TCP_MIN_HLEN : P.UDP_HLEN)) return;
  const pseudo = P.pseudoSum(P.u32(b, off + P.IP_SRC), P.u32(b, off + P.IP_DST), proto, l4len);
  if (proto === P.IPPROTO_UDP && P.u16(b, field) === 0) return; // no checksum
  if (P.sum16(b, off + ihl, l4len, pseudo) === 0xffff) return; // complete and valid
  if (P.u16(b, field) !== P.fold16(pseudo)) return; // damaged: the stack will drop it
  P.completeChecksum(b, off + ihl, off + totlen, field, proto === P.IPPROTO_UDP);
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
  const tun = tunAddon();
  const tfd = tun.openQueue(device);
  const rfd = tun.openRaw(IPPROTO_IPIP);
  ip(['link', 'set', 'dev', device, 'up']);
  for (const v of vips) ip(['addr', 'add', `${v}/32`, 'dev', 'lo'], true);
  // Inner packets arrive on the TUN device with the clients' source addresses.
  for (const k of [`conf/${device}/rp_filter`, 'conf/all/rp_filter']) writeFileSync(`/proc/sys/net/ipv4/${k}`, '0');
  const cleanup = () => {
    for (const v of vips) ip(['addr', 'del', `${v}/32`, 'dev', 'lo'], true);
    tun.closeFd(rfd);
    tun.closeFd(tfd);
  };
  let stop = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => (stop = true));
  const buf = new Uint8Array(BATCH * SLOT);
  const lens = new Int32Array(BATCH);
  const offs = new Int32Array(BATCH);
  const wlens = new Int32Array(BATCH);
  let packets = 0;
  console.log(`uvs decap: IPIP → ${device} for ${vips.join(', ')}`);
  await new Promise<void>((resolve) => {
    const loop = () => {
      if (stop) return resolve();
      const n = tun.readBatch(rfd, buf, lens, BATCH, SLOT, 50);
      let w = 0;
      for (let i = 0; i < n; i++) {
        const o = i * SLOT;
        const ihl = (buf[o]! & 15) << 2;
        if (lens[i]! <= ihl + 20 || buf[o + 9] !== IPPROTO_IPIP) continue;
        offs[w] = o + ihl;
        wlens[w] = lens[i]! - ihl;
        finishChecksum(buf, o + ihl, lens[i]! - ihl);
        w++;
      }
      if (w > 0) packets += Math.max(0, tun.writeBatch(tfd, buf, offs, wlens, w));
      setImmediate(loop);
    };
    loop();
  });
  cleanup();
  console.log(`uvs decap: stopped after ${packets} packets`);
  return 0;
}
