/**
 * The whole IPVS SCTP state table, every (direction × event × state) entry, against a copy written
 * here independently of conntrack/sctp-state.ts, from the kernel source:
 *
 *   net/netfilter/ipvs/ip_vs_proto_sctp.c, gregkh/linux commit b051dc3b1d1ad7a2110f12c3d2229b30fd69d90e:
 *     sctp_states[IP_VS_DIR_LAST][IP_VS_SCTP_EVENT_LAST][IP_VS_SCTP_S_LAST]  (INPUT, OUTPUT,
 *     INPUT-ONLY; rows d i i_a c_e c_a s s_a s_c err ab), sctp_timeouts[], sctp_state_name_table[],
 *     and set_sctp_state() (NOOUTPUT → INPUT-ONLY; only ESTABLISHED is active).
 * Mutation testing found 8 of its 30 rows unguarded by the unit suite (test/mutation/REPORT.md).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import * as S from '../../conntrack/sctp-state';
import { DIR_INPUT, DIR_INPUT_ONLY, DIR_OUTPUT, TCP_DEFAULT_TIMEOUTS } from '../../conntrack/state';
import { ConnTable, createRealServerRegion } from '../../conntrack/table';
import { newFlow } from '../../conntrack/flow';

// The kernel's enum order (IP_VS_SCTP_S_*): the columns of every row below.
const COLUMNS = 'NO I1 IN CS CR CW CO CE ES SS SR SA RJ CL'.split(' ');
const KERNEL_NAMES = [
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
];
const MAX_RTO = 60 + 1;
const KERNEL_TIMEOUT_S = [
  2,
  0 + 3 + 1,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  15 * 60,
  MAX_RTO,
  MAX_RTO,
  MAX_RTO,
  0 + 3 + 1,
  MAX_RTO,
];
// The kernel's event enum order and the chunk type that makes each (sctp_events[]).
const EVENTS = ['d', 'i', 'i_a', 'c_e', 'c_a', 's', 's_a', 's_c', 'err', 'ab'];
const CHUNK_OF_EVENT: Record<string, number> = { d: 0, i: 1, i_a: 2, c_e: 10, c_a: 11, s: 7, s_a: 8, s_c: 14, err: 9, ab: 6 };

const KERNEL_SCTP_STATES: Record<'in' | 'out' | 'io', string> = {
  in: `
    d   ES I1 IN CS CR CW CO CE ES SS SR SA RJ CL
    i   I1 IN IN CS CR CW CO CE ES SS SR SA IN IN
    i_a CW CW CW CS CR CO CO CE ES SS SR SA RJ CL
    c_e CR IN IN CR CR CW CO CE ES SS SR SA RJ CL
    c_a ES I1 IN CS CR CW CO ES ES SS SR SA RJ CL
    s   SR I1 IN CS CR CW CO CE SR SS SR SA RJ CL
    s_a CL IN IN CS CR CW CO CE ES CL SR CL RJ CL
    s_c CL CL CL CS CR CW CO CE ES SS SR CL RJ CL
    err CL I1 IN CS CR CW CO CL ES SS SR SA RJ CL
    ab  CL CL CL CL CL RJ CL CL CL CL CL CL CL CL`,
  out: `
    d   ES I1 IN CS CR CW CO CE ES SS SR SA RJ CL
    i   CW CW CW CW CW CW CW CW ES CW CW CW CW CW
    i_a CS CS CS CS CR CW CO CE ES SS SR SA RJ CL
    c_e CE CE CE CE CE CE CE CE ES SS SR SA RJ CL
    c_a ES ES ES ES ES ES ES ES ES SS SR SA RJ CL
    s   SS SS SS SS SS SS SS SS SS SS SR SA RJ CL
    s_a SA SA SA SA SA CW CO CE ES SA SA SA RJ CL
    s_c CL I1 IN CS CR CW CO CE ES SS SR SA RJ CL
    err CL CL CL CL CL CW CO CE ES SS SR SA RJ CL
    ab  CL RJ CL CL CL CL CL CL CL CL CL CL CL CL`,
  io: `
    d   ES I1 IN CS CR ES CO CE ES SS SR SA RJ CL
    i   I1 IN IN IN IN IN CO CE ES SS SR SA IN IN
    i_a CE CE CE CE CE CE CO CE ES SS SR SA RJ CL
    c_e ES ES ES ES ES ES CO CE ES SS SR SA RJ CL
    c_a ES I1 IN ES ES CW ES ES ES SS SR SA RJ CL
    s   SR I1 IN CS CR CW CO CE SR SS SR SA RJ CL
    s_a CL IN IN CS CR CW CO CE CL CL SR CL RJ CL
    s_c CL CL CL CL CL CW CO CE ES SS CL CL RJ CL
    err CL I1 IN CS CR CW CO CE ES SS SR SA RJ CL
    ab  CL CL CL CL CL RJ CL CL CL CL CL CL CL CL`,
};
const DIR = { in: DIR_INPUT, out: DIR_OUTPUT, io: DIR_INPUT_ONLY };
const ENTRIES = (Object.keys(KERNEL_SCTP_STATES) as ('in' | 'out' | 'io')[]).flatMap((dir) =>
  KERNEL_SCTP_STATES[dir]
    .trim()
    .split('\n')
    .flatMap((line) => {
      const [event, ...next] = line.trim().split(/\s+/) as [string, ...string[]];
      assert.equal(next.length, 14, line);
      return next.map((to, i) => ({ dir, event, from: COLUMNS[i]!, to }));
    }),
);
const idx = (c: string) => COLUMNS.indexOf(c);

test("the transcribed kernel SCTP table has 420 entries; names, timeouts and chunk events are the kernel's", () => {
  assert.equal(ENTRIES.length, 3 * 10 * 14);
  assert.equal(S.SCTP_STATE_COUNT, 14);
  assert.deepEqual([...S.SCTP_STATE_NAMES], KERNEL_NAMES);
  assert.deepEqual(S.SCTP_DEFAULT_TIMEOUTS, KERNEL_TIMEOUT_S);
  assert.deepEqual(
    EVENTS.map((e) => S.sctpChunkEvent(CHUNK_OF_EVENT[e]!)),
    EVENTS.map((_, i) => i),
  );
  for (const other of [3, 4, 5, 12, 13, 15, 64, 255]) assert.equal(S.sctpChunkEvent(other), 0, `chunk ${other} is "data"`);
  assert.deepEqual(
    COLUMNS.filter((_, i) => S.SCTP_ACTIVE[i] === 1),
    ['ES'],
  );
});

test('sctpNextState follows every one of the 420 kernel entries', () => {
  const wrong = ENTRIES.filter((e) => S.sctpNextState(DIR[e.dir], EVENTS.indexOf(e.event), idx(e.from)) !== idx(e.to)).map(
    (e) =>
      `${e.dir} ${e.event} in ${e.from}: ${COLUMNS[S.sctpNextState(DIR[e.dir], EVENTS.indexOf(e.event), idx(e.from))]}, kernel ${e.to}`,
  );
  assert.deepEqual(wrong, []);
});

test('ConnTable.touch takes every kernel SCTP entry: next state, ActiveConn (ESTABLISHED only), timer from sctp_timeouts', () => {
  const wrong: string[] = [];
  for (const ent of ENTRIES) {
    const rsSab = createRealServerRegion(4);
    const rs = new Int32Array(rsSab);
    const t = new ConnTable(
      ConnTable.create(16, { tcp: TCP_DEFAULT_TIMEOUTS, udp: 300, sctp: [...S.SCTP_DEFAULT_TIMEOUTS] }),
      rsSab,
      L.OWNER_CONTROL,
    );
    const now = t.now();
    const e = t.insert(
      newFlow({
        proto: 132,
        caddr: 0x0a000002,
        cports: (5000 << 16) | 80,
        vaddr: 0x0a600001,
        daddr: 0x0a0b0002,
        dports: (3868 << 16) | 5000,
        laddr: 0x0a000002,
        flags: ent.dir === 'io' ? L.F_NOOUTPUT : 0,
        rs: 1,
        now,
      }),
    );
    const o = t.base(e);
    t.i32[o + L.E_STATE] = idx(ent.from);
    if (ent.from === 'ES') {
      t.i32[o + L.E_FLAGS]! &= ~L.F_INACTIVE;
      rs[L.RS_WORDS + L.RS_ACTIVE] = 1;
      rs[L.RS_WORDS + L.RS_INACTIVE] = 0;
    }
    t.touch(e, ent.dir === 'out' ? DIR_OUTPUT : DIR_INPUT, EVENTS.indexOf(ent.event), now + 3);
    const what = `${ent.dir} ${ent.event} in ${ent.from}`;
    const got = COLUMNS[t.i32[o + L.E_STATE]!];
    if (got !== ent.to) wrong.push(`${what}: state ${got}, kernel ${ent.to}`);
    const active = rs[L.RS_WORDS + L.RS_ACTIVE];
    if (active !== (ent.to === 'ES' ? 1 : 0)) wrong.push(`${what}: ActiveConn ${active}`);
    if (t.i32[o + L.E_EXPIRES] !== ((now + 3 + KERNEL_TIMEOUT_S[idx(ent.to)]! * 1000) | 0)) wrong.push(`${what}: timer`);
  }
  assert.deepEqual(wrong, []);
});
