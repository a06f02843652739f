/**
 * Flow sampling, worker side (Katran's flow_debug, Cilium's recorder): picks packets as the
 * control thread asks — 1 in N, or those of one flow — and copies each, before it is processed,
 * into this worker's capture ring with the decision the processor then takes. Layout and the
 * ring protocol: conntrack/layout.ts CAP_*. The worker calls nothing here unless CAP_ON ≠ 0
 * (one load per batch); while on, no allocation, no strings, and a full ring is an overrun
 * (counted), never a wait.
 */
import * as L from '../conntrack/layout';
import * as P from '../net/packet';

export class CaptureTap {
  private readonly hdr: Int32Array;
  private readonly wr: Int32Array;
  private readonly bytes: Uint8Array;
  private readonly id: number;
  private readonly wordBase: number;
  private count = 0;
  private gen = 0;
  /** Slot the current packet's record is being written to, −1 = not captured. */
  private slot = -1;

  constructor(sab: SharedArrayBuffer, workerId: number) {
    this.id = workerId;
    this.hdr = new Int32Array(sab, 0, L.CAP_HDR_WORDS);
    this.wordBase = L.capWorkerOffset(workerId) >> 2;
    this.wr = new Int32Array(sab);
    this.bytes = new Uint8Array(sab);
  }

  /** CAP_ON, loaded once per batch: 0 = off (the worker then skips begin/end entirely). */
  on(): number {
    const g = Atomics.load(this.hdr, L.CAP_ON);
    if (g !== this.gen) {
      this.gen = g;
      this.count = 0;
    }
    return g;
  }

  /**
   * Before processing b[off, off+len): decides whether this packet is captured and, if so, copies
   * its first CAP_SNAPLEN bytes into the next free record. Returns true when captured.
   */
  begin(b: Uint8Array, off: number, len: number, nowMs: number): boolean {
    this.slot = -1;
    const h = this.hdr;
    if (h[L.CAP_MODE] === L.CAP_MODE_SAMPLE) {
      if (++this.count < h[L.CAP_SAMPLE_N]!) return false;
      this.count = 0;
    } else if (!this.matches(b, off, len)) {
      return false;
    }
    const w = this.wr;
    const wb = this.wordBase;
    const tail = w[wb + L.CAPW_TAIL]!;
    if (((tail - Atomics.load(w, wb + L.CAPW_HEAD)) | 0) >= L.CAP_SLOTS) {
      Atomics.add(w, wb + L.CAPW_OVERRUNS, 1);
      return false;
    }
    const slot = tail & (L.CAP_SLOTS - 1);
    const at = L.capSlotOffset(this.id, slot);
    const r = at >> 2;
    const caplen = len < L.CAP_SNAPLEN ? len : L.CAP_SNAPLEN;
    w[r + L.CAPR_LEN] = len;
    w[r + L.CAPR_CAPLEN] = caplen;
    w[r + L.CAPR_TIME_HI] = Math.floor(nowMs / 4294967296);
    w[r + L.CAPR_TIME_LO] = nowMs >>> 0;
    const x = this.bytes;
    const d = at + L.CAPR_WORDS * 4;
    for (let i = 0; i < caplen; i++) x[d + i] = b[off + i]!;
    this.slot = slot;
    return true;
  }

  /** After processing: the decision, then the record is published. */
  end(verdict: number, drop: number, svc: number, rs: number, state: number, proto: number): void {
    if (this.slot < 0) return;
    const w = this.wr;
    const r = L.capSlotOffset(this.id, this.slot) >> 2;
    w[r + L.CAPR_VERDICT] = verdict;
    w[r + L.CAPR_DROP] = drop;
    w[r + L.CAPR_SVC] = svc;
    w[r + L.CAPR_RS] = rs;
    w[r + L.CAPR_STATE] = state;
    w[r + L.CAPR_PROTO] = proto;
    const wb = this.wordBase;
    Atomics.store(w, wb + L.CAPW_TAIL, (w[wb + L.CAPW_TAIL]! + 1) | 0);
    this.slot = -1;
  }

  /**
   * The flow filter: endpoints A and B (address and/or port, each part a wildcard when unset) in
   * either direction, IPv4 or IPv6 (no extension headers), TCP/UDP/SCTP ports; other protocols
   * match on addresses only.
   */
  private matches(b: Uint8Array, off: number, len: number): boolean {
    const h = this.hdr;
    if (len < 1) return false;
    const v = b[off]! >> 4;
    let proto: number, l4: number, src: number, dst: number, n: number;
    if (v === 4) {
      if (len < P.IP_MIN_HLEN) return false;
      proto = b[off + P.IP_PROTO]!;
      l4 = off + ((b[off]! & 15) << 2);
      src = off + P.IP_SRC;
      dst = src + 4;
      n = 1;
    } else if (v === 6) {
      if (len < P.IP6_HLEN) return false;
      proto = b[off + P.IP6_NEXT]!;
      l4 = off + P.IP6_HLEN;
      src = off + P.IP6_SRC;
      dst = src + 16;
      n = 4;
    } else {
      return false;
    }
    const fam = h[L.CAP_F_FAMILY]!;
    if (fam !== 0 && fam !== v) return false;
    const fp = h[L.CAP_F_PROTO]!;
    if (fp !== 0 && fp !== proto) return false;
    const ported = (proto === P.IPPROTO_TCP || proto === P.IPPROTO_UDP || proto === P.IPPROTO_SCTP) && l4 + 4 <= off + len;
    const sport = ported ? P.u16(b, l4) : -2;
    const dport = ported ? P.u16(b, l4 + 2) : -2;
    return (
      (this.side(b, src, n, sport, L.CAP_F_HAS_A, L.CAP_F_ADDR_A, L.CAP_F_PORT_A) &&
        this.side(b, dst, n, dport, L.CAP_F_HAS_B, L.CAP_F_ADDR_B, L.CAP_F_PORT_B)) ||
      (this.side(b, dst, n, dport, L.CAP_F_HAS_A, L.CAP_F_ADDR_A, L.CAP_F_PORT_A) &&
        this.side(b, src, n, sport, L.CAP_F_HAS_B, L.CAP_F_ADDR_B, L.CAP_F_PORT_B))
    );
  }

  /** Whether the address of n words at b[at] and port match one endpoint of the filter. */
  private side(b: Uint8Array, at: number, n: number, port: number, hasWord: number, addrWord: number, portWord: number): boolean {
    const h = this.hdr;
    const fport = h[portWord]!;
    if (fport >= 0 && fport !== port) return false;
    if (h[hasWord] === 0) return true;
    const first = addrWord + 4 - n;
    for (let i = 0; i < n; i++) if (P.u32(b, at + 4 * i) !== h[first + i]) return false;
    return true;
  }
}
