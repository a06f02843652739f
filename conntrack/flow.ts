/**
 * What the packet path hands the connection table and gets back from it (table.ts, "flow-level
 * API"): a key to look up, a view the lookup fills, a record to insert. Each is allocated once by
 * its owner (a worker's processor) and reused for every packet; the table copies entry words into
 * a view under the bucket lock, so nothing outside conntrack/ reads an entry's layout or holds a
 * lock.
 *
 * WORDS: the address, port-pair, sequence-number and time fields are int32 words kept in a small
 * Int32Array behind accessors: an address such as 192.168.0.1 is beyond V8's small integers, so as
 * a plain field it would be stored boxed as a double and converted on every use (measured: an
 * established packet took ~20 % longer than with lb/processor.ts's locals); the accessors inline
 * to a typed-array load or store.
 *
 * Addresses follow the table's convention: the address fields are each address's last 32 bits,
 * and an IPv6 flow's other 96 bits sit in `hi` in the entry's order — client 0..2, virtual 3..5,
 * real server 6..8, local 9..11 (layout.ts E_HI, HI_WORDS). IPv4 flows ignore `hi`.
 */
import * as L from './layout';

/**
 * A packet's key: protocol (| L.PROTO_V6), source address, ports (source port << 16 |
 * destination port), destination address. A client's packet is a client→server key
 * (caddr, cports, vaddr; IPv6 high words in hi[0..5]); a real server's packet a server→client key
 * (daddr, dports, laddr; hi[6..11]).
 */
export class FlowKey {
  proto = 0;
  /**
   * The key's client→server bucket as the table's last lookupIn/templateFor of it hashed it (−1:
   * none yet): a NewFlow of the same key carries it on (NewFlow.inBucket), so a SYN's in-key is
   * hashed once, as the kernel hashes it once for the lookup and once for ip_vs_conn_hash.
   */
  bucket = -1;
  readonly hi = new Int32Array(L.HI_WORDS);
  /** src, ports, dst, and a TCP SYN's sequence number (seq, read by lookupIn with LOOKUP_NEW): see WORDS at the top. */
  private readonly w = new Int32Array(4);
  get src(): number {
    return this.w[0]!;
  }
  set src(v: number) {
    this.w[0] = v;
  }
  get ports(): number {
    return this.w[1]!;
  }
  set ports(v: number) {
    this.w[1] = v;
  }
  get dst(): number {
    return this.w[2]!;
  }
  set dst(v: number) {
    this.w[2] = v;
  }
  get seq(): number {
    return this.w[3]!;
  }
  set seq(v: number) {
    this.w[3] = v;
  }
}

/**
 * A connection entry as a lookup saw it, copied under its bucket lock: its two keys, forwarding
 * method, real server and service, protocol state after the packet, and PROXY protocol words.
 * `adopted` and `sync` say what the lookup did: it took over a shadow entry (another node's flow),
 * and the entry should now be written to Redis (table.ts touch()).
 */
export class FlowView {
  /** Entry index (an opaque handle for the table's other calls), −1 = none. */
  entry = -1;
  proto = 0;
  /** L.FWD_* of the entry. */
  fwd = 0;
  state = 0;
  rs = 0;
  svc = 0;
  /** IPv6: the entry's high words (all four addresses); untouched for IPv4. */
  readonly hi = new Int32Array(L.HI_WORDS);
  adopted = false;
  sync = false;
  /**
   * SYN proxy (lb/synproxy.ts): the entry's L.F_SYNPROXY | L.F_SP_PENDING bits, 0 = not proxied;
   * with F_SYNPROXY, its sequence and timestamp deltas and options (layout.ts SP_DELTA,
   * SP_TSDELTA, SP_OPTS) in spDelta, spTsDelta, spOpts.
   */
  sp = 0;
  /**
   * caddr, cports (cport << 16 | vport), vaddr, daddr, dports (rport << 16 | lport), laddr, and
   * the PROXY protocol word (layout.ts PP_*, 0 = none) with the client sequence number it sits
   * at (ppSeq), the SYN proxy words: int32 words, see WORDS at the top.
   */
  private readonly w = new Int32Array(11);
  get caddr(): number {
    return this.w[0]!;
  }
  set caddr(v: number) {
    this.w[0] = v;
  }
  get cports(): number {
    return this.w[1]!;
  }
  set cports(v: number) {
    this.w[1] = v;
  }
  get vaddr(): number {
    return this.w[2]!;
  }
  set vaddr(v: number) {
    this.w[2] = v;
  }
  get daddr(): number {
    return this.w[3]!;
  }
  set daddr(v: number) {
    this.w[3] = v;
  }
  get dports(): number {
    return this.w[4]!;
  }
  set dports(v: number) {
    this.w[4] = v;
  }
  get laddr(): number {
    return this.w[5]!;
  }
  set laddr(v: number) {
    this.w[5] = v;
  }
  get pp(): number {
    return this.w[6]!;
  }
  set pp(v: number) {
    this.w[6] = v;
  }
  get ppSeq(): number {
    return this.w[7]!;
  }
  set ppSeq(v: number) {
    this.w[7] = v;
  }
  get spDelta(): number {
    return this.w[8]!;
  }
  set spDelta(v: number) {
    this.w[8] = v;
  }
  get spTsDelta(): number {
    return this.w[9]!;
  }
  set spTsDelta(v: number) {
    this.w[9] = v;
  }
  get spOpts(): number {
    return this.w[10]!;
  }
  set spOpts(v: number) {
    this.w[10] = v;
  }
}

/**
 * A new entry (table.ts insert): the fields of ip_vs_conn_new. `flags` is the forwarding method
 * (L.FWD_*) with L.F_TEMPLATE (a persistence template, timer `templateMs`), L.F_SHADOW (another
 * node's flow: `state` and `expires` as synced) or L.F_NOOUTPUT. `created` is the answer: false
 * when the insert found an entry with the same client→server key (another worker won the race).
 */
export class NewFlow {
  proto = 0;
  flags = 0;
  rs = 0;
  svc = 0;
  templateMs = 0;
  state = 0;
  readonly hi = new Int32Array(L.HI_WORDS);
  /**
   * The bucket of this record's client→server key when the caller has it from a lookup of that
   * very key on this table (FlowKey.bucket), −1 otherwise; insert uses it instead of hashing the
   * key again, and sets it back to −1.
   */
  inBucket = -1;
  created = false;
  /**
   * A SYN-proxied flow learnt from Redis (1; lb/synproxy.ts): the entry gets F_SYNPROXY and its
   * SP words spDelta, spTsDelta, spOpts (layout.ts SP_DELTA, SP_TSDELTA, SP_OPTS). 0 otherwise;
   * the packet path never sets it (its flows become proxied through ConnTable.spBegin).
   */
  sp = 0;
  /** caddr, cports, vaddr, daddr, dports, laddr, pp, ppSeq, now, expires, and the SP words: int32 words, see WORDS at the top. */
  private readonly w = new Int32Array(13);
  get caddr(): number {
    return this.w[0]!;
  }
  set caddr(v: number) {
    this.w[0] = v;
  }
  get cports(): number {
    return this.w[1]!;
  }
  set cports(v: number) {
    this.w[1] = v;
  }
  get vaddr(): number {
    return this.w[2]!;
  }
  set vaddr(v: number) {
    this.w[2] = v;
  }
  get daddr(): number {
    return this.w[3]!;
  }
  set daddr(v: number) {
    this.w[3] = v;
  }
  get dports(): number {
    return this.w[4]!;
  }
  set dports(v: number) {
    this.w[4] = v;
  }
  get laddr(): number {
    return this.w[5]!;
  }
  set laddr(v: number) {
    this.w[5] = v;
  }
  get pp(): number {
    return this.w[6]!;
  }
  set pp(v: number) {
    this.w[6] = v;
  }
  get ppSeq(): number {
    return this.w[7]!;
  }
  set ppSeq(v: number) {
    this.w[7] = v;
  }
  get now(): number {
    return this.w[8]!;
  }
  set now(v: number) {
    this.w[8] = v;
  }
  get expires(): number {
    return this.w[9]!;
  }
  set expires(v: number) {
    this.w[9] = v;
  }
  get spDelta(): number {
    return this.w[10]!;
  }
  set spDelta(v: number) {
    this.w[10] = v;
  }
  get spTsDelta(): number {
    return this.w[11]!;
  }
  set spTsDelta(v: number) {
    this.w[11] = v;
  }
  get spOpts(): number {
    return this.w[12]!;
  }
  set spOpts(v: number) {
    this.w[12] = v;
  }
}

/** A NewFlow from named fields (control thread and tests; the packet path reuses one record). */
export function newFlow(f: Partial<Omit<NewFlow, 'hi' | 'created'>> & { hi?: ArrayLike<number> | null }): NewFlow {
  const r = new NewFlow();
  const { hi, ...rest } = f;
  Object.assign(r, rest);
  if (hi) for (let i = 0; i < L.HI_WORDS; i++) r.hi[i] = hi[i] ?? 0;
  return r;
}
