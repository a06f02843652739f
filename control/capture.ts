/**
 * Flow sampling, control side (Katran's flow_debug, Cilium's recorder): starts a bounded capture
 * in the workers (lb/capture.ts), drains their rings every CAP_DRAIN_MS and writes the records as
 * a pcap file (LINKTYPE_RAW: IPv4 and IPv6 packets without a link header, as tcpdump -i uvs0
 * would see them arrive) or as one JSON line per packet with the decision taken. One capture at
 * a time; bounded by `seconds` (≤ CAPTURE_MAX_SECONDS) and `maxPackets` (≤ CAPTURE_MAX_PACKETS),
 * so its output stays below ~165 MB. Ring layout: conntrack/layout.ts CAP_*.
 *
 * The control thread keeps answering meanwhile (control/slices.ts): each drain's records are
 * formatted as they arrive, in slices, and kept once, as their output bytes; at the end the
 * workers' lists (each in time order) are merged by time, in slices, into ~256 KB chunks that the
 * answer streams. A capture at its limits used to hold the thread 1–1.3 s at its end (sort, one
 * Buffer.concat, JSON) and keep ~0.5 GB (records, their pcap copies, the whole body).
 */
import * as L from '../conntrack/layout';
import { SCTP_STATE_NAMES } from '../conntrack/sctp-state';
import { TCP_STATE_NAMES } from '../conntrack/state';
import { formatIPv4, formatIPv6, parseIPv4, parseIPv6 } from '../net/addr';
import { IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../net/packet';
import { PROTO_NUMBER } from '../net/proto';
import { DROP, FORWARD } from '../lb/verdict';
import { UvsError } from './errors';
import { Slicer } from './slices';
import { at, fail, isObj, leaf, obj, oneOf, opt, run, type LeafOpts, type Out, type Schema } from './schema';

export const CAPTURE_MAX_SECONDS = 300;
export const CAPTURE_MAX_PACKETS = 100_000;
/** The answer's chunk size: records are joined into buffers of about this many bytes. */
const OUT_CHUNK = 256 << 10;
/** LINKTYPE_RAW (tcpdump.org linktypes): the packet begins with its IPv4 or IPv6 header. */
export const LINKTYPE_RAW = 101;

export interface CaptureResult {
  format: 'pcap' | 'jsonl';
  /** The output in order, in chunks of about OUT_CHUNK bytes (streamed by the API). */
  body: Buffer[];
  bytes: number;
  packets: number;
  /** Records the workers could not hand over (ring full). */
  overruns: number;
}

/** One captured packet as the rings hold it. */
export interface CaptureRecord {
  worker: number;
  timeMs: number;
  len: number;
  data: Buffer;
  verdict: number;
  drop: number;
  svc: number;
  rs: number;
  state: number;
  proto: number;
}

const PROTOS: Record<NonNullable<FlowFilter['protocol']>, number> = { ...PROTO_NUMBER, icmp: IPPROTO_ICMP, icmpv6: IPPROTO_ICMPV6 };

/** Refuses a non-object with the capture's own words ("must be an object"), then parses it. */
function object<T>(s: Schema<T, false>, absent: 'empty' | 'refused'): Schema<T, false> {
  return {
    ...s,
    parse(v, path, scope) {
      if (!isObj(v) && !(absent === 'empty' && (v === undefined || v === null))) fail(path, 'must be an object');
      return s.parse(v, path, scope);
    },
  };
}

/** A whole number in [min, max] (the capture's message names the range). */
const count = (min: number, max: number, o: LeafOpts<number> = {}) =>
  leaf(
    { type: 'integer', minimum: min, maximum: max },
    (x, path) => {
      if (typeof x !== 'number' || !Number.isInteger(x) || x < min || x > max)
        fail(path, `must be an integer from ${min} to ${max}, got ${JSON.stringify(x)}`);
      return x;
    },
    o,
  );

/** An IPv4 or IPv6 address, kept as written (the filter matches the parsed bytes). */
const ipAddr = (doc: string) =>
  leaf(
    { type: 'string', minLength: 1 },
    (v, path) => {
      if (typeof v !== 'string' || (parseIPv4(v) === null && parseIPv6(v) === null))
        fail(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(v)}`);
      return v;
    },
    { doc },
  );

const FLOW_FIELDS = ['protocol', 'address', 'port', 'peer', 'peerPort'] as const;
const FLOW_PROTOCOLS = ['tcp', 'udp', 'sctp', 'icmp', 'icmpv6'] as const;

/** A flow filter: every field given must match; at least one is given. */
const FLOW = object(
  obj(
    {
      protocol: opt(oneOf(FLOW_PROTOCOLS, { strict: true, msg: () => `must be one of ${FLOW_PROTOCOLS.join(', ')}` })),
      address: opt(ipAddr("One endpoint's address (the client's, say)")),
      port: opt(count(0, 65535, { doc: "One endpoint's port" })),
      peer: opt(ipAddr('The other endpoint (the VIP or a real server), either direction')),
      peerPort: opt(count(0, 65535, { doc: "The other endpoint's port" })),
    },
    {
      mapping: true,
      check: (f, path) => {
        if (f.address && f.peer && f.address.includes(':') !== f.peer.includes(':'))
          fail(at(path, 'peer'), 'address and peer must be of one family');
        if (FLOW_FIELDS.every((k) => f[k] === undefined)) fail(path, `needs at least one of ${FLOW_FIELDS.join(', ')}`);
      },
    },
  ),
  'refused',
);

/** POST /v1/capture: 1 in `sample` packets (per worker) or one `flow`, bounded in time and packets. */
export const CAPTURE = object(
  obj(
    {
      sample: opt(count(1, 0x7fffffff, { doc: '1 in N packets, per worker' })),
      flow: opt(FLOW),
      seconds: count(1, CAPTURE_MAX_SECONDS, { default: 10, doc: 'The capture ends after this long' }),
      maxPackets: count(1, CAPTURE_MAX_PACKETS, { default: 1000, doc: 'or after this many packets' }),
      format: oneOf(['pcap', 'jsonl'], {
        strict: true,
        default: 'pcap',
        msg: (v) => `must be pcap or jsonl, got ${JSON.stringify(v)}`,
        doc: 'pcap (LINKTYPE_RAW) or one JSON line per packet with the decision taken',
      }),
    },
    {
      doc: 'Give either sample or flow',
      check: (c, path) => {
        if ((c.sample === undefined) === (c.flow === undefined)) fail(path, 'give either sample (1 in N packets) or flow (a flow filter)');
      },
    },
  ),
  'empty',
);

export type CaptureRequest = Out<typeof CAPTURE>;
export type FlowFilter = NonNullable<CaptureRequest['flow']>;

/** Validates a POST /v1/capture body (defaults: 10 s, 1000 packets, pcap); the route runs the same schema. */
export function validateCaptureRequest(v: unknown): CaptureRequest {
  return run(CAPTURE, v, 'capture', 'UVS_ERR_API_BAD_REQUEST');
}

/** pcap global header (microsecond timestamps, little-endian). */
export function pcapHeader(snaplen = L.CAP_SNAPLEN): Buffer {
  const h = Buffer.alloc(24);
  h.writeUInt32LE(0xa1b2c3d4, 0);
  h.writeUInt16LE(2, 4);
  h.writeUInt16LE(4, 6);
  h.writeInt32LE(0, 8);
  h.writeUInt32LE(0, 12);
  h.writeUInt32LE(snaplen, 16);
  h.writeUInt32LE(LINKTYPE_RAW, 20);
  return h;
}

/** One pcap record: header (ts_sec, ts_usec, incl_len, orig_len) and the bytes kept. */
export function pcapRecord(timeMs: number, origLen: number, data: Uint8Array): Buffer {
  const r = Buffer.alloc(16 + data.length);
  r.writeUInt32LE(Math.floor(timeMs / 1000), 0);
  r.writeUInt32LE((timeMs % 1000) * 1000, 4);
  r.writeUInt32LE(data.length, 8);
  r.writeUInt32LE(origLen, 12);
  r.set(data, 16);
  return r;
}

/** Reads every published record of worker w's ring and frees the slots. */
export function drainRing(sab: SharedArrayBuffer, w: number, into: CaptureRecord[]): void {
  const a = new Int32Array(sab);
  const wb = L.capWorkerOffset(w) >> 2;
  const tail = Atomics.load(a, wb + L.CAPW_TAIL);
  let head = a[wb + L.CAPW_HEAD]!;
  for (; head !== tail; head = (head + 1) | 0) {
    const at = L.capSlotOffset(w, head & (L.CAP_SLOTS - 1));
    const r = at >> 2;
    const caplen = a[r + L.CAPR_CAPLEN]!;
    into.push({
      worker: w,
      timeMs: a[r + L.CAPR_TIME_HI]! * 4294967296 + (a[r + L.CAPR_TIME_LO]! >>> 0),
      len: a[r + L.CAPR_LEN]!,
      data: Buffer.from(new Uint8Array(sab, at + L.CAPR_WORDS * 4, caplen)),
      verdict: a[r + L.CAPR_VERDICT]!,
      drop: a[r + L.CAPR_DROP]!,
      svc: a[r + L.CAPR_SVC]!,
      rs: a[r + L.CAPR_RS]!,
      state: a[r + L.CAPR_STATE]!,
      proto: a[r + L.CAPR_PROTO]!,
    });
  }
  Atomics.store(a, wb + L.CAPW_HEAD, head);
}

function overruns(sab: SharedArrayBuffer, workers: number): number {
  const a = new Int32Array(sab);
  let n = 0;
  for (let w = 0; w < workers; w++) n += Atomics.load(a, (L.capWorkerOffset(w) >> 2) + L.CAPW_OVERRUNS);
  return n;
}

/** Writes the filter into the capture header (big-endian address words, IPv4 in the last). */
function writeFilter(h: Int32Array, f: FlowFilter): void {
  h[L.CAP_F_PROTO] = f.protocol ? PROTOS[f.protocol]! : 0;
  const fam = f.address ?? f.peer;
  h[L.CAP_F_FAMILY] = fam === undefined ? 0 : fam.includes(':') ? 6 : 4;
  h[L.CAP_F_PORT_A] = f.port ?? -1;
  h[L.CAP_F_PORT_B] = f.peerPort ?? -1;
  const put = (addr: string | undefined, has: number, at: number): void => {
    h[has] = addr === undefined ? 0 : 1;
    for (let i = 0; i < 4; i++) h[at + i] = 0;
    if (addr === undefined) return;
    if (addr.includes(':')) h.set(parseIPv6(addr)!, at);
    else h[at + 3] = parseIPv4(addr)!;
  };
  put(f.address, L.CAP_F_HAS_A, L.CAP_F_ADDR_A);
  put(f.peer, L.CAP_F_HAS_B, L.CAP_F_ADDR_B);
}

const VERDICTS: Record<number, string> = { [DROP]: 'drop', [FORWARD]: 'forward', 2: 'reply' };
const TCP_FLAG_NAMES = ['FIN', 'SYN', 'RST', 'PSH', 'ACK', 'URG', 'ECE', 'CWR'];

/** A record as one JSON object: the packet's headers and the decision taken. */
export function describeRecord(r: CaptureRecord, names: CaptureNames): Record<string, unknown> {
  const b = r.data;
  const out: Record<string, unknown> = { time: new Date(r.timeMs).toISOString(), worker: r.worker, length: r.len };
  const v = b.length > 0 ? b[0]! >> 4 : 0;
  let proto = -1;
  let l4 = -1;
  if (v === 4 && b.length >= 20) {
    proto = b[9]!;
    l4 = (b[0]! & 15) << 2;
    out.src = formatIPv4(b.readInt32BE(12));
    out.dst = formatIPv4(b.readInt32BE(16));
  } else if (v === 6 && b.length >= 40) {
    proto = b[6]!;
    l4 = 40;
    const w = (o: number) => Int32Array.of(b.readInt32BE(o), b.readInt32BE(o + 4), b.readInt32BE(o + 8), b.readInt32BE(o + 12));
    out.src = formatIPv6(w(8));
    out.dst = formatIPv6(w(24));
  }
  const pname = Object.entries(PROTOS).find(([, n]) => n === proto)?.[0];
  out.protocol = pname ?? proto;
  if ((proto === IPPROTO_TCP || proto === IPPROTO_UDP || proto === IPPROTO_SCTP) && l4 + 4 <= b.length) {
    out.sport = b.readUInt16BE(l4);
    out.dport = b.readUInt16BE(l4 + 2);
  }
  if (proto === IPPROTO_TCP && l4 + 14 <= b.length) out.tcpFlags = TCP_FLAG_NAMES.filter((_, i) => b[l4 + 13]! & (1 << i)).join(',');
  if ((proto === IPPROTO_ICMP || proto === IPPROTO_ICMPV6) && l4 + 2 <= b.length) out.icmpType = b[l4];
  out.verdict = VERDICTS[r.verdict] ?? r.verdict;
  if (r.drop >= 0) out[r.verdict === DROP ? 'dropReason' : 'reason'] = L.DROP_NAMES[r.drop] ?? r.drop;
  if (r.svc >= 0) out.service = names.service(r.svc);
  if (r.rs >= 0) out.realServer = names.realServer(r.rs);
  if (r.state >= 0) {
    const p = r.proto & 0xff;
    out.state =
      p === IPPROTO_TCP ? TCP_STATE_NAMES[r.state] : p === IPPROTO_SCTP ? SCTP_STATE_NAMES[r.state] : p === IPPROTO_UDP ? 'UDP' : r.state;
  }
  return out;
}

export interface CaptureNames {
  service(slot: number): string | null;
  realServer(slot: number): string | null;
}

export class Capturer {
  readonly sab: SharedArrayBuffer;
  private readonly workers: number;
  private readonly names: CaptureNames;
  private gen = 0;
  private busy = false;

  constructor(workers: number, names: CaptureNames) {
    this.sab = new SharedArrayBuffer(L.capBytes(workers));
    this.workers = workers;
    this.names = names;
  }

  get running(): boolean {
    return this.busy;
  }

  /** Runs one capture to its end (time or packets); rejects with 409 while another runs. */
  async run(req: CaptureRequest): Promise<CaptureResult> {
    if (this.busy) throw new UvsError('UVS_ERR_CAPTURE_BUSY', 'a capture is already running; wait for it to end');
    this.busy = true;
    const h = new Int32Array(this.sab, 0, L.CAP_HDR_WORDS);
    const a = new Int32Array(this.sab);
    const sl = new Slicer('capture');
    try {
      // Leftovers of an earlier capture (records published after it stopped) are discarded.
      for (let w = 0; w < this.workers; w++) {
        const wb = L.capWorkerOffset(w) >> 2;
        Atomics.store(a, wb + L.CAPW_HEAD, Atomics.load(a, wb + L.CAPW_TAIL));
      }
      const over0 = overruns(this.sab, this.workers);
      if (req.sample !== undefined) {
        h[L.CAP_MODE] = L.CAP_MODE_SAMPLE;
        h[L.CAP_SAMPLE_N] = req.sample;
      } else {
        h[L.CAP_MODE] = L.CAP_MODE_FLOW;
        writeFilter(h, req.flow!);
      }
      // A fresh non-zero generation: workers restart their 1-in-N count.
      this.gen = (this.gen % 0x7ffffffe) + 1;
      Atomics.store(h, L.CAP_ON, this.gen);
      // Per worker, in ring (= time) order: each record's time and output bytes.
      const out: Formatted[][] = Array.from({ length: this.workers }, () => []);
      let n = 0;
      const raw: CaptureRecord[] = [];
      const take = async () => {
        for (let w = 0; w < this.workers; w++) {
          raw.length = 0;
          drainRing(this.sab, w, raw); // copies ≤ CAP_SLOTS records: ≤ 0.8 MB, well under a slice
          for (const r of raw) {
            out[w]!.push({ timeMs: r.timeMs, bytes: this.format(req.format, r) });
            if (sl.due()) await sl.pause();
          }
          n += raw.length;
        }
        raw.length = 0;
      };
      const until = Date.now() + req.seconds * 1000;
      while (n < req.maxPackets && Date.now() < until) {
        sl.end();
        await new Promise((r) => setTimeout(r, L.CAP_DRAIN_MS));
        sl.resume();
        await take();
      }
      Atomics.store(h, L.CAP_ON, 0);
      // A worker that loaded CAP_ON before it went to 0 finishes its batch: one more drain.
      sl.end();
      await new Promise((r) => setTimeout(r, L.CAP_DRAIN_MS));
      sl.resume();
      await take();
      const body: Buffer[] = req.format === 'pcap' ? [pcapHeader()] : [];
      let bytes = body[0]?.length ?? 0;
      const kept = Math.min(n, req.maxPackets);
      // The workers' lists merged by time (ties: the lower worker first), the first `kept` only.
      const next = new Int32Array(this.workers);
      let group: Buffer[] = [];
      let groupBytes = 0;
      for (let i = 0; i < kept; i++) {
        let best = -1;
        for (let w = 0; w < this.workers; w++) {
          const x = out[w]![next[w]!];
          if (x !== undefined && (best < 0 || x.timeMs < out[best]![next[best]!]!.timeMs)) best = w;
        }
        const x = out[best]![next[best]!]!;
        out[best]![next[best]!++] = DONE; // let the record's bytes go once its chunk is made
        group.push(x.bytes);
        groupBytes += x.bytes.length;
        if (groupBytes >= OUT_CHUNK || i === kept - 1) {
          body.push(Buffer.concat(group, groupBytes));
          bytes += groupBytes;
          group = [];
          groupBytes = 0;
        }
        if (sl.due()) await sl.pause();
      }
      sl.end();
      return { format: req.format, body, bytes, packets: kept, overruns: overruns(this.sab, this.workers) - over0 };
    } finally {
      Atomics.store(h, L.CAP_ON, 0);
      this.busy = false;
    }
  }

  private format(format: CaptureRequest['format'], r: CaptureRecord): Buffer {
    return format === 'pcap' ? pcapRecord(r.timeMs, r.len, r.data) : Buffer.from(`${JSON.stringify(describeRecord(r, this.names))}\n`);
  }
}

interface Formatted {
  timeMs: number;
  bytes: Buffer;
}

const DONE: Formatted = { timeMs: 0, bytes: Buffer.alloc(0) };
