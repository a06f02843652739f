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

/**
 * Estimator state per counter block, EST_WORDS doubles at (block index) × EST_WORDS: the last five
 * counters (RSC_* order), then the scaled averages (cps, inpps, outpps, inbps, outbps).
 */
const EST_WORDS = 10;
const EST_AVG = 5;

export class StatsReader {
  private readonly regions: Float64Array[];
  private readonly maxRealServers: number;
  /**
   * Zero points (ipvsadm -Z and slot reuse), per word: subtracted from the sums. Typed arrays, not
   * maps: at 10,000 services × 10 servers the estimator reads 550,000 words every 2 s, and a map
   * lookup per word made a round ~250 ms of the control thread (perf/SCALE.md).
   */
  private readonly zero: Float64Array;
  /** Rate estimator state (see estimate()), by block index; `known` 0 = not seen since its start or zero. */
  private readonly est: Float64Array;
  private readonly known: Uint8Array;
  /** The estimator round that last saw each block: blocks a round did not list are forgotten. */
  private readonly seenRound: Uint32Array;
  private round = 0;

  constructor(regions: SharedArrayBuffer[], maxRealServers: number) {
    this.regions = regions.map((r) => new Float64Array(r));
    this.maxRealServers = maxRealServers;
    const words = this.regions[0]?.length ?? L.W_GLOBAL_WORDS;
    this.zero = new Float64Array(words);
    const blocks = Math.max(0, Math.ceil((words - L.W_GLOBAL_WORDS) / L.RSC_WORDS));
    this.est = new Float64Array(blocks * EST_WORDS);
    this.known = new Uint8Array(blocks);
    this.seenRound = new Uint32Array(blocks);
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
    return s - this.zero[i]!;
  }

  /** A counter block's index in the estimator state. */
  private static blockOf(base: number): number {
    return (base - L.W_GLOBAL_WORDS) / L.RSC_WORDS;
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
      this.zero[base + k] = s;
    }
    this.known[StatsReader.blockOf(base)] = 0; // ip_vs_zero_estimator: the rates start again from zero
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
  estimate(bases: Iterable<number>): void {
    for (const _ of this.estimateSteps(bases));
  }

  /**
   * estimate() as steps of 1,000 blocks (control/slices.ts runSliced): at 10,000 services × 10
   * servers one tick is 110,000 blocks, ~30 ms of the control thread. Each block's rate still
   * spans the period between two of its own visits. `bases` may be read lazily.
   */
  *estimateSteps(bases: Iterable<number>): Generator<void> {
    const round = ++this.round;
    const e = this.est;
    let n = 0;
    for (const base of bases) {
      if (++n % 1000 === 0) yield;
      const b = StatsReader.blockOf(base);
      this.seenRound[b] = round;
      const conns = this.word(base + L.RSC_CONNS);
      const inPkts = this.word(base + L.RSC_INPKTS);
      const outPkts = this.word(base + L.RSC_OUTPKTS);
      const inBytes = this.word(base + L.RSC_INBYTES);
      const outBytes = this.word(base + L.RSC_OUTBYTES);
      const o = b * EST_WORDS;
      if (
        this.known[b] === 0 ||
        conns < e[o]! ||
        inPkts < e[o + 1]! ||
        outPkts < e[o + 2]! ||
        inBytes < e[o + 3]! ||
        outBytes < e[o + 4]!
      ) {
        this.known[b] = 1;
        e[o] = conns;
        e[o + 1] = inPkts;
        e[o + 2] = outPkts;
        e[o + 3] = inBytes;
        e[o + 4] = outBytes;
        e.fill(0, o + EST_AVG, o + EST_WORDS);
        continue;
      }
      e[o + EST_AVG] = ewma(e[o + EST_AVG]!, (conns - e[o]!) * 512);
      e[o + EST_AVG + 1] = ewma(e[o + EST_AVG + 1]!, (inPkts - e[o + 1]!) * 512);
      e[o + EST_AVG + 2] = ewma(e[o + EST_AVG + 2]!, (outPkts - e[o + 2]!) * 512);
      e[o + EST_AVG + 3] = ewma(e[o + EST_AVG + 3]!, (inBytes - e[o + 3]!) * 16);
      e[o + EST_AVG + 4] = ewma(e[o + EST_AVG + 4]!, (outBytes - e[o + 4]!) * 16);
      e[o] = conns;
      e[o + 1] = inPkts;
      e[o + 2] = outPkts;
      e[o + 3] = inBytes;
      e[o + 4] = outBytes;
    }
    // Blocks this round did not list (their service or server is gone): forgotten.
    for (let b = 0; b < this.known.length; b++) if (this.seenRound[b] !== round) this.known[b] = 0;
  }

  /** The estimator's read-out (ip_vs_read_estimator): per second, rounded as the kernel does. */
  rates(base: number): FlowRates {
    const b = StatsReader.blockOf(base);
    if (this.known[b] !== 1) return { cps: 0, inPps: 0, outPps: 0, inBps: 0, outBps: 0 };
    const e = this.est;
    const o = b * EST_WORDS + EST_AVG;
    const pps = (v: number) => Math.floor((v + 0x1ff) / 1024);
    const bps = (v: number) => Math.floor((v + 0xf) / 32);
    return { cps: pps(e[o]!), inPps: pps(e[o + 1]!), outPps: pps(e[o + 2]!), inBps: bps(e[o + 3]!), outBps: bps(e[o + 4]!) };
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
