/**
 * The native TUN addon (lb/native/tun.c), loaded once per thread. Built by `npm install`
 * (node-gyp) into build/Release.
 */
import { join } from 'node:path';

export interface TunAddon {
  /**
   * Attaches one more queue of multi-queue TUN device `name` (created on first call). offload:
   * IFF_VNET_HDR + checksum/TSO offloads — every packet carries a virtio_net_hdr (P.VNET_HLEN).
   */
  openQueue(name: string, offload?: boolean): number;
  closeFd(fd: number): number;
  /**
   * Reads up to maxPkts packets, packet i at buf[i*slot], length lens[i]; 0 on timeout, −errno on
   * error. pollFirst: wait before the first read (the last call found the queue empty).
   */
  readBatch(fd: number, buf: Uint8Array, lens: Int32Array, maxPkts: number, slot: number, timeoutMs: number, pollFirst?: boolean): number;
  /** Writes count packets buf[offs[i], offs[i]+lens[i]); returns packets written, −errno on error; lens[i] of an unwritten one becomes 0. */
  writeBatch(fd: number, buf: Uint8Array, offs: Int32Array, lens: Int32Array, count: number): number;
  /** Non-blocking raw socket receiving IP protocol `protocol`: IPv4 whole packets, IPv6 payloads. */
  /** With `peer`: connected, so only packets from that address are received. */
  openRaw(protocol: number, family?: 4 | 6, peer?: string): number;
}

let addon: TunAddon | undefined;

export function tunAddon(): TunAddon {
  if (!addon) {
    // dist/lb/tun.js → <root>/build/Release/uvs_tun.node
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    addon = require(join(__dirname, '..', '..', 'build', 'Release', 'uvs_tun.node')) as TunAddon;
  }
  return addon;
}
