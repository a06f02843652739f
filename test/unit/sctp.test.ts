/**
 * SCTP on its own: the CRC32c against published vectors, the chunk-list checks, and the kernel's
 * state table walked the way associations walk it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as S from '../../conntrack/sctp-state';
import { DIR_INPUT, DIR_INPUT_ONLY, DIR_OUTPUT } from '../../conntrack/state';
import * as P from '../../net/packet';
import { crc32c, SCTP_BAD_CRC, SCTP_MALFORMED, sctpCrc, sctpInspect, sctpSeal } from '../../lb/sctp';
import { crc32cBitwise, initValue, sctp } from '../helpers/packets';

const bytes = (n: number, f: (i: number) => number) => Uint8Array.from({ length: n }, (_, i) => f(i));

test('CRC32c matches the RFC 3720 B.4 vectors and the check value of "123456789"', () => {
  // iSCSI (RFC 3720 appendix B.4) uses the same CRC32c as SCTP (RFC 9260 appendix A).
  assert.equal(
    crc32c(
      bytes(32, () => 0),
      0,
      32,
    ),
    0x8a9136aa,
  );
  assert.equal(
    crc32c(
      bytes(32, () => 0xff),
      0,
      32,
    ),
    0x62a8ab43,
  );
  assert.equal(
    crc32c(
      bytes(32, (i) => i),
      0,
      32,
    ),
    0x46dd794e,
  );
  assert.equal(
    crc32c(
      bytes(32, (i) => 31 - i),
      0,
      32,
    ),
    0x113fdb5c,
  );
  const readPdu = [
    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
  ];
  assert.equal(crc32c(Uint8Array.from(readPdu), 0, 48), 0xd9963a56);
  const check = new TextEncoder().encode('123456789');
  assert.equal(crc32c(check, 0, check.length), 0xe3069283, 'a length that is no multiple of 8 uses the byte loop too');
});

test('the table-driven CRC32c equals the bitwise one at every length and offset up to 80 bytes', () => {
  const data = bytes(96, (i) => (i * 73 + 11) & 255);
  for (let start = 0; start < 8; start++) {
    for (let end = start; end <= start + 80; end++)
      assert.equal(crc32c(data, start, end), crc32cBitwise(data.subarray(start, end)), `[${start}, ${end})`);
  }
});

test('the SCTP checksum is the CRC32c of the packet with its checksum field as zeros, stored least significant byte first', () => {
  const pkt = sctp({
    src: '192.168.1.100',
    dst: '10.96.0.10',
    sport: 5000,
    dport: 3868,
    vtag: 0x01020304,
    chunks: [{ type: S.SCTP_CID_DATA, value: bytes(21, (i) => i) }],
  });
  const l4 = 20;
  const want = (pkt[l4 + 8]! | (pkt[l4 + 9]! << 8) | (pkt[l4 + 10]! << 16) | (pkt[l4 + 11]! << 24)) >>> 0;
  assert.equal(sctpCrc(pkt, l4, pkt.length), want);
  pkt.fill(0xee, l4 + 8, l4 + 12);
  sctpSeal(pkt, l4, pkt.length);
  assert.equal(sctpCrc(pkt, l4, pkt.length), want, 'sealing ignores what the field held');
  assert.equal((pkt[l4 + 8]! | (pkt[l4 + 9]! << 8) | (pkt[l4 + 10]! << 16) | (pkt[l4 + 11]! << 24)) >>> 0, want);
});

test("inspection gives the first chunk's event; unknown chunk types count as data", () => {
  const ev = (chunks: { type: number; value?: Uint8Array }[]) => {
    const p = sctp({ src: '192.168.1.100', dst: '10.96.0.10', chunks });
    return sctpInspect(p, 20, p.length);
  };
  assert.equal(ev([{ type: S.SCTP_CID_INIT, value: initValue(7) }]), S.SCTP_EV_INIT);
  assert.equal(
    ev([
      { type: S.SCTP_CID_SACK, value: bytes(12, () => 0) },
      { type: S.SCTP_CID_DATA, value: bytes(5, () => 1) },
    ]),
    S.SCTP_EV_DATA,
  );
  assert.equal(ev([{ type: S.SCTP_CID_HEARTBEAT, value: bytes(8, () => 2) }]), S.SCTP_EV_DATA);
  assert.equal(ev([{ type: 192 /* FORWARD TSN */, value: bytes(4, () => 0) }]), S.SCTP_EV_DATA);
  assert.equal(ev([{ type: S.SCTP_CID_SHUTDOWN_COMPLETE }]), S.SCTP_EV_SHUTDOWN_COMPLETE);
  assert.equal(ev([{ type: S.SCTP_CID_COOKIE_ECHO, value: bytes(7, () => 3) }]), S.SCTP_EV_COOKIE_ECHO);
  assert.equal(
    ev([{ type: S.SCTP_CID_COOKIE_ECHO, value: bytes(7, () => 3) }, { type: S.SCTP_CID_ABORT }]),
    S.SCTP_EV_ABORT,
    'an ABORT bundled after COOKIE ECHO wins',
  );
  assert.equal(ev([{ type: S.SCTP_CID_COOKIE_ACK }, { type: S.SCTP_CID_ABORT }]), S.SCTP_EV_ABORT);
  assert.equal(
    ev([{ type: S.SCTP_CID_SHUTDOWN, value: bytes(4, () => 0) }, { type: S.SCTP_CID_ABORT }]),
    S.SCTP_EV_SHUTDOWN,
    'only after COOKIE ECHO / COOKIE ACK',
  );
});

test('malformed chunk lists and wrong CRCs are refused', () => {
  const good = sctp({ src: '192.168.1.100', dst: '10.96.0.10', chunks: [{ type: S.SCTP_CID_DATA, value: bytes(8, () => 9) }] });
  const reseal = (p: Uint8Array) => {
    sctpSeal(p, 20, p.length);
    return p;
  };
  assert.equal(sctpInspect(good, 20, 32), SCTP_MALFORMED, 'a common header and no chunk');
  assert.equal(sctpInspect(good, 20, 34), SCTP_MALFORMED, 'half a chunk header');
  const short = reseal(good.slice());
  P.put16(short, 34, 3);
  assert.equal(sctpInspect(reseal(short), 20, short.length), SCTP_MALFORMED, 'chunk length below its header');
  const long = good.slice();
  P.put16(long, 34, 13);
  assert.equal(sctpInspect(reseal(long), 20, long.length), SCTP_MALFORMED, 'chunk running past the packet');
  const flipped = good.slice();
  flipped[40]! ^= 1;
  assert.equal(sctpInspect(flipped, 20, flipped.length), SCTP_BAD_CRC);
  assert.equal(sctpInspect(good, 20, good.length), S.SCTP_EV_DATA);
});

/** Walks the state table from NONE: each step is [direction, event]; returns the names passed. */
function walk(steps: [number, number][], from = S.SCTP_S_NONE): string[] {
  let st = from;
  return steps.map(([dir, ev]) => S.SCTP_STATE_NAMES[(st = S.sctpNextState(dir, ev, st))]!);
}
const IN = DIR_INPUT;
const OUT = DIR_OUTPUT;

test('a NAT association: INIT, INIT ACK, COOKIE ECHO, COOKIE ACK, data, client shutdown', () => {
  assert.deepEqual(
    walk([
      [IN, S.SCTP_EV_INIT],
      [OUT, S.SCTP_EV_INIT_ACK],
      [IN, S.SCTP_EV_COOKIE_ECHO],
      [OUT, S.SCTP_EV_COOKIE_ACK],
      [IN, S.SCTP_EV_DATA],
      [OUT, S.SCTP_EV_DATA],
      [IN, S.SCTP_EV_SHUTDOWN],
      [OUT, S.SCTP_EV_SHUTDOWN_ACK],
      [IN, S.SCTP_EV_SHUTDOWN_COMPLETE],
    ]),
    ['INIT1', 'C-SENT', 'C-REPLIED', 'ESTABLISHED', 'ESTABLISHED', 'ESTABLISHED', 'S-RECEIVED', 'S-ACK-SENT', 'CLOSED'],
  );
});

test('server shutdown, aborts, a retransmitted INIT and a refused one', () => {
  const es = S.SCTP_S_ESTABLISHED;
  assert.deepEqual(
    walk(
      [
        [OUT, S.SCTP_EV_SHUTDOWN],
        [IN, S.SCTP_EV_SHUTDOWN_ACK],
        [OUT, S.SCTP_EV_SHUTDOWN_COMPLETE],
      ],
      es,
    ),
    ['S-SENT', 'CLOSED', 'CLOSED'],
  );
  assert.deepEqual(walk([[IN, S.SCTP_EV_ABORT]], es), ['CLOSED']);
  assert.deepEqual(walk([[OUT, S.SCTP_EV_ABORT]], es), ['CLOSED']);
  assert.deepEqual(
    walk([
      [IN, S.SCTP_EV_INIT],
      [IN, S.SCTP_EV_INIT],
    ]),
    ['INIT1', 'INIT'],
    'the second INIT gets the long timer',
  );
  assert.deepEqual(
    walk([
      [IN, S.SCTP_EV_INIT],
      [OUT, S.SCTP_EV_ABORT],
    ]),
    ['INIT1', 'REJECTED'],
  );
  assert.deepEqual(walk([[IN, S.SCTP_EV_INIT]], S.SCTP_S_CLOSED), ['INIT']);
  assert.deepEqual(
    walk([
      [OUT, S.SCTP_EV_INIT],
      [IN, S.SCTP_EV_INIT_ACK],
      [OUT, S.SCTP_EV_COOKIE_ECHO],
      [IN, S.SCTP_EV_COOKIE_ACK],
    ]),
    ['C-WAIT', 'COOKIE', 'C-ECHOED', 'ESTABLISHED'],
    'an association the server starts',
  );
});

test('tunnel (one direction seen): INIT then COOKIE ECHO is ESTABLISHED, ABORT closes', () => {
  assert.deepEqual(
    walk([
      [DIR_INPUT_ONLY, S.SCTP_EV_INIT],
      [DIR_INPUT_ONLY, S.SCTP_EV_COOKIE_ECHO],
      [DIR_INPUT_ONLY, S.SCTP_EV_DATA],
      [DIR_INPUT_ONLY, S.SCTP_EV_ABORT],
    ]),
    ['INIT1', 'ESTABLISHED', 'ESTABLISHED', 'CLOSED'],
  );
});

test("only ESTABLISHED is active; timeouts are the kernel's", () => {
  assert.deepEqual(
    S.SCTP_STATE_NAMES.filter((_, i) => S.SCTP_ACTIVE[i] === 1),
    ['ESTABLISHED'],
  );
  const t = Object.fromEntries(S.SCTP_STATE_KEYS.map((k, i) => [k, S.SCTP_DEFAULT_TIMEOUTS[i]]));
  assert.deepEqual(t, {
    NONE: 2,
    INIT1: 4,
    INIT: 61,
    COOKIE_SENT: 61,
    COOKIE_REPLIED: 61,
    COOKIE_WAIT: 61,
    COOKIE: 61,
    COOKIE_ECHOED: 61,
    ESTABLISHED: 900,
    SHUTDOWN_SENT: 61,
    SHUTDOWN_RECEIVED: 61,
    SHUTDOWN_ACK_SENT: 61,
    REJECTED: 4,
    CLOSED: 61,
  });
});
