/**
 * Reads the workers' counters (conntrack/layout.ts, one Float64 region per worker, one writer
 * each) and sums them at read time — the only way metrics flow: workers bump, readers sum.
 */
import * as L from '../conntrack/layout';

export interface FlowStats {
  conns: number;
  inPkts: number;
  outPkts: number;
  inBytes: number;
  outBytes: number;
}

export class StatsReader {
  private readonly regions: Float64Array[];
  private readonly maxRealServers: number;
  /** Zero points (ipvsadm -Z and slot reuse): subtracted from the sums. */
  private readonly zero = new Map<number, number>();

  constructor(regions: SharedArrayBuffer[], maxRealServers: number) {
    this.regions = regions.map((r) => new Float64Array(r));
    this.maxRealServers = maxRealServers;
  }

  word(i: number): number {
    let s = 0;
    for (const r of this.regions) s += r[i]!;
    return s - (this.zero.get(i) ?? 0);
  }

  private block(base: number): FlowStats {
    return {
      conns: this.word(base + L.RSC_CONNS),
      inPkts: this.word(base + L.RSC_INPKTS),
      outPkts: this.word(base + L.RSC_OUTPKTS),
      inBytes: this.word(base + L.RSC_INBYTES),
      outBytes: this.word(base + L.RSC_OUTBYTES),
    };
  }

  realServer(slot: number): FlowStats {
    return this.block(L.rsCounterBase(slot));
  }

  service(slot: number): FlowStats {
    return this.block(L.svcCounterBase(this.maxRealServers, slot));
  }

  /** Makes the current values of a block the new zero (a fresh slot, or -Z). */
  zeroBlock(base: number): void {
    for (let k = 0; k < L.RSC_WORDS; k++) {
      let s = 0;
      for (const r of this.regions) s += r[base + k]!;
      this.zero.set(base + k, s);
    }
  }
  zeroRealServer(slot: number): void {
    this.zeroBlock(L.rsCounterBase(slot));
  }
  zeroService(slot: number): void {
    this.zeroBlock(L.svcCounterBase(this.maxRealServers, slot));
  }

  global(): Record<string, number> {
    return {
      rxPackets: this.word(L.C_RX_PACKETS),
      rxBytes: this.word(L.C_RX_BYTES),
      txPackets: this.word(L.C_TX_PACKETS),
      txBytes: this.word(L.C_TX_BYTES),
      txErrors: this.word(L.C_TX_ERRORS),
      batches: this.word(L.C_BATCHES),
      connsNew: this.word(L.C_CONNS_NEW),
    };
  }

  drops(): Record<string, number> {
    const out: Record<string, number> = {};
    L.DROP_NAMES.forEach((n, i) => (out[n] = this.word(L.C_DROP_BASE + i)));
    return out;
  }

  perWorker(): { rxPackets: number; txPackets: number; batches: number }[] {
    return this.regions.map((r) => ({ rxPackets: r[L.C_RX_PACKETS]!, txPackets: r[L.C_TX_PACKETS]!, batches: r[L.C_BATCHES]! }));
  }
}
