/**
 * The whole IPVS TCP state table, every (direction × event × state) entry, against a copy written
 * here independently of conntrack/state.ts, from the kernel source:
 *
 *   net/netfilter/ipvs/ip_vs_proto_tcp.c, gregkh/linux commit b051dc3b1d1ad7a2110f12c3d2229b30fd69d90e
 *   (identical in kernel-patches/bpf 7a3e927a; older trees before "ack in NONE → ES" have sCL there):
 *     tcp_timeouts[]           ≈ lines 358–371   (seconds below)
 *     tcp_state_active_table[] ≈ lines 388–400
 *     tcp_states[]             ≈ lines 432–453   (INPUT, OUTPUT, INPUT-ONLY; rows syn, fin, ack, rst)
 *     tcp_state_idx()          rst → 3, syn → 0, fin → 1, ack → 2, none of them → -1
 *     set_tcp_state()          -1 → new_state stays IP_VS_TCP_S_CLOSE; NOOUTPUT turns INPUT into
 *                              INPUT-ONLY and is cleared by the first OUTPUT packet.
 * (Line numbers counted from the stored copy; the symbols are what to look for.)
 *
 * Two layers are driven: state.ts's tcpNextState with real flag bytes (several per event, to pin
 * the priority), and ConnTable.touch on a real entry (direction from NOOUTPUT, the entry's state,
 * ActiveConn/InActConn moves and the re-armed timer).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import * as S from '../../conntrack/state';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';
import { newFlow } from '../../conntrack/flow';

// The kernel's enum order (include/net/ip_vs.h IP_VS_TCP_S_*), the columns of every row below.
const COLUMNS = 'NO ES SS SR FW TW CL CW LA LI SA'.split(' ');
const KERNEL_NAMES = [
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
];
const KERNEL_TIMEOUT_S = {
  NO: 2,
  ES: 15 * 60,
  SS: 2 * 60,
  SR: 60,
  FW: 2 * 60,
  TW: 2 * 60,
  CL: 10,
  CW: 60,
  LA: 30,
  LI: 2 * 60,
  SA: 120,
} as Record<string, number>;
const KERNEL_ACTIVE = new Set(['ES', 'SS', 'SR', 'SA']);

// tcp_states[], transcribed row by row: "<direction> <event>: next state for NO ES SS … SA".
const KERNEL_TCP_STATES = `
  in  syn: SR ES ES SR SR SR SR SR SR SR SR
  in  fin: CL CW SS TW TW TW CL CW LA LI TW
  in  ack: ES ES SS ES FW TW CL CW CL LI ES
  in  rst: CL CL CL SR CL CL CL CL LA LI SR
  out syn: SS ES SS SR SS SS SS SS SS LI SR
  out fin: TW FW SS TW FW TW CL TW LA LI TW
  out ack: ES ES SS ES FW TW CL CW LA ES ES
  out rst: CL CL SS CL CL TW CL CL CL CL CL
  io  syn: SR ES ES SR SR SR SR SR SR SR SR
  io  fin: CL FW SS TW FW TW CL CW LA LI TW
  io  ack: ES ES SS ES FW TW CL CW CL LI ES
  io  rst: CL CL CL SR CL CL CL CL LA LI CL
`;

interface Entry {
  dir: 'in' | 'out' | 'io';
  event: 'syn' | 'fin' | 'ack' | 'rst';
  from: string;
  to: string;
}
const ENTRIES: Entry[] = KERNEL_TCP_STATES.trim()
  .split('\n')
  .flatMap((line) => {
    const [head, cells] = line.split(':') as [string, string];
    const [dir, event] = head.trim().split(/\s+/) as [Entry['dir'], Entry['event']];
    const next = cells.trim().split(/\s+/);
    assert.equal(next.length, 11, line);
    return next.map((to, i) => ({ dir, event, from: COLUMNS[i]!, to }));
  });

const FIN = 0x01,
  SYN = 0x02,
  RST = 0x04,
  PSH = 0x08,
  ACK = 0x10,
  URG = 0x20,
  ECE = 0x40,
  CWR = 0x80;
// Flag bytes that make each event (tcp_state_idx's priority rst > syn > fin > ack).
const FLAGS: Record<Entry['event'], number[]> = {
  syn: [SYN, SYN | ACK, SYN | FIN, SYN | ECE | CWR, SYN | FIN | ACK | PSH],
  fin: [FIN, FIN | ACK, FIN | PSH | ACK, FIN | URG],
  ack: [ACK, ACK | PSH, ACK | URG | ECE],
  rst: [RST, RST | ACK, RST | SYN, RST | FIN, RST | SYN | FIN | ACK],
};
const NO_EVENT_FLAGS = [0, PSH, URG, ECE, CWR, PSH | URG | ECE | CWR];
const DIR = { in: S.DIR_INPUT, out: S.DIR_OUTPUT, io: S.DIR_INPUT_ONLY };
const idx = (col: string) => COLUMNS.indexOf(col);
const hex = (f: number) => `0x${f.toString(16).padStart(2, '0')}`;

test('the transcribed kernel table has 132 entries, and state.ts numbers and names states as the kernel does', () => {
  assert.equal(ENTRIES.length, 3 * 4 * 11);
  assert.equal(S.TCP_STATE_COUNT, 11);
  assert.deepEqual([...S.TCP_STATE_NAMES], KERNEL_NAMES);
  assert.deepEqual(
    S.TCP_DEFAULT_TIMEOUTS,
    COLUMNS.map((c) => KERNEL_TIMEOUT_S[c]),
  );
  assert.deepEqual(
    COLUMNS.filter((_, i) => S.TCP_ACTIVE[i] === 1),
    ['ES', 'SS', 'SR', 'SA'],
  );
});

test('tcpNextState follows every one of the 132 kernel entries, for every flag byte that makes the event', () => {
  const wrong: string[] = [];
  let checked = 0;
  for (const e of ENTRIES) {
    for (const f of FLAGS[e.event]) {
      const got = S.tcpNextState(DIR[e.dir], f, idx(e.from));
      checked++;
      if (got !== idx(e.to)) wrong.push(`${e.dir} ${e.event} (flags ${hex(f)}) in ${e.from}: ${COLUMNS[got] ?? got}, kernel ${e.to}`);
    }
  }
  assert.deepEqual(wrong, []);
  assert.ok(checked > 500);
});

test('a segment with none of RST, SYN, FIN, ACK moves every state in every direction to CLOSE', () => {
  for (const dir of Object.values(DIR)) {
    for (let s = 0; s < 11; s++) {
      for (const f of NO_EVENT_FLAGS) assert.equal(S.tcpNextState(dir, f, s), idx('CL'), `dir ${dir} state ${COLUMNS[s]} flags ${hex(f)}`);
    }
  }
});

test('the two entries mutation testing found unguarded: server RST in ESTABLISHED → CLOSE; client FIN in SYN_RECV → TIME_WAIT', () => {
  assert.equal(S.tcpNextState(S.DIR_OUTPUT, RST | ACK, S.TCP_ESTABLISHED), S.TCP_CLOSE);
  assert.equal(S.tcpNextState(S.DIR_INPUT, FIN | ACK, S.TCP_SYN_RECV), S.TCP_TIME_WAIT);
  assert.equal(S.tcpNextState(S.DIR_INPUT_ONLY, FIN | ACK, S.TCP_SYN_RECV), S.TCP_TIME_WAIT);
});

// ── The same 132 entries through ConnTable.touch ───────────────────────────────────────────────
const CADDR = 0x0a000002,
  VADDR = 0x0a600001,
  DADDR = 0x0a0b0002;
const CPORTS = (40000 << 16) | 80,
  DPORTS = (8080 << 16) | 40000;
const RS_SLOT = 1;

/** A fresh table with one TCP entry put in state `from` (counted as the kernel counts it there). */
function entryIn(from: number, noOutput: boolean) {
  const rsSab = createRealServerRegion(4);
  const rs = new Int32Array(rsSab);
  const t = new ConnTable(ConnTable.create(16, { tcp: S.TCP_DEFAULT_TIMEOUTS, udp: 300 }), rsSab, L.OWNER_CONTROL);
  const now = t.now();
  const e = t.insert(
    newFlow({
      proto: 6,
      caddr: CADDR,
      cports: CPORTS,
      vaddr: VADDR,
      daddr: DADDR,
      dports: DPORTS,
      laddr: CADDR,
      flags: noOutput ? L.F_NOOUTPUT : 0,
      rs: RS_SLOT,
      now,
    }),
  );
  assert.ok(e >= 0);
  const o = t.base(e);
  const r = RS_SLOT * L.RS_WORDS;
  assert.deepEqual([rs[r + L.RS_ACTIVE], rs[r + L.RS_INACTIVE]], [0, 1], 'a new entry is inactive (state NONE)');
  t.i32[o + L.E_STATE] = from;
  if (KERNEL_ACTIVE.has(COLUMNS[from]!)) {
    t.i32[o + L.E_FLAGS]! &= ~L.F_INACTIVE;
    rs[r + L.RS_ACTIVE] = 1;
    rs[r + L.RS_INACTIVE] = 0;
  }
  return { t, e, o, rs, r, now };
}

test('ConnTable.touch takes every kernel entry: next state, ActiveConn/InActConn per tcp_state_active_table, timer from tcp_timeouts', () => {
  const wrong: string[] = [];
  for (const ent of ENTRIES) {
    // INPUT-ONLY is what a client packet on a NOOUTPUT entry (tunnel, DR) uses; INPUT and OUTPUT
    // are a masq entry's two directions.
    const { t, e, o, rs, r, now } = entryIn(idx(ent.from), ent.dir === 'io');
    const f = FLAGS[ent.event][1]!;
    t.touch(e, ent.dir === 'out' ? S.DIR_OUTPUT : S.DIR_INPUT, f, now + 5);
    const got = COLUMNS[t.i32[o + L.E_STATE]!];
    const counts = [rs[r + L.RS_ACTIVE], rs[r + L.RS_INACTIVE]];
    const wantCounts = KERNEL_ACTIVE.has(ent.to) ? [1, 0] : [0, 1];
    const expires = t.i32[o + L.E_EXPIRES]!;
    const wantExpires = (now + 5 + KERNEL_TIMEOUT_S[ent.to]! * 1000) | 0;
    const what = `${ent.dir} ${ent.event} (flags ${hex(f)}) in ${ent.from}`;
    if (got !== ent.to) wrong.push(`${what}: state ${got}, kernel ${ent.to}`);
    if (counts[0] !== wantCounts[0] || counts[1] !== wantCounts[1]) wrong.push(`${what}: active/inactive ${counts}, kernel ${wantCounts}`);
    if (expires !== wantExpires) wrong.push(`${what}: expires in ${expires - now - 5} ms, kernel ${KERNEL_TIMEOUT_S[ent.to]} s`);
    if (((t.i32[o + L.E_FLAGS]! & L.F_INACTIVE) !== 0) === KERNEL_ACTIVE.has(ent.to)) wrong.push(`${what}: INACTIVE flag wrong`);
  }
  assert.deepEqual(wrong, []);
});

test('NOOUTPUT: client packets use INPUT-ONLY until the first server packet, which clears it for good', () => {
  // ES + client FIN: INPUT-ONLY says FIN_WAIT, INPUT says CLOSE_WAIT — the row tells which table ran.
  const a = entryIn(idx('ES'), true);
  a.t.touch(a.e, S.DIR_INPUT, FIN | ACK, a.now);
  assert.equal(COLUMNS[a.t.i32[a.o + L.E_STATE]!], 'FW');
  const b = entryIn(idx('ES'), true);
  b.t.touch(b.e, S.DIR_OUTPUT, ACK, b.now);
  assert.equal(b.t.i32[b.o + L.E_FLAGS]! & L.F_NOOUTPUT, 0, 'the server packet cleared NOOUTPUT');
  b.t.touch(b.e, S.DIR_INPUT, FIN | ACK, b.now);
  assert.equal(COLUMNS[b.t.i32[b.o + L.E_STATE]!], 'CW', 'then a client FIN uses the INPUT row');
});
