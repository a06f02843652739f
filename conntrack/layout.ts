/**
 * The byte layout of every SharedArrayBuffer uvs shares between the control thread and the
 * dataplane workers. This is the only file that knows offsets; everything else uses these names.
 *
 * All words are 32-bit little-endian (the host's order: typed arrays, not DataView).
 *
 * ── Connection table (one SAB) ─────────────────────────────────────────────────────────────
 *   [header: HDR_WORDS int32]
 *   [in-chain heads: buckets int32]    entry index + 1 of the client→server chain head; 0 = empty
 *   [out-chain heads: buckets int32]   the same for server→client keys
 *   [bucket locks: buckets int32]      0 = free, else owner id (worker id + 1; control = 1000);
 *                                      one lock guards bucket i of both chain arrays
 *   [entries: capacity × ENTRY_WORDS int32]
 *   [per-source counters: capacity int32]  half-open entries per client source, at a keyed hash
 *                                      of the source (IPv4 address, IPv6 /64); atomic adds
 *   [SYN proxy words: capacity × SP_WORDS int32]  per entry, meaningful while its E_FLAGS has
 *                                      F_SYNPROXY (lb/synproxy.ts): the client's handshake, then
 *                                      the sequence/timestamp deltas and window scales
 *   [held packets: HOLD_HDR_WORDS (HOLD_SOURCES per-source counters among them) + HOLD_SLOTS ×
 *                                      HOLD_SLOT_WORDS int32, then HOLD_SLOTS × HOLD_SLOT_BYTES]
 *                                      client packets that arrived while the real server's
 *                                      handshake was pending, replayed after it
 *
 * capacity and buckets are powers of two and buckets = capacity: each entry sits on one in-chain
 * and one out-chain, so a full table averages one entry per chain of each kind. Chains, not open addressing: deletion needs no tombstones and a lookup holding a bucket
 * lock can never see an entry freed under it (freeing takes both of the entry's bucket locks).
 *
 * Lock order, always: bucket locks (lower index first) → entry lock → alloc lock. A lock word
 * holds its owner's id so the control thread can release what a crashed worker held. A thread
 * that finds a lock word still held after table.ts LOCK_STUCK_MS (5 s) throws instead of
 * spinning on (table.ts spin).
 */

export const TABLE_MAGIC = 0x55565331; // "UVS1"

// Header words.
export const H_MAGIC = 0;
export const H_CAPACITY = 1;
export const H_BUCKETS = 2;
export const H_SALT = 3; // bucket hash key, first word (k0); HalfSipHash-1-3, see table.ts
export const H_COUNT = 4; // live entries (atomic)
export const H_FREE_HEAD = 5; // entry index + 1 of the first free entry; 0 = table full
export const H_ALLOC_LOCK = 6;
export const H_EPOCH_LO = 7; // ms since the Unix epoch when the table was made, split in two
export const H_EPOCH_HI = 8; //   words: entry times are ms relative to it (int32: 24 days span)
export const H_SHADOWS = 10; // shadow entries (atomic)
// SYN proxy (lb/synproxy.ts; defense.ts and the control thread write them, workers read them):
export const H_SP_KEY = 11; // 4 words (11..14): the SYN cookie key, two HalfSipHash keys (config synProxyKey or random)
export const H_SP_PENDING = 15; // proxied entries whose real server has not answered yet (atomic gauge)
export const H_TIMEOUTS = 16; // TIMEOUT_SLOTS words (16..47): per-state timeouts in ms, slots below
export const H_HASH_K1 = 48; // bucket hash key, second word (k1): both from crypto random at creation
// Overload defenses (conntrack/defense.ts writes them once a second; workers read them):
export const H_SECURE_TCP = 56; // 1 while secure_tcp is on: tcp_states_dos transitions, short half-open timers
export const H_SECURE_TCP_MS = 57; // the half-open timeout (ms) while secure_tcp is on
export const H_DROP_RATE = 58; // drop_packet: drop 1 of every this many new flows, 0 = off
export const H_SRC_LIMIT = 59; // half-open entries one client source may hold, 0 = no limit now
export const H_SRC_KEY = 60; // 4 words (60..63): random SipHash key of the per-source counters
export const H_SYNPROXY = 49; // 1 while the SYN proxy answers SYNs with cookies (defense.synProxy)
export const H_SP_LAST = 50; // table-relative ms a cookie was last sent: ACKs are checked for 2 minutes after
export const H_SP_MSS4 = 51; // the MSS offered to IPv4 clients at most (defense.synProxyMss)
export const H_SP_MSS6 = 52; // the same for IPv6
export const H_SP_WSCALE = 53; // the window scale offered to clients (defense.synProxyWscale)
export const HDR_WORDS = 64;

/**
 * Timeout slots inside H_TIMEOUTS: TCP states use their state index (0..10), UDP slot 11, SCTP
 * states TIMEOUT_SCTP + their state index (16..29); 12..15 and 30..31 are unused.
 */
export const TIMEOUT_UDP = 11;
export const TIMEOUT_SCTP = 16;
export const TIMEOUT_SLOTS = 32;

// Entry words (ENTRY_WORDS int32 = 128 bytes, two cache lines: the lookup fields are all in the
// first; the second holds persistence links and room for IPv6 addresses later).
export const E_LOCK = 0;
export const E_FLAGS = 1; // F_* below | forwarding method in the low 3 bits (kernel's FWD_MASK)
export const E_PROTO = 2; // IP protocol number, | PROTO_V6 for an IPv6 flow
export const E_STATE = 3; // protocol state index (TCP: 0..10, UDP: 0, SCTP: 0..13)
export const E_CADDR = 4; // client address (templates: the client address masked by the netmask)
export const E_CPORTS = 5; // cport << 16 | vport: the client→server key's ports (templates: cport 0)
export const E_VADDR = 6; // virtual address
export const E_DADDR = 7; // real server address
export const E_DPORTS = 8; // dport << 16 | lport: the server→client key's ports
export const E_LADDR = 9; // address the real server replies to (masq: client; full-NAT: pool)
export const E_RS = 10; // real-server slot (index into the real-server region)
export const E_SVC = 11; // service slot
export const E_NEXT_IN = 12; // chain link of the client→server key: entry index + 1, 0 = end
export const E_NEXT_OUT = 13; // chain link of the server→client key
export const E_EXPIRES = 14; // ms (table-relative) when the entry times out
export const E_IN_PKTS = 15; // client→server packets, saturating (sync threshold, drop_entry)
export const E_CONTROL = 16; // connections: entry index + 1 of the persistence template controlling it, 0 = none
export const E_NCONTROL = 17; // templates: connections it controls (kernel n_control; atomic)
export const E_TIMEOUT = 18; // templates: their own timeout in ms (the service's -p; 60 s once re-armed)
// Words 17 and 18 mean something else for a connection, which never controls anything: a
// template carries no bytes, a connection has no persistence timeout of its own.
export const E_PP = 17; // connections: PROXY protocol word (PP_* below), 0 = none; flag bits set with Atomics.or
export const E_PP_SEQ = 18; // connections: client sequence number where the header sits (the SYN's + 1)
// IPv6 flows: the address words above hold each address's last 32 bits; the first 96 bits of
// each sit here, three words per address in the order client, virtual, real server, local.
export const E_HI = 20;
export const E_CADDR_HI = 20;
export const E_VADDR_HI = 23;
export const E_DADDR_HI = 26;
export const E_LADDR_HI = 29;
export const HI_WORDS = 12; // a key's high words, in the order above (callers' scratch arrays too)
export const ENTRY_WORDS = 32;
/** E_PROTO flag of an IPv6 flow: keys of the two families never compare equal. */
export const PROTO_V6 = 0x100;

/**
 * E_PP of a full-NAT TCP connection to a real server with `proxyProtocol` (lb/proxy-protocol.ts):
 * the header's length in bytes — the shift between the client's and the server's sequence
 * numbers (at most 107: PROXY v1's longest line) — its version, and what is known of its delivery.
 * The word is all a node needs to go on with the flow: Redis records carry it (redis-record.ts).
 */
export const PP_LEN_MASK = 0xff;
export const PP_VER_SHIFT = 8; // 1 = v1 (text), 2 = v2 (binary)
export const PP_VER_MASK = 0x300;
export const PP_SENT = 0x1000; // a header segment went to the server
export const PP_DATA = 0x2000; // the client's first byte (at E_PP_SEQ) went to the server once
export const PP_ACKED = 0x4000; // the server acknowledged the whole header: shifts are plain from now on
/**
 * E_PP_SEQ is the client's word only: the server's SYN-ACK has not yet named the stream start
 * (its acknowledgement). Until it does, no client byte goes to the server (lb/xmit.ts proxyIn).
 */
export const PP_WAIT = 0x8000;
export const PP_FLAGS = PP_SENT | PP_DATA | PP_ACKED | PP_WAIT;

/** The header length an E_PP word records. */
export function ppLength(pp: number): number {
  return pp & PP_LEN_MASK;
}

/** The version an E_PP word records (PP_V1, PP_V2). */
export function ppVersion(pp: number): number {
  return (pp & PP_VER_MASK) >>> PP_VER_SHIFT;
}

// E_FLAGS bits, values as the kernel's IP_VS_CONN_F_* (include/uapi/linux/ip_vs.h).
export const FWD_MASK = 0x7;
export const FWD_MASQ = 0;
export const FWD_TUNNEL = 2;
export const FWD_DROUTE = 3;
export const FWD_FULLNAT = 5; // uvs (DPVS-style; no kernel value): source NAT to a pool address and port
export const F_NOOUTPUT = 0x80;
export const F_INACTIVE = 0x100;
export const F_TEMPLATE = 0x1000;
export const F_INVALID = 0x20000; // uvs: a template that may no longer be matched (its server left); dies at its timer
export const F_SHADOW = 0x40000; // uvs: another node's flow, learnt from Redis; not counted until a packet adopts it
export const F_IN_USE = 0x10000; // uvs: slot holds a live entry
export const F_HALFOPEN = 0x80000; // uvs: counted in its source's half-open counter (TCP/SCTP before ESTABLISHED)
export const F_SYNPROXY = 0x100000; // uvs: a SYN-proxied flow (lb/synproxy.ts): its SP_* words adjust every packet
export const F_SP_PENDING = 0x200000; // uvs: proxied, the real server's SYN-ACK not seen yet (client packets are held)

/** Owner id the control thread uses in lock words; workers use their id + 1 (< 1000). */
export const OWNER_CONTROL = 1000;

/**
 * A template's E_STATE bit (kernel IP_VS_CTPL_S_ASSURED, include/net/ip_vs.h): set once a
 * connection it controls reaches ESTABLISHED (TCP, SCTP) or a UDP one sees a reply
 * (ip_vs_control_assure_ct). `-Lnc` lists a template as ASSURED or NONE.
 */
export const CTPL_ASSURED = 1;

/** Timer of a template that still controls connections when it fires (kernel: 60 s). */
export const TEMPLATE_REARM_MS = 60_000;

export function tableBytes(capacity: number): number {
  return holdDataOffset(capacity) + HOLD_SLOTS * HOLD_SLOT_BYTES;
}
export function inHeadsOffset(): number {
  return HDR_WORDS;
}
export function outHeadsOffset(capacity: number): number {
  return HDR_WORDS + capacity;
}
export function bucketLocksOffset(capacity: number): number {
  return HDR_WORDS + 2 * capacity;
}
export function entriesOffset(capacity: number): number {
  return HDR_WORDS + 3 * capacity;
}
/** One counter per entry slot: even a table full of half-open entries from distinct sources fits. */
export function sourceCountersOffset(capacity: number): number {
  return HDR_WORDS + 3 * capacity + capacity * ENTRY_WORDS;
}

/**
 * SYN proxy words of an entry (lb/synproxy.ts), at synproxyOffset(capacity) + e × SP_WORDS. Written
 * under the entry's bucket locks; read into a FlowView with the entry when E_FLAGS has F_SYNPROXY.
 * While F_SP_PENDING (the real server's SYN-ACK not seen yet) they hold the client's handshake;
 * afterwards SP_DELTA and SP_TSDELTA take the place of the cookie and our timestamp.
 */
export const SP_ISN = 0; // the client's ISN (its SYN's sequence number)
export const SP_COOKIE = 1; // pending: our ISN towards the client (the cookie)
export const SP_DELTA = 1; // after: cookie − the server's ISN; server→client seq += it, client→server ack −= it
export const SP_OPTS = 2; // SPO_* below
export const SP_CTSVAL = 3; // the client's latest TSval seen (our SYN and ACK to the server carry it)
export const SP_OURTS = 4; // pending: the TSval we gave the client (its TSecr echoes it)
export const SP_TSDELTA = 4; // after: our TSval − the server's; server→client TSval += it, client→server TSecr −= it
export const SP_SYN_AT = 5; // table-relative ms our SYN last went to the server
export const SP_CWIN = 6; // the client's window field (its cookie ACK), for our ACK to the server
export const SP_HELD = 7; // held packets: first hold slot + 1 (low 16 bits), count << 16
export const SP_WORDS = 8;
// SP_OPTS bits: the options of the client's SYN as the cookie carried them, and the window scales.
export const SPO_MSS_MASK = 0xffff; // the MSS our SYN gives the server
export const SPO_WS_SHIFT = 16; // the client's window scale (4 bits), 0xf = none
export const SPO_SACK = 0x100000; // the client offered SACK (and timestamps carried it)
export const SPO_TS = 0x200000; // the client uses timestamps
export const SPO_OURWS_SHIFT = 24; // the window scale we offered the client (4 bits; 0 without)
export const SPO_SRVWS_SHIFT = 28; // the server's window scale (4 bits; 0 without), set with SP_DELTA
/** Our SYN offered the client's window scale and the server's SYN-ACK had none: scaling is off at the server, which reads the client's windows unscaled (client→server windows are shifted left by the client's scale). */
export const SPO_SRV_NOWS = 0x800000;

/**
 * SP_OPTS once the server's SYN-ACK is seen: its window scale `ws` (−1 = no option) recorded —
 * ignored (0) when our SYN offered none, SPO_SRV_NOWS when ours did and it has none.
 */
export function spServerOpts(opts: number, ws: number): number {
  const ours = ((opts >>> SPO_WS_SHIFT) & 0xf) !== 0xf;
  const base = opts & ~((0xf << SPO_SRVWS_SHIFT) | SPO_SRV_NOWS);
  if (!ours) return base;
  return ws < 0 ? base | SPO_SRV_NOWS : base | ((ws & 0xf) << SPO_SRVWS_SHIFT);
}

/**
 * Held-packet area: the area's header words (then HOLD_SOURCES per-source counters), per-slot
 * header words, and their sizes. The free list, HOLD_USED and the source counters change only
 * under HOLD_LOCK. A slot is free (on the free list), attached (on a pending flow's list, under
 * its bucket locks), or in a worker's hands (HS_OWNER: taken and not yet attached, or detached
 * for replay and not yet freed) — what a worker that dies leaves there, ConnTable.holdReclaim
 * gives back.
 */
export const HOLD_LOCK = 0; // area lock (owner id), taken after the bucket locks
export const HOLD_FREE = 1; // first free slot + 1, 0 = none
export const HOLD_USED = 2; // slots in use (a gauge)
export const HOLD_SRC_BASE = 4; // HOLD_SOURCES counters: slots in use per client source (keyed hash)
export const HOLD_SOURCES = 512;
export const HOLD_HDR_WORDS = HOLD_SRC_BASE + HOLD_SOURCES;
export const HS_NEXT = 0; // next slot of the same flow (+1), or of the free list
export const HS_LEN = 1; // the packet's bytes (IP header first)
export const HS_L4 = 2; // its TCP header's offset from the IP header
export const HS_SRC = 3; // its source counter (0..HOLD_SOURCES-1), set when taken
export const HS_OWNER = 4; // the worker (lock owner id) holding it outside any flow's list, else 0
export const HOLD_SLOT_WORDS = 8;
export const HOLD_SLOTS = 512; // packets held at once, all flows and workers (1 MiB)
export const HOLD_SLOT_BYTES = 2048; // ≥ MTU 1500; a larger packet is refused (the client sends it again)
/** Packets one flow may hold (DPVS max_ack_saved). */
export const HOLD_PER_FLOW = 3;
/**
 * Slots one client source (the per-source counters' keyed hash of an IPv4 address or an IPv6
 * /64, as halfOpenPerSource's) may hold at once: 1/16 of the area, so that one client completing
 * cookie handshakes to a server that does not answer cannot take it all.
 */
export const HOLD_PER_SOURCE = 32;

export function synproxyOffset(capacity: number): number {
  return HDR_WORDS + 3 * capacity + capacity * ENTRY_WORDS + capacity;
}
/** Word offset of the held-packet area's header; its slot headers follow. */
export function holdOffset(capacity: number): number {
  return synproxyOffset(capacity) + capacity * SP_WORDS;
}
/** Byte offset of the held packets' data (slot i at + i × HOLD_SLOT_BYTES). */
export function holdDataOffset(capacity: number): number {
  return (holdOffset(capacity) + HOLD_HDR_WORDS + HOLD_SLOTS * HOLD_SLOT_WORDS) * 4;
}

/*
 * ── Real-server region (one SAB) ───────────────────────────────────────────────────────────
 * One slot of RS_WORDS int32 per real server, allocated by the control thread and kept while any
 * connection points at it (a deleted server sits in the "trash" like the kernel's).
 */
export const RS_ACTIVE = 0; // ActiveConn (atomic)
export const RS_INACTIVE = 1; // InActConn (atomic)
export const RS_PERSIST = 2; // PersistConn (atomic)
export const RS_FLAGS = 3; // RSF_* (atomic)
export const RS_UTHRESH = 4; // upper connection threshold (-x), 0 = none
export const RS_LTHRESH = 5; // lower connection threshold (-y), 0 = none
export const RS_WEIGHT = 6; // current weight (the snapshot has it too; this one is live)
export const RS_MTU = 7; // MTU of the route to the real server (control thread refreshes it), 0 = unknown
export const RS_WORDS = 8;
export const RSF_AVAILABLE = 0x1; // kernel IP_VS_DEST_F_AVAILABLE: in a service's list
export const RSF_OVERLOAD = 0x2; // kernel IP_VS_DEST_F_OVERLOAD
/**
 * Deleted by a drain that reached 0 with Redis (control/services.ts drainedTrash): flows other
 * nodes hold for it that no count saw may still arrive by adoption and are forwarded (the packet
 * path's test for a gone server is AVAILABLE | DRAINED); scheduling and templates never use it.
 */
export const RSF_DRAINED = 0x4;

/*
 * ── Scheduler state region (one SAB) ───────────────────────────────────────────────────────
 * One slot of SCHED_WORDS int32 per service: word 0 is the slot's lock (owner id), the rest is the
 * scheduler's own mutable state (rr's cursor, wrr's cl/cw, twos's random stream, lblc's
 * destination cache, lblcr's destination set, …). Scheduling a new flow takes the lock, so rr
 * stays a single global rotation however many workers there are — as in the kernel.
 *
 * 64 words (256 bytes, four cache lines; 256 KiB for the default 1024 services): lblcr keeps a
 * destination-address entry and its server set here (up to 57 members), lblc up to 12 cached
 * destination addresses. A uvs service has one virtual address, so each needs one entry.
 */
export const SCHED_LOCK = 0;
export const SCHED_STATE = 1; // first word a scheduler may use
export const SCHED_WORDS = 64;

/*
 * ── Worker counters (one SAB per worker, single writer, Float64) ───────────────────────────
 * Plain stores, no atomics: one writer each; readers (metrics, API) sum the workers.
 *   [W_GLOBAL_WORDS global counters][per real-server slot: RSC_WORDS][per service slot: RSC_WORDS]
 */
export const C_RX_PACKETS = 0;
export const C_RX_BYTES = 1;
export const C_TX_PACKETS = 2;
export const C_TX_BYTES = 3;
export const C_TX_ERRORS = 4; // packets the device would not take
export const C_BATCHES = 5;
export const C_CONNS_NEW = 6;
export const C_NODEST_EXPIRED = 7; // entries of deleted real servers expired by their next packet
export const C_SYNC_RING_FULL = 8; // sync events lost because the ring was full
export const C_PARKED = 9; // packets parked for a Redis lookup
export const C_PARK_FULL = 10; // packets that found the park ring full (dropped)
export const C_ADOPTED = 11; // another node's flows taken over by a packet
export const C_PP_HEADERS = 12; // PROXY protocol header segments sent to real servers (a resend counts again)
/**
 * Packets written beyond one per packet handled (lb/worker.ts): a GSO super-packet's segments after
 * the first (segmented here for the tunnel), a PROXY protocol header segment sent ahead of the
 * client's data. So written + write errors = forwarded + generated (C_GEN_BASE, sent) + these.
 */
export const C_TX_EXTRA = 13;
/** Longest connection-table chain the worker walked in the last two 10 s windows (a gauge). */
export const C_CHAIN_MAX = 14;
/** Walks longer than conntrack/table.ts CHAIN_ALARM (monotonic). */
export const C_LONG_CHAINS = 15;
export const C_DROP_BASE = 16; // + DropReason (16..47)
/**
 * Packets the dataplane generates (lb/icmp.ts mayAnswer) and what became of each:
 * C_GEN_BASE + kind × GEN_RESULTS + result, room for GEN_KIND_SLOTS kinds (48..62). A packet
 * generated is counted once, `sent`, when it is built: one increment, nothing else per packet.
 *
 * A new kind takes the next number, its name appended to GEN_KIND_NAMES and its GEN_REFUSES entry
 * to GEN_REFUSES; metrics, GET /v1/stats, dataplane.generatedLimit.kinds and the reliability
 * run's accounting follow those lists. GEN_SYN_ACK is the SYN proxy's cookie SYN-ACK: its SYN is
 * answered in place (no drop reason: GEN_REFUSES false).
 */
export const C_GEN_BASE = 48;
export const GEN_KIND_SLOTS = 5;
export const GEN_RESET = 0; // TCP RST
export const GEN_UNREACH = 1; // ICMP / ICMPv6 port unreachable
export const GEN_ECHO = 2; // echo reply (ICMP, ICMPv6)
export const GEN_TOO_BIG = 3; // ICMP fragmentation needed / ICMPv6 Packet Too Big
export const GEN_SYN_ACK = 4; // a SYN-ACK with a SYN cookie (lb/synproxy.ts): never limited, the SYN answered in place
export const GEN_KIND_NAMES = ['reset', 'unreachable', 'echo', 'too_big', 'syn_ack'] as const;
/**
 * Per kind: whether the packet it answers is a refusal, counted under its drop reason as well (a
 * RST for a segment of no flow, an unreachable, a too-big), or answered without a drop (an echo
 * request: the answer is the packet turned around).
 */
export const GEN_REFUSES: readonly boolean[] = [true, true, false, true, false];
export const GEN_SENT = 0;
export const GEN_BAD_DESTINATION = 1; // suppressed: the answer would go to a VIP, the pool, multicast, …
export const GEN_RATE_LIMITED = 2; // suppressed: over the per-source or the global limit
export const GEN_RESULTS = 3;
export const GEN_RESULT_NAMES = ['sent', 'bad_destination', 'rate_limited'] as const;
// SYN proxy (lb/synproxy.ts): its cookies are generated packets (GEN_SYN_ACK), its bad cookies
// the drop reason bad_cookie.
export const C_SP_ACCEPTED = 64; // client ACKs with a valid cookie: flows made, SYN sent to the real server
/** Client packets held while the server's handshake was pending: consumed when held (their replay
 *  after the server's SYN-ACK is written as C_TX_EXTRA), as parked packets are. */
export const C_SP_HELD = 65;
export const C_SP_HELD_REFUSED = 66; // client packets that could not be held (flow or area full, too large) or replayed
export const C_SP_SERVER_FAIL = 67; // real servers that answered our SYN with a RST
export const C_PP_SYN_DATA = 68; // PROXY protocol: client SYNs sent to the server without their data (TCP Fast Open)
export const C_SLOPPY = 69; // connections started by a packet other than a SYN / INIT (sloppy_tcp, sloppy_sctp)
export const C_SECOND_CHANCE = 70; // replayed mid-flow packets Redis knew nothing of, taken with a permit (PERMIT_*)
export const W_GLOBAL_WORDS = 72;
// Per real server / per service counters (kernel ip_vs_stats).
export const RSC_CONNS = 0;
export const RSC_INPKTS = 1;
export const RSC_OUTPKTS = 2;
export const RSC_INBYTES = 3;
export const RSC_OUTBYTES = 4;
export const RSC_WORDS = 5;

export function counterWords(maxRealServers: number, maxServices: number): number {
  return W_GLOBAL_WORDS + (maxRealServers + maxServices) * RSC_WORDS;
}
export function rsCounterBase(rs: number): number {
  return W_GLOBAL_WORDS + rs * RSC_WORDS;
}
export function svcCounterBase(maxRealServers: number, svc: number): number {
  return W_GLOBAL_WORDS + (maxRealServers + svc) * RSC_WORDS;
}

/** Why a packet was dropped; index into the drop counters, names used by metrics and the API. */
export const enum Drop {
  BadVersion = 0,
  BadHeaderLength,
  Truncated,
  BadChecksum,
  Fragment,
  UnsupportedProtocol,
  /** IPv6 with extension headers uvs does not step over (or more than 8 of them). */
  Ipv6,
  NoService,
  NoRealServer,
  TableFull,
  NoConnection,
  RealServerGone,
  IcmpIgnored,
  FullnatExhausted,
  /** A virtio_net_hdr (offloads) the dataplane cannot honour: a GSO type other than TCPv4, or
   *  checksum metadata of a GSO packet that does not point at its TCP header. */
  BadOffload,
  /** Larger than the path to the real server with DF set: answered with ICMP fragmentation
   *  needed, as ip_vs_*_xmit do. */
  TooBig,
  /** SCTP without a chunk, or with a chunk shorter than its header or running past the packet
   *  (a wrong CRC32c counts as bad_checksum). */
  SctpBad,
  /** A new flow whose key would join a connection-table chain already CHAIN_LIMIT long (hash flooding). */
  ChainFull,
  /** It would have been answered (RST, ICMP error, echo reply) but its source is a VIP, a full-NAT
   *  pool address, or multicast, broadcast, loopback, unspecified or reserved: answer loops and
   *  reflection (lb/icmp.ts mayAnswer). */
  UnanswerableSource,
  /** It would have been answered, but the answer was over the per-source or global limit. */
  RateLimited,
  /** drop_packet defense: 1 of every H_DROP_RATE new flows refused while the table is short of room. */
  DefenseDropPacket,
  /** The client source already holds its limit of half-open entries (H_SRC_LIMIT). */
  HalfOpenPerSource,
  /** A tunnel flow of a family without a tunnel source (dataplane.tunnelSource / tunnelSource6). */
  NoTunnelSource,
  /** What the packet turns into does not fit where the worker writes it: over 65535 bytes once
   *  encapsulated, more than MAX_OUT segments, or past its output region (lb/verdict.ts). */
  OutputFull,
  /** SYN proxy: an ACK with no flow, while cookies were sent in the last 2 minutes, whose
   *  acknowledgement is no valid cookie (lb/synproxy.ts); answered with a RST within mayAnswer's limits. */
  BadCookie,
  /** SYN proxy: a client packet while the real server's handshake is pending that cannot be held
   *  (its flow holds HOLD_PER_FLOW, the shared area is full, or it is larger than a slot). */
  SynProxyHoldFull,
  /** SYN proxy: a client's bare ACK while the real server's handshake is pending, consumed by
   *  it (nothing to hold; a SYN it answers with a cookie is the generated kind syn_ack). */
  SynProxy,
  /** SYN proxy: a client packet that could be held but its source already holds HOLD_PER_SOURCE. */
  SynProxyHoldPerSource,
  /** PROXY protocol: client data before the stream start S while the server has not acknowledged
   *  the header, or before the server's SYN-ACK named S: it could land in the header's place
   *  (lb/xmit.ts proxyIn; a forged header). */
  ProxyForged,
}
export const DROP_NAMES = [
  'bad_version',
  'bad_header_length',
  'truncated',
  'bad_checksum',
  'fragment',
  'unsupported_protocol',
  'ipv6',
  'no_service',
  'no_real_server',
  'table_full',
  'no_connection',
  'real_server_gone',
  'icmp_ignored',
  'fullnat_ports_exhausted',
  'bad_offload',
  'too_big',
  'sctp_bad',
  'chain_full',
  'unanswerable_source',
  'rate_limited',
  'defense_drop_packet',
  'half_open_per_source',
  'no_tunnel_source',
  'output_full',
  'bad_cookie',
  'synproxy_hold_full',
  'synproxy',
  'synproxy_hold_per_source',
  'proxy_protocol_forged',
] as const;

/*
 * ── Worker → control rings (one SAB per worker; single producer, single consumer) ──────────
 * Workers never block on them and never talk to Redis: a full ring drops and counts.
 *   [RING_HDR_WORDS int32 header]
 *   [sync ring: SYNC_RING_SLOTS int32]        entry indices whose state should be written to Redis
 *   [park lengths: PARK_SLOTS int32]          byte length of each parked packet
 *   [park data: PARK_SLOTS × PARK_SLOT_BYTES]  packets waiting for a Redis lookup (adoption)
 *   [permits: PERMIT_SLOTS × PERMIT_WORDS int32] second chances, written by the control thread
 * Head/tail are free-running counters; slot = counter & (size − 1). The producer writes the data,
 * then publishes with Atomics.store(tail); the consumer reads up to tail, then stores head.
 */
export const RG_SYNC_HEAD = 0;
export const RG_SYNC_TAIL = 1;
export const RG_PARK_HEAD = 2;
export const RG_PARK_TAIL = 3;
export const RING_HDR_WORDS = 16;
export const SYNC_RING_SLOTS = 8192; // ≥ new flows per 50 ms drain at 100k conns/s per worker
export const PARK_SLOTS = 256; // packets parked for adoption at once, per worker
export const PARK_SLOT_BYTES = 2048; // ≥ MTU 1500; larger packets are not parked (dropped, counted)

/**
 * Second chances (issue 33; conntrack/redis-sync.ts secondChance): a client's mid-flow packet that
 * Redis knew nothing of twice, PERMIT_MIN_MS apart — long enough for a live node's record still in
 * flight to have arrived — is replayed once with a permit in every worker's ring. The worker that
 * reads it takes the permit instead of parking the packet again: a sloppy service schedules it,
 * any other answers it as a kernel director would (a RST for TCP). A permit is the flow's key
 * [proto, client, ports, VIP, fold of the IPv6 high words] and its expiry (table clock, 0 = none,
 * stored last), in slot permitIndex(key); a later permit for another flow of that slot replaces it.
 */
export const PERMIT_SLOTS = 256;
export const PERMIT_WORDS = 6;
export const PERMIT_EXPIRES = 5;
export const PERMIT_TTL_MS = 2000;
export const PERMIT_MIN_MS = 150;

export function ringBytes(): number {
  return (RING_HDR_WORDS + SYNC_RING_SLOTS + PARK_SLOTS) * 4 + PARK_SLOTS * PARK_SLOT_BYTES + PERMIT_SLOTS * PERMIT_WORDS * 4;
}
/** Word index of the permits. */
export function permitOffset(): number {
  return ((RING_HDR_WORDS + SYNC_RING_SLOTS + PARK_SLOTS) * 4 + PARK_SLOTS * PARK_SLOT_BYTES) >> 2;
}
/** A flow key's permit slot. */
export function permitIndex(proto: number, src: number, ports: number, dst: number, fold: number): number {
  let h = Math.imul(src ^ Math.imul(ports, 0x9e3779b1), 0x85ebca6b) ^ dst ^ fold ^ proto;
  h = Math.imul(h ^ (h >>> 15), 0xc2b2ae35);
  return (h ^ (h >>> 13)) & (PERMIT_SLOTS - 1);
}
export function syncRingOffset(): number {
  return RING_HDR_WORDS;
}
export function parkLensOffset(): number {
  return RING_HDR_WORDS + SYNC_RING_SLOTS;
}
/** Byte offset of park slot i's data. */
export function parkDataOffset(i: number): number {
  return (RING_HDR_WORDS + SYNC_RING_SLOTS + PARK_SLOTS) * 4 + i * PARK_SLOT_BYTES;
}

/** Table header: sync to Redis on (1) or off (0), set by the control thread. */
export const H_SYNC_ON = 9;
/** Sync threshold (kernel sync_threshold "3 50"): first sync at packet 3, then every 50. */
export const SYNC_THRESHOLD = 3;
export const SYNC_PERIOD = 50;
/** Entry word: table-relative ms of its last sync (refreshed once half its timeout has passed). */
export const E_SYNCED = 19;

/*
 * ── Capture (one SAB; flow sampling for debugging: lb/capture.ts, control/capture.ts) ───────
 *   [CAP_HDR_WORDS int32 header]               written by the control thread, read by workers
 *   per worker w, at capWorkerOffset(w) bytes:
 *     [CAPW_HDR_WORDS int32]                   head, tail (free-running), overruns
 *     [CAP_SLOTS × CAP_SLOT_BYTES]             records: CAPR_WORDS int32 then the packet's
 *                                              first CAP_SNAPLEN bytes
 * Off the packet path when not capturing: a worker loads CAP_ON once per batch and does nothing
 * else while it is 0. While on, every packet bumps a per-worker counter (sample 1 in N) or is
 * matched against the flow filter before it is processed; a chosen one is copied into the
 * worker's ring with the decision taken (verdict, drop reason, service, real server, state). A
 * full ring drops the record and counts an overrun; the worker never waits. The control thread
 * drains the rings every CAP_DRAIN_MS and bounds the capture in time and packets.
 */
export const CAP_ON = 0; // capture generation (≠ 0) while on, 0 off
export const CAP_MODE = 1; // CAP_MODE_SAMPLE | CAP_MODE_FLOW
export const CAP_SAMPLE_N = 2; // 1 in N packets per worker
export const CAP_F_PROTO = 3; // flow filter: IP protocol number, 0 = any
export const CAP_F_FAMILY = 4; // 4 or 6, 0 = any
export const CAP_F_PORT_A = 5; // endpoint A's port, −1 = any
export const CAP_F_PORT_B = 6; // endpoint B's port, −1 = any
export const CAP_F_HAS_A = 7; // 1 when endpoint A's address is set
export const CAP_F_HAS_B = 8;
export const CAP_F_ADDR_A = 12; // 4 words, big-endian words (IPv4: the last one)
export const CAP_F_ADDR_B = 16; // 4 words
export const CAP_HDR_WORDS = 32;
export const CAP_MODE_SAMPLE = 1;
export const CAP_MODE_FLOW = 2;
export const CAPW_HEAD = 0;
export const CAPW_TAIL = 1;
export const CAPW_OVERRUNS = 2;
export const CAPW_HDR_WORDS = 16;
// Record words.
export const CAPR_LEN = 0; // the packet's length (without virtio header)
export const CAPR_CAPLEN = 1; // bytes kept (≤ CAP_SNAPLEN)
export const CAPR_TIME_HI = 2; // ms since the Unix epoch, split in two words
export const CAPR_TIME_LO = 3;
export const CAPR_VERDICT = 4; // lb/verdict.ts DROP | FORWARD | REPLY
export const CAPR_DROP = 5; // Drop reason, −1 = none
export const CAPR_SVC = 6; // service slot, −1 = none
export const CAPR_RS = 7; // real-server slot, −1 = none
export const CAPR_STATE = 8; // the entry's state after the packet (TCP/SCTP state index), −1 = no entry
export const CAPR_PROTO = 9; // the entry's E_PROTO, 0 = no entry
export const CAPR_WORDS = 12;
/** Bytes of a packet kept: a full 1500-byte packet; GSO super-packets are cut (pcap caplen). */
export const CAP_SNAPLEN = 1600;
export const CAP_SLOT_BYTES = CAPR_WORDS * 4 + CAP_SNAPLEN;
/** Records per worker ring (power of two): 0.8 MB a worker; drained every 50 ms, 10 k records/s a worker. */
export const CAP_SLOTS = 512;
export const CAP_DRAIN_MS = 50;

export function capWorkerOffset(w: number): number {
  return CAP_HDR_WORDS * 4 + w * (CAPW_HDR_WORDS * 4 + CAP_SLOTS * CAP_SLOT_BYTES);
}
export function capBytes(workers: number): number {
  return capWorkerOffset(workers);
}
/** Byte offset of a record slot in worker w's ring. */
export function capSlotOffset(w: number, slot: number): number {
  return capWorkerOffset(w) + CAPW_HDR_WORDS * 4 + slot * CAP_SLOT_BYTES;
}
