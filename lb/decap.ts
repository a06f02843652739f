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
