/**
 * IPVS connection states and timeouts (kernel net/netfilter/ipvs/ip_vs_proto_tcp.c, _udp.c;
 * docs/ipvs-semantics.md §3.3–3.4).
 *
 * TCP: the event is chosen from the flags with priority RST > SYN > FIN > ACK; a segment with
 * none of those moves to CLOSE (a kernel quirk kept on purpose). Direction INPUT is client→server,
 * OUTPUT server→client (seen only for masq/full-NAT), INPUT_ONLY is used while the entry still has
 * NOOUTPUT (tunnel/DR, or masq before the first reply). Active states (counted in ActiveConn) are
 * ESTABLISHED, SYN_SENT, SYN_RECV and SYNACK, as in modern kernels.
 *
 * UDP: one state; every UDP entry is counted in InActConn for its whole life.
 */

export const TCP_NONE = 0;
export const TCP_ESTABLISHED = 1;
export const TCP_SYN_SENT = 2;
export const TCP_SYN_RECV = 3;
export const TCP_FIN_WAIT = 4;
export const TCP_TIME_WAIT = 5;
export const TCP_CLOSE = 6;
export const TCP_CLOSE_WAIT = 7;
export const TCP_LAST_ACK = 8;
export const TCP_LISTEN = 9;
export const TCP_SYNACK = 10;
export const TCP_STATE_COUNT = 11;

export const TCP_STATE_NAMES = [
  'NONE',
  'ESTABLISHED',
  'SYN_SENT',
  'SYN_RECV',
  'FIN_WAIT',
  'TIME_WAIT',
  'CLOSE',
  'CLOSE_WAIT',
  'LAST_ACK',
  'LISTEN',
  'SYNACK',
] as const;

/** Kernel tcp_timeouts, seconds. */
export const TCP_DEFAULT_TIMEOUTS = [2, 900, 120, 60, 120, 120, 10, 60, 30, 120, 120];
export const UDP_DEFAULT_TIMEOUT = 300;

export const DIR_INPUT = 0;
export const DIR_OUTPUT = 1;
export const DIR_INPUT_ONLY = 2;

export const EV_SYN = 0;
export const EV_FIN = 1;
export const EV_ACK = 2;
export const EV_RST = 3;
export const EV_NONE = 4; // no RST/SYN/FIN/ACK: next state CLOSE

// Column order of the kernel table: NO ES SS SR FW TW CL CW LA LI SA.
const NO = TCP_NONE,
  ES = TCP_ESTABLISHED,
  SS = TCP_SYN_SENT,
  SR = TCP_SYN_RECV,
  FW = TCP_FIN_WAIT,
  TW = TCP_TIME_WAIT,
  CL = TCP_CLOSE,
  CW = TCP_CLOSE_WAIT,
  LA = TCP_LAST_ACK,
  LI = TCP_LISTEN,
  SA = TCP_SYNACK;

// biome-ignore format: the kernel's state table, one row per event and a column per state
const TABLE: number[][][] = [
  [ // INPUT
    /*syn*/ [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SR],
    /*fin*/ [CL, CW, SS, TW, TW, TW, CL, CW, LA, LI, TW],
    /*ack*/ [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
    /*rst*/ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, SR],
  ],
  [ // OUTPUT
    /*syn*/ [SS, ES, SS, SR, SS, SS, SS, SS, SS, LI, SR],
    /*fin*/ [TW, FW, SS, TW, FW, TW, CL, TW, LA, LI, TW],
    /*ack*/ [ES, ES, SS, ES, FW, TW, CL, CW, LA, ES, ES],
    /*rst*/ [CL, CL, SS, CL, CL, TW, CL, CL, CL, CL, CL],
  ],
  [ // INPUT_ONLY
    /*syn*/ [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SR],
    /*fin*/ [CL, FW, SS, TW, FW, TW, CL, CW, LA, LI, TW],
    /*ack*/ [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
    /*rst*/ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL],
  ],
];

/**
 * secure_tcp's table (kernel tcp_states_dos, ip_vs_proto_tcp.c; ipvs-sysctl.rst: "a more
 * complicated TCP state transition table"). It differs from the one above in 15 cells: an ACK in
 * SYN_RECV stays SYN_RECV, the server's SYN-ACK moves SYN_RECV to SYNACK, and only a packet of the
 * server after the handshake (OUTPUT ack in SYNACK) makes a masq/full-NAT flow ESTABLISHED — a
 * client that only sends can no longer buy itself the 900 s ESTABLISHED timer. For one-way flows
 * (INPUT_ONLY, tunnel) a SYN leads to SYNACK and the client's ACK to ESTABLISHED.
 */
// biome-ignore format: the kernel's state table, one row per event and a column per state
const TABLE_DOS: number[][][] = [
  [ // INPUT
    /*syn*/ [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SA],
    /*fin*/ [CL, CW, SS, TW, TW, TW, CL, CW, LA, LI, SA],
    /*ack*/ [ES, ES, SS, SR, FW, TW, CL, CW, CL, LI, SA],
    /*rst*/ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL],
  ],
  [ // OUTPUT
    /*syn*/ [SS, ES, SS, SA, SS, SS, SS, SS, SS, LI, SA],
    /*fin*/ [TW, FW, SS, TW, FW, TW, CL, TW, LA, LI, TW],
    /*ack*/ [ES, ES, SS, ES, FW, TW, CL, CW, LA, ES, ES],
    /*rst*/ [CL, CL, SS, CL, CL, TW, CL, CL, CL, CL, CL],
  ],
  [ // INPUT_ONLY
    /*syn*/ [SA, ES, ES, SR, SA, SA, SA, SA, SA, SA, SA],
    /*fin*/ [CL, FW, SS, TW, FW, TW, CL, CW, LA, LI, TW],
    /*ack*/ [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
    /*rst*/ [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL],
  ],
];

function flatten(table: number[][][]): Uint8Array {
  const t = new Uint8Array(3 * 5 * TCP_STATE_COUNT);
  for (let d = 0; d < 3; d++) {
    for (let ev = 0; ev < 5; ev++) {
      for (let s = 0; s < TCP_STATE_COUNT; s++) t[(d * 5 + ev) * TCP_STATE_COUNT + s] = ev === EV_NONE ? CL : table[d]![ev]![s]!;
    }
  }
  return t;
}

/** Flattened: index = (dir * 5 + event) * 11 + state. Event EV_NONE always yields CLOSE. */
export const TCP_TRANSITIONS = flatten(TABLE);
/** The same for secure_tcp (tcp_states_dos). */
export const TCP_TRANSITIONS_DOS = flatten(TABLE_DOS);

/**
 * 1 where a TCP state is half-open (no handshake completed yet): NONE, SYN_SENT, SYN_RECV, SYNACK.
 * Counted per client source (the half-open cap) and shortened by secure_tcp (but NONE, 2 s).
 */
export const TCP_HALF_OPEN = new Uint8Array(TCP_STATE_COUNT);
TCP_HALF_OPEN[NO] = 1;
TCP_HALF_OPEN[SS] = 1;
TCP_HALF_OPEN[SR] = 1;
TCP_HALF_OPEN[SA] = 1;

/** 1 where the state counts as active (ActiveConn), per tcp_state_active_table. */
export const TCP_ACTIVE = new Uint8Array(TCP_STATE_COUNT);
TCP_ACTIVE[ES] = 1;
TCP_ACTIVE[SS] = 1;
TCP_ACTIVE[SR] = 1;
TCP_ACTIVE[SA] = 1;

// TCP header flag bits.
export const TCPF_FIN = 0x01;
export const TCPF_SYN = 0x02;
export const TCPF_RST = 0x04;
export const TCPF_PSH = 0x08;
export const TCPF_ACK = 0x10;
export const TCPF_CWR = 0x80;

/** Event index from TCP flags, priority RST > SYN > FIN > ACK. */
export function tcpEvent(flags: number): number {
  if (flags & TCPF_RST) return EV_RST;
  if (flags & TCPF_SYN) return EV_SYN;
  if (flags & TCPF_FIN) return EV_FIN;
  if (flags & TCPF_ACK) return EV_ACK;
  return EV_NONE;
}

/** Next state; `secure` selects secure_tcp's table (tcp_states_dos). */
export function tcpNextState(dir: number, flags: number, state: number, secure = false): number {
  return (secure ? TCP_TRANSITIONS_DOS : TCP_TRANSITIONS)[(dir * 5 + tcpEvent(flags)) * TCP_STATE_COUNT + state]!;
}
