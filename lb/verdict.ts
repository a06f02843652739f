/**
 * The contract between the packet path and whoever feeds it — a worker (lb/worker.ts), the tests
 * (test/helpers/processor.ts), the benchmark (perf/packet-path.ts): all call
 *
 *   proc.process(buf, off, len, out) → DROP | FORWARD | REPLY
 *
 * with an OutRegion they own, allocated once and reused for every packet:
 *   DROP     the packet is consumed (counted by reason in the worker's counters, or parked for a
 *            Redis lookup);
 *   FORWARD  buf[off, off+len) was rewritten in place: write it back to the device (with offloads,
 *            its virtio header at off − VNET_HLEN, unchanged);
 *   REPLY    out.count packets were built in out.buf at out.offs[i], out.lens[i] bytes each, virtio
 *            header included: write those instead (a generated answer — ICMP error, TCP RST —, an
 *            encapsulated packet, a GSO packet's segments, a PROXY header before a segment).
 * The caller sets the region before each packet; process() sets the rest for every packet.
 */

export const DROP = 0;
export const FORWARD = 1;
export const REPLY = 2;

/** Most packets one input can turn into (a GSO super-packet segmented for the tunnel). */
export const MAX_OUT = 128;

export class OutRegion {
  /** Where generated packets are built (a worker's own packet buffer, its output slots). */
  readonly buf: Uint8Array;
  /**
   * Set by the caller: the first generated packet's IP header goes at `off` (with offloads its
   * virtio header just before), and nothing may be written at or past `end`.
   */
  off = 0;
  end = 0;
  /** REPLY: how many packets, and each one's offset and length (virtio header included). */
  count = 0;
  readonly offs = new Int32Array(MAX_OUT);
  readonly lens = new Int32Array(MAX_OUT);
  /**
   * What the packet got, for flow sampling (lb/capture.ts): its drop or answer reason
   * (conntrack/layout.ts Drop, −1 = none), the service and real-server slots it was counted on,
   * and the state and E_PROTO of the connection entry it touched (−1 and 0 = none).
   */
  reason = -1;
  svc = -1;
  rs = -1;
  state = -1;
  proto = 0;

  constructor(buf: Uint8Array) {
    this.buf = buf;
    this.end = buf.length;
  }
}
