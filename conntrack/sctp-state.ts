/**
 * IPVS's SCTP association states and timeouts (kernel net/netfilter/ipvs/ip_vs_proto_sctp.c:
 * sctp_events[], sctp_states[][][], sctp_timeouts[], sctp_state_name_table[]; the state enum in
 * include/net/ip_vs.h; docs/ipvs-semantics.md §3.5). Facts from there, our own tables.
 *
 * The state is that of the association as the real server sees it. An event is taken from the
 * packet's first chunk (lb/sctp.ts): DATA, SACK, HEARTBEAT(-ACK), ECNE, CWR and every type the
 * kernel's table does not name (above SHUTDOWN COMPLETE, 14) count as "data"; a COOKIE ECHO or
 * COOKIE ACK with an ABORT bundled right after it counts as ABORT. Directions as for TCP: INPUT
 * client→server, OUTPUT server→client (masq and full-NAT see replies), INPUT_ONLY while the entry
 * has NOOUTPUT (tunnel).
 *
 * Only ESTABLISHED counts in ActiveConn; every other state in InActConn. INIT1 and REJECTED keep
 * short timers (4 s) so a dropped or refused INIT does not hold an entry; the handshake and
 * shutdown states last the maximum RTO (61 s); ESTABLISHED 900 s, as TCP's.
 */

// State indices: the kernel's IP_VS_SCTP_S_* order (synced records carry these numbers).
export const SCTP_S_NONE = 0;
export const SCTP_S_INIT1 = 1;
export const SCTP_S_INIT = 2;
export const SCTP_S_COOKIE_SENT = 3;
export const SCTP_S_COOKIE_REPLIED = 4;
export const SCTP_S_COOKIE_WAIT = 5;
export const SCTP_S_COOKIE = 6;
export const SCTP_S_COOKIE_ECHOED = 7;
export const SCTP_S_ESTABLISHED = 8;
export const SCTP_S_SHUTDOWN_SENT = 9;
export const SCTP_S_SHUTDOWN_RECEIVED = 10;
export const SCTP_S_SHUTDOWN_ACK_SENT = 11;
export const SCTP_S_REJECTED = 12;
export const SCTP_S_CLOSED = 13;
export const SCTP_STATE_COUNT = 14;

/** Configuration names (timeouts.sctp keys): the kernel's IP_VS_SCTP_S_* suffixes. */
export const SCTP_STATE_KEYS = [
  'NONE',
  'INIT1',
  'INIT',
  'COOKIE_SENT',
  'COOKIE_REPLIED',
  'COOKIE_WAIT',
  'COOKIE',
  'COOKIE_ECHOED',
  'ESTABLISHED',
  'SHUTDOWN_SENT',
  'SHUTDOWN_RECEIVED',
  'SHUTDOWN_ACK_SENT',
  'REJECTED',
  'CLOSED',
] as const;

/** Names as the kernel prints them (/proc/net/ip_vs_conn, ipvsadm -Lnc): sctp_state_name_table. */
export const SCTP_STATE_NAMES = [
  'NONE',
  'INIT1',
  'INIT',
  'C-SENT',
  'C-REPLIED',
  'C-WAIT',
  'COOKIE',
  'C-ECHOED',
  'ESTABLISHED',
  'S-SENT',
  'S-RECEIVED',
  'S-ACK-SENT',
  'REJECTED',
  'CLOSED',
] as const;

/** IP_VS_SCTP_MAX_RTO: (60 + 1) s. */
const MAX_RTO = 61;

/** Kernel sctp_timeouts, seconds, by state. */
export const SCTP_DEFAULT_TIMEOUTS = [
  2,
  4,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  900,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  4,
  MAX_RTO,
];

// Events (kernel enum ipvs_sctp_event_t).
export const SCTP_EV_DATA = 0;
export const SCTP_EV_INIT = 1;
export const SCTP_EV_INIT_ACK = 2;
export const SCTP_EV_COOKIE_ECHO = 3;
export const SCTP_EV_COOKIE_ACK = 4;
export const SCTP_EV_SHUTDOWN = 5;
export const SCTP_EV_SHUTDOWN_ACK = 6;
export const SCTP_EV_SHUTDOWN_COMPLETE = 7;
export const SCTP_EV_ERROR = 8;
export const SCTP_EV_ABORT = 9;
export const SCTP_EVENT_COUNT = 10;

// Chunk types (RFC 9260 §3.2) the event table names.
export const SCTP_CID_DATA = 0;
export const SCTP_CID_INIT = 1;
export const SCTP_CID_INIT_ACK = 2;
export const SCTP_CID_SACK = 3;
export const SCTP_CID_HEARTBEAT = 4;
export const SCTP_CID_HEARTBEAT_ACK = 5;
export const SCTP_CID_ABORT = 6;
export const SCTP_CID_SHUTDOWN = 7;
export const SCTP_CID_SHUTDOWN_ACK = 8;
export const SCTP_CID_ERROR = 9;
export const SCTP_CID_COOKIE_ECHO = 10;
export const SCTP_CID_COOKIE_ACK = 11;
export const SCTP_CID_ECNE = 12;
export const SCTP_CID_CWR = 13;
export const SCTP_CID_SHUTDOWN_COMPLETE = 14;

/** Event by chunk type 0..14 (sctp_events[]); any higher type is "data". */
const EVENT_OF_CHUNK = new Uint8Array(256); // 0 = SCTP_EV_DATA
EVENT_OF_CHUNK[SCTP_CID_INIT] = SCTP_EV_INIT;
EVENT_OF_CHUNK[SCTP_CID_INIT_ACK] = SCTP_EV_INIT_ACK;
EVENT_OF_CHUNK[SCTP_CID_ABORT] = SCTP_EV_ABORT;
EVENT_OF_CHUNK[SCTP_CID_SHUTDOWN] = SCTP_EV_SHUTDOWN;
EVENT_OF_CHUNK[SCTP_CID_SHUTDOWN_ACK] = SCTP_EV_SHUTDOWN_ACK;
EVENT_OF_CHUNK[SCTP_CID_ERROR] = SCTP_EV_ERROR;
EVENT_OF_CHUNK[SCTP_CID_COOKIE_ECHO] = SCTP_EV_COOKIE_ECHO;
EVENT_OF_CHUNK[SCTP_CID_COOKIE_ACK] = SCTP_EV_COOKIE_ACK;
EVENT_OF_CHUNK[SCTP_CID_SHUTDOWN_COMPLETE] = SCTP_EV_SHUTDOWN_COMPLETE;

export function sctpChunkEvent(chunkType: number): number {
  return EVENT_OF_CHUNK[chunkType & 255]!;
}

const NO = SCTP_S_NONE,
  I1 = SCTP_S_INIT1,
  IN = SCTP_S_INIT,
  CS = SCTP_S_COOKIE_SENT,
  CR = SCTP_S_COOKIE_REPLIED,
  CW = SCTP_S_COOKIE_WAIT,
  CO = SCTP_S_COOKIE,
  CE = SCTP_S_COOKIE_ECHOED,
  ES = SCTP_S_ESTABLISHED,
  SS = SCTP_S_SHUTDOWN_SENT,
  SR = SCTP_S_SHUTDOWN_RECEIVED,
  SA = SCTP_S_SHUTDOWN_ACK_SENT,
  RJ = SCTP_S_REJECTED,
  CL = SCTP_S_CLOSED;
void NO;

// Rows = event, columns = current state NO I1 IN CS CR CW CO CE ES SS SR SA RJ CL.
// biome-ignore format: the kernel's state table, one row per event and a column per state
const TABLE: number[][][] = [
  [ // INPUT
    /*d  */ [ES, I1, IN, CS, CR, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*i  */ [I1, IN, IN, CS, CR, CW, CO, CE, ES, SS, SR, SA, IN, IN],
    /*i_a*/ [CW, CW, CW, CS, CR, CO, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*c_e*/ [CR, IN, IN, CR, CR, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*c_a*/ [ES, I1, IN, CS, CR, CW, CO, ES, ES, SS, SR, SA, RJ, CL],
    /*s  */ [SR, I1, IN, CS, CR, CW, CO, CE, SR, SS, SR, SA, RJ, CL],
    /*s_a*/ [CL, IN, IN, CS, CR, CW, CO, CE, ES, CL, SR, CL, RJ, CL],
    /*s_c*/ [CL, CL, CL, CS, CR, CW, CO, CE, ES, SS, SR, CL, RJ, CL],
    /*err*/ [CL, I1, IN, CS, CR, CW, CO, CL, ES, SS, SR, SA, RJ, CL],
    /*ab */ [CL, CL, CL, CL, CL, RJ, CL, CL, CL, CL, CL, CL, CL, CL],
  ],
  [ // OUTPUT
    /*d  */ [ES, I1, IN, CS, CR, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*i  */ [CW, CW, CW, CW, CW, CW, CW, CW, ES, CW, CW, CW, CW, CW],
    /*i_a*/ [CS, CS, CS, CS, CR, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*c_e*/ [CE, CE, CE, CE, CE, CE, CE, CE, ES, SS, SR, SA, RJ, CL],
    /*c_a*/ [ES, ES, ES, ES, ES, ES, ES, ES, ES, SS, SR, SA, RJ, CL],
    /*s  */ [SS, SS, SS, SS, SS, SS, SS, SS, SS, SS, SR, SA, RJ, CL],
    /*s_a*/ [SA, SA, SA, SA, SA, CW, CO, CE, ES, SA, SA, SA, RJ, CL],
    /*s_c*/ [CL, I1, IN, CS, CR, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*err*/ [CL, CL, CL, CL, CL, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*ab */ [CL, RJ, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL],
  ],
  [ // INPUT_ONLY
    /*d  */ [ES, I1, IN, CS, CR, ES, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*i  */ [I1, IN, IN, IN, IN, IN, CO, CE, ES, SS, SR, SA, IN, IN],
    /*i_a*/ [CE, CE, CE, CE, CE, CE, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*c_e*/ [ES, ES, ES, ES, ES, ES, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*c_a*/ [ES, I1, IN, ES, ES, CW, ES, ES, ES, SS, SR, SA, RJ, CL],
    /*s  */ [SR, I1, IN, CS, CR, CW, CO, CE, SR, SS, SR, SA, RJ, CL],
    /*s_a*/ [CL, IN, IN, CS, CR, CW, CO, CE, CL, CL, SR, CL, RJ, CL],
    /*s_c*/ [CL, CL, CL, CL, CL, CW, CO, CE, ES, SS, CL, CL, RJ, CL],
    /*err*/ [CL, I1, IN, CS, CR, CW, CO, CE, ES, SS, SR, SA, RJ, CL],
    /*ab */ [CL, CL, CL, CL, CL, RJ, CL, CL, CL, CL, CL, CL, CL, CL],
  ],
];

/** Flattened: index = (dir * SCTP_EVENT_COUNT + event) * SCTP_STATE_COUNT + state. */
export const SCTP_TRANSITIONS = new Uint8Array(3 * SCTP_EVENT_COUNT * SCTP_STATE_COUNT);
for (let d = 0; d < 3; d++) {
  for (let ev = 0; ev < SCTP_EVENT_COUNT; ev++) {
    for (let s = 0; s < SCTP_STATE_COUNT; s++) SCTP_TRANSITIONS[(d * SCTP_EVENT_COUNT + ev) * SCTP_STATE_COUNT + s] = TABLE[d]![ev]![s]!;
  }
}

/** 1 where the state counts in ActiveConn: ESTABLISHED only (set_sctp_state). */
export const SCTP_ACTIVE = new Uint8Array(SCTP_STATE_COUNT);
SCTP_ACTIVE[ES] = 1;

/**
 * 1 where an association is half-open (no handshake completed): NONE through COOKIE_ECHOED.
 * Counted per client source, like TCP's (defense.ts); drop_entry itself drops only INIT1 and INIT.
 */
export const SCTP_HALF_OPEN = new Uint8Array(SCTP_STATE_COUNT);
for (let s = SCTP_S_NONE; s < SCTP_S_ESTABLISHED; s++) SCTP_HALF_OPEN[s] = 1;

/** Next state for an event (SCTP_EV_*) seen in direction dir (state.ts DIR_*). */
export function sctpNextState(dir: number, event: number, state: number): number {
  return SCTP_TRANSITIONS[(dir * SCTP_EVENT_COUNT + event) * SCTP_STATE_COUNT + state]!;
}
