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
  /**
   * Writes the wall clock (ms, whole, as Date.now()) into f64[i]. The worker's clock: Date.now()
   * allocates a heap number on every call, which made a busy worker scavenge.
   */
  clockInto(f64: Float64Array, i: number): void;
  /** Writes count packets buf[offs[i], offs[i]+lens[i]); returns packets written, −errno on error; lens[i] of an unwritten one becomes 0. */
  writeBatch(fd: number, buf: Uint8Array, offs: Int32Array, lens: Int32Array, count: number): number;
  /** Non-blocking raw socket receiving IP protocol `protocol`: IPv4 whole packets, IPv6 payloads. */
  /** With `peer`: connected, so only packets from that address are received. */
  openRaw(protocol: number, family?: 4 | 6, peer?: string): number;
  /** Raw socket (IPPROTO_RAW: the caller's IP header) whose packets carry fwmark `mark`. */
  openSend(family: 4 | 6, mark: number): number;
  /** Sends the whole IP packet buf[0, len) to the destination its header names; bytes or −errno. */
  sendPacket(fd: number, buf: Uint8Array, len: number): number;

  // The io_uring path (lb/native/uring.c): one ring per worker, a multishot read kept armed on the
  // queue, writes and the wait for the next packets in one io_uring_enter.
  /** '' when this process may use the io_uring path here, else why not (seccomp, sysctl, kernel). */
  uringProbe(): string;
  /**
   * A ring on queue fd whose receive buffers are buf's first nbufs slots of `slot` bytes; out
   * slot i (at nbufs*slot + i*outSlot) belongs to receive slot i. lens/slots (≥ nbufs each) get
   * each wait's packets; io (≥ 3) accumulates write results: packets, bytes, errors; with a 4th
   * element, each uringWait leaves the wall clock there (as clockInto). Throws UVS_ERR_TUN with
   * the reason when the ring cannot be set up.
   */
  uringOpen(
    fd: number,
    buf: Uint8Array,
    lens: Int32Array,
    slots: Int32Array,
    io: Float64Array,
    slot: number,
    nbufs: number,
    outSlot: number,
  ): UringHandle;
  /**
   * Gives back the slots of the last wait, submits queued writes and, with `wait`, waits up to
   * timeoutMs for packets (else only takes those there). Packet k is in slot slots[k], lens[k]
   * bytes. Returns packets, 0 on timeout, −errno on a device error.
   */
  uringWait(h: UringHandle, timeoutMs: number, wait: boolean): number;
  /** Queues writes of buf[offs[i], offs[i]+lens[i]) (sent by the next uringWait or uringSubmit). */
  uringWrite(h: UringHandle, offs: Int32Array, lens: Int32Array, count: number): number;
  /** Submits queued writes without waiting. */
  uringSubmit(h: UringHandle): number;
  /** Cancels the read, waits for writes in flight, frees the ring (also done when the thread ends). */
  uringClose(h: UringHandle): number;

  /**
   * Attaches the queue-steering eBPF program (lb/native/steer.c, docs/steering.md) to the device
   * of queue fd, its hash keyed with (k0, k1), its VIP ranges and pool addresses from `table`
   * (lb/steering.ts steeringTable): '' when attached, else why not (the device then keeps its
   * automatic flow steering).
   */
  steerAttach(fd: number, k0: number, k1: number, table: Uint32Array): string;
  /** The same program, loaded but not attached: its fd (tests and perf, for steerRun). Throws why not. */
  steerLoad(k0: number, k1: number, table: Uint32Array): number;
  /** [value, ns]: the program progFd run `repeat` times by the kernel on the IP packet (BPF_PROG_TEST_RUN). */
  steerRun(progFd: number, packet: Uint8Array, repeat: number): [number, number];
}

/** How the device picks a packet's queue: `dataplane.steering` (docs/steering.md). */
export type SteeringMode = 'auto' | 'ebpf' | 'automq';
export type SteeringPath = 'ebpf' | 'automq';

/** An io_uring ring of one worker (opaque). */
export type UringHandle = { readonly __uring: unique symbol };

/** The worker I/O paths: `dataplane.io`. auto = io_uring where uringProbe() allows it, else poll. */
export type IoMode = 'auto' | 'io_uring' | 'poll';
export type IoPath = 'io_uring' | 'poll';

let addon: TunAddon | undefined;

export function tunAddon(): TunAddon {
  if (!addon) {
    // dist/lb/tun.js → <root>/build/Release/uvs_tun.node
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    addon = require(join(__dirname, '..', '..', 'build', 'Release', 'uvs_tun.node')) as TunAddon;
  }
  return addon;
}
