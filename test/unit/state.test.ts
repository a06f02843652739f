import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as S from '../../conntrack/state';

const SYN = S.TCPF_SYN,
  ACK = S.TCPF_ACK,
  FIN = S.TCPF_FIN,
  RST = S.TCPF_RST;

function walk(steps: [number, number][]): string[] {
  let st = S.TCP_NONE;
  return steps.map(([dir, flags]) => {
    st = S.tcpNextState(dir, flags, st);
    return S.TCP_STATE_NAMES[st]!;
  });
}

test('a masq connection walks SYN_RECV, ESTABLISHED, CLOSE_WAIT, TIME_WAIT as in the kernel walk-through', () => {
  assert.deepEqual(
    walk([
      [S.DIR_INPUT, SYN],
      [S.DIR_OUTPUT, SYN | ACK],
      [S.DIR_INPUT, ACK],
      [S.DIR_INPUT, FIN | ACK],
      [S.DIR_OUTPUT, FIN | ACK],
      [S.DIR_INPUT, ACK],
    ]),
    ['SYN_RECV', 'SYN_RECV', 'ESTABLISHED', 'CLOSE_WAIT', 'TIME_WAIT', 'TIME_WAIT'],
  );
});

test('a one-directional (tunnel/DR) connection walks SYN_RECV, ESTABLISHED, FIN_WAIT and RST closes it', () => {
  assert.deepEqual(
    walk([
      [S.DIR_INPUT_ONLY, SYN],
      [S.DIR_INPUT_ONLY, ACK],
      [S.DIR_INPUT_ONLY, FIN | ACK],
      [S.DIR_INPUT_ONLY, ACK],
      [S.DIR_INPUT_ONLY, RST],
    ]),
    ['SYN_RECV', 'ESTABLISHED', 'FIN_WAIT', 'FIN_WAIT', 'CLOSE'],
  );
});

test('flag priority is RST over SYN over FIN over ACK, and a segment with none of them closes', () => {
  assert.equal(S.tcpEvent(RST | SYN | FIN | ACK), S.EV_RST);
  assert.equal(S.tcpEvent(SYN | FIN | ACK), S.EV_SYN);
  assert.equal(S.tcpEvent(FIN | ACK), S.EV_FIN);
  assert.equal(S.tcpEvent(ACK), S.EV_ACK);
  assert.equal(S.tcpNextState(S.DIR_INPUT, 0x08 /* PSH only */, S.TCP_ESTABLISHED), S.TCP_CLOSE);
});

test('an ACK in state NONE lands in ESTABLISHED (modern table: mid-stream pickup)', () => {
  assert.equal(S.tcpNextState(S.DIR_INPUT, ACK, S.TCP_NONE), S.TCP_ESTABLISHED);
});

test('exactly ESTABLISHED, SYN_SENT, SYN_RECV and SYNACK are active states', () => {
  const active = S.TCP_STATE_NAMES.filter((_, i) => S.TCP_ACTIVE[i] === 1);
  assert.deepEqual(active, ['ESTABLISHED', 'SYN_SENT', 'SYN_RECV', 'SYNACK']);
});

test('the default timeouts are the kernel ones: 900 established, 120 fin_wait, 300 udp', () => {
  assert.equal(S.TCP_DEFAULT_TIMEOUTS[S.TCP_ESTABLISHED], 900);
  assert.equal(S.TCP_DEFAULT_TIMEOUTS[S.TCP_FIN_WAIT], 120);
  assert.equal(S.TCP_DEFAULT_TIMEOUTS[S.TCP_SYN_RECV], 60);
  assert.equal(S.TCP_DEFAULT_TIMEOUTS[S.TCP_CLOSE], 10);
  assert.equal(S.UDP_DEFAULT_TIMEOUT, 300);
});
