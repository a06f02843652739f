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

/** Per second, as ipvsadm --rate prints them. */
export interface FlowRates {
  cps: number;
  inPps: number;
  outPps: number;
  inBps: number;
  outBps: number;
}

/** The TUN device's traffic, summed over the workers. */
export interface PacketCounters {
  rxPackets: number;
  rxBytes: number;
  txPackets: number;
  txBytes: number;
  /** Packets the device would not take (queue full). */
  txErrors: number;
  /**
   * Packets written beyond one per packet handled: GSO segments after the first (the tunnel), PROXY
   * protocol header segments ahead of data. txPackets + txErrors = packets forwarded + generated
   * (`generated.*.sent`) + txExtra.
   */
  txExtra: number;
  batches: number;
  connsNew: number;
}

/** The kernel's estimator period (ip_vs_est.c: 2 s). */
export const RATE_PERIOD_MS = 2000;

/** Estimator state of one counter block: the last counters and the scaled averages. */
interface Estimate {
  last: FlowStats;
  cps: number;
  inpps: number;
  outpps: number;
  inbps: number;
  outbps: number;
}

export class StatsReader {
  private readonly regions: Float64Array[];
  private readonly maxRealServers: number;
  /** Zero points (ipvsadm -Z and slot reuse): subtracted from the sums. */
  private readonly zero = new Map<number, number>();
  /** Rate estimator state per counter block (see estimate()). */
  private readonly est = new Map<number, Estimate>();

  constructor(regions: SharedArrayBuffer[], maxRealServers: number) {
    this.regions = regions.map((r) => new Float64Array(r));
    this.maxRealServers = maxRealServers;
  }

  /** The largest value of word i among the workers (gauges such as L.C_CHAIN_MAX). */
  maxWord(i: number): number {
    let m = 0;
    for (const r of this.regions) if (r[i]! > m) m = r[i]!;
    return m;
  }

  /** Generated packets by kind and result (L.C_GEN_BASE): { reset: { sent, bad_destination, rate_limited }, … }. */
  generated(): Record<string, Record<string, number>> {
    const out: Record<string, Record<string, number>> = {};
    L.GEN_KIND_NAMES.forEach((k, i) => {
      const r: Record<string, number> = {};
      L.GEN_RESULT_NAMES.forEach((n, j) => (r[n] = this.word(L.C_GEN_BASE + i * L.GEN_RESULTS + j)));
      out[k] = r;
    });
    return out;
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
    this.est.delete(base); // ip_vs_zero_estimator: the rates start again from zero
  }
  zeroRealServer(slot: number): void {
    this.zeroBlock(L.rsCounterBase(slot));
  }
  zeroService(slot: number): void {
    this.zeroBlock(L.svcCounterBase(this.maxRealServers, slot));
  }

  // ── rate estimator (ipvsadm --rate) ───────────────────────────────────────────────────────
  /**
   * One tick of the kernel's estimator (net/netfilter/ipvs/ip_vs_est.c), run every
   * RATE_PERIOD_MS over the blocks of the listed services and real servers: per 2 s,
   * rate = Δconns·2^9 (Δpkts likewise; Δbytes·2^4), i.e. per second scaled by 2^10 (2^5);
   * avg += (rate − avg) >> 2 (EWMA, weight 1/4). A block seen for the first time, or zeroed since
   * (-Z, slot reuse), starts from its current counters with rates 0; blocks not listed are forgotten.
   */
  estimate(bases: number[]): void {
    for (const _ of this.estimateSteps(bases));
  }

  /**
   * estimate() as steps of 1,000 blocks (control/slices.ts runSliced): at 10,000 services × 10
   * servers one tick is 110,000 blocks, ~150–300 ms of the control thread in one piece. Each
   * block's rate still spans the period between two of its own visits.
   */
  *estimateSteps(bases: number[]): Generator<void> {
    const seen = new Set(bases);
    let n = 0;
    for (const base of bases) {
      if (++n % 1000 === 0) yield;
      const conns = this.word(base + L.RSC_CONNS);
      const inPkts = this.word(base + L.RSC_INPKTS);
      const outPkts = this.word(base + L.RSC_OUTPKTS);
      const inBytes = this.word(base + L.RSC_INBYTES);
      const outBytes = this.word(base + L.RSC_OUTBYTES);
      const e = this.est.get(base);
      const last = e?.last;
      if (
        !e ||
        !last ||
        conns < last.conns ||
        inPkts < last.inPkts ||
        outPkts < last.outPkts ||
        inBytes < last.inBytes ||
        outBytes < last.outBytes
      ) {
        this.est.set(base, { last: { conns, inPkts, outPkts, inBytes, outBytes }, cps: 0, inpps: 0, outpps: 0, inbps: 0, outbps: 0 });
        continue;
      }
      e.cps = ewma(e.cps, (conns - last.conns) * 512);
      e.inpps = ewma(e.inpps, (inPkts - last.inPkts) * 512);
      e.outpps = ewma(e.outpps, (outPkts - last.outPkts) * 512);
      e.inbps = ewma(e.inbps, (inBytes - last.inBytes) * 16);
      e.outbps = ewma(e.outbps, (outBytes - last.outBytes) * 16);
      last.conns = conns;
      last.inPkts = inPkts;
      last.outPkts = outPkts;
      last.inBytes = inBytes;
      last.outBytes = outBytes;
    }
    for (const b of this.est.keys()) if (!seen.has(b)) this.est.delete(b);
  }

  /** The estimator's read-out (ip_vs_read_estimator): per second, rounded as the kernel does. */
  rates(base: number): FlowRates {
    const e = this.est.get(base);
    if (!e) return { cps: 0, inPps: 0, outPps: 0, inBps: 0, outBps: 0 };
    const pps = (v: number) => Math.floor((v + 0x1ff) / 1024);
    const bps = (v: number) => Math.floor((v + 0xf) / 32);
    return { cps: pps(e.cps), inPps: pps(e.inpps), outPps: pps(e.outpps), inBps: bps(e.inbps), outBps: bps(e.outbps) };
  }
  serviceBase(slot: number): number {
    return L.svcCounterBase(this.maxRealServers, slot);
  }
  realServerBase(slot: number): number {
    return L.rsCounterBase(slot);
  }

  global(): PacketCounters {
    return {
      rxPackets: this.word(L.C_RX_PACKETS),
      rxBytes: this.word(L.C_RX_BYTES),
      txPackets: this.word(L.C_TX_PACKETS),
      txBytes: this.word(L.C_TX_BYTES),
      txErrors: this.word(L.C_TX_ERRORS),
      txExtra: this.word(L.C_TX_EXTRA),
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

/** The estimator's EWMA, weight 1/4 (s64 >> 2). */
function ewma(avg: number, rate: number): number {
  return avg + Math.floor((rate - avg) / 4);
}
