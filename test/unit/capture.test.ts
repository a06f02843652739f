/**
 * Flow sampling: the workers' capture tap and ring (lb/capture.ts), the drain, the pcap writer
 * and the JSON lines (control/capture.ts). The lab test (test/integration/capture.test.ts) runs it
 * through uvsd with curl and tcpdump.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as L from '../../conntrack/layout';
import { CaptureTap } from '../../lb/capture';
import { DROP, FORWARD } from '../../lb/verdict';
import { describeRecord, drainRing, pcapHeader, pcapRecord, validateCaptureRequest, type CaptureRecord } from '../../control/capture';
import { UvsError } from '../../control/errors';

/** A minimal IPv4 TCP packet (checksums not needed by the tap). */
function tcp4(src: string, sport: number, dst: string, dport: number, flags = 0x02, payload = 0): Uint8Array {
  const b = new Uint8Array(40 + payload);
  b[0] = 0x45;
  b[2] = (40 + payload) >> 8;
  b[3] = (40 + payload) & 255;
  b[8] = 64;
  b[9] = 6;
  src.split('.').forEach((x, i) => (b[12 + i] = Number(x)));
  dst.split('.').forEach((x, i) => (b[16 + i] = Number(x)));
  b[20] = sport >> 8;
  b[21] = sport & 255;
  b[22] = dport >> 8;
  b[23] = dport & 255;
  b[32] = 0x50;
  b[33] = flags;
  return b;
}

function setup(workers = 1) {
  const sab = new SharedArrayBuffer(L.capBytes(workers));
  const h = new Int32Array(sab, 0, L.CAP_HDR_WORDS);
  return { sab, h, taps: Array.from({ length: workers }, (_, i) => new CaptureTap(sab, i)) };
}

function offer(tap: CaptureTap, p: Uint8Array, verdict = FORWARD, drop = -1): boolean {
  const took = tap.begin(p, 0, p.length, 1_700_000_000_123);
  if (took) tap.end(verdict, drop, 3, 5, 3, 6);
  return took;
}

const names = {
  service: (s: number) => (s === 3 ? 'tcp 10.200.0.10:80' : null),
  realServer: (s: number) => (s === 5 ? '10.200.11.2:8080' : null),
};

test('nothing is captured while CAP_ON is 0: the worker asks once per batch', () => {
  const { h, taps } = setup();
  assert.equal(taps[0]!.on(), 0);
  h[L.CAP_MODE] = L.CAP_MODE_SAMPLE;
  h[L.CAP_SAMPLE_N] = 1;
  Atomics.store(h, L.CAP_ON, 1);
  assert.equal(taps[0]!.on(), 1);
});

test('sampling takes 1 in N packets per worker, restarting the count for each capture', () => {
  const { sab, h, taps } = setup();
  h[L.CAP_MODE] = L.CAP_MODE_SAMPLE;
  h[L.CAP_SAMPLE_N] = 3;
  Atomics.store(h, L.CAP_ON, 1);
  taps[0]!.on();
  const p = tcp4('10.0.0.1', 40000, '10.200.0.10', 80);
  const took = Array.from({ length: 9 }, () => offer(taps[0]!, p));
  assert.deepEqual(took, [false, false, true, false, false, true, false, false, true]);
  const recs: CaptureRecord[] = [];
  drainRing(sab, 0, recs);
  assert.equal(recs.length, 3);
  assert.deepEqual(Array.from(recs[0]!.data), Array.from(p), 'the packet as it arrived');
  assert.equal(recs[0]!.timeMs, 1_700_000_000_123);
  Atomics.store(h, L.CAP_ON, 2);
  taps[0]!.on();
  offer(taps[0]!, p);
  offer(taps[0]!, p);
  assert.equal(offer(taps[0]!, p), true, 'a new generation counts from 0 again');
});

test('the flow filter matches both directions of one flow and nothing else', () => {
  const { h, taps } = setup();
  h[L.CAP_MODE] = L.CAP_MODE_FLOW;
  h[L.CAP_F_PROTO] = 6;
  h[L.CAP_F_FAMILY] = 4;
  h[L.CAP_F_PORT_A] = 40000;
  h[L.CAP_F_PORT_B] = -1;
  h[L.CAP_F_HAS_A] = 1;
  h[L.CAP_F_ADDR_A + 3] = 0x0a000001; // 10.0.0.1
  h[L.CAP_F_HAS_B] = 0;
  Atomics.store(h, L.CAP_ON, 1);
  const t = taps[0]!;
  t.on();
  assert.equal(offer(t, tcp4('10.0.0.1', 40000, '10.200.0.10', 80)), true, 'client → VIP');
  assert.equal(offer(t, tcp4('10.200.11.2', 8080, '10.0.0.1', 40000)), true, 'real server → client (masq reply)');
  assert.equal(offer(t, tcp4('10.0.0.1', 40001, '10.200.0.10', 80)), false, 'another port of the client');
  assert.equal(offer(t, tcp4('10.0.0.2', 40000, '10.200.0.10', 80)), false, 'another client');
  const udp = tcp4('10.0.0.1', 40000, '10.200.0.10', 80);
  udp[9] = 17;
  assert.equal(offer(t, udp), false, 'another protocol');
  h[L.CAP_F_HAS_B] = 1;
  h[L.CAP_F_ADDR_B + 3] = 0x0ac8000a; // 10.200.0.10
  h[L.CAP_F_PORT_B] = 80;
  assert.equal(offer(t, tcp4('10.0.0.1', 40000, '10.200.0.10', 80)), true, 'both endpoints');
  assert.equal(offer(t, tcp4('10.0.0.1', 40000, '10.200.0.11', 80)), false, 'another VIP');
});

test('a full ring drops the record and counts an overrun; draining makes room again', () => {
  const { sab, h, taps } = setup(2);
  h[L.CAP_MODE] = L.CAP_MODE_SAMPLE;
  h[L.CAP_SAMPLE_N] = 1;
  Atomics.store(h, L.CAP_ON, 1);
  const t = taps[1]!;
  t.on();
  const p = tcp4('10.0.0.1', 40000, '10.200.0.10', 80, 0x10, 3000);
  for (let i = 0; i < L.CAP_SLOTS; i++) assert.equal(offer(t, p), true);
  assert.equal(offer(t, p), false, 'full: not captured, the worker goes on');
  assert.equal(offer(t, p), false);
  const a = new Int32Array(sab);
  assert.equal(a[(L.capWorkerOffset(1) >> 2) + L.CAPW_OVERRUNS], 2);
  const recs: CaptureRecord[] = [];
  drainRing(sab, 0, recs);
  assert.equal(recs.length, 0, 'worker 0 has its own ring');
  drainRing(sab, 1, recs);
  assert.equal(recs.length, L.CAP_SLOTS);
  assert.equal(recs[0]!.len, 3040);
  assert.equal(recs[0]!.data.length, L.CAP_SNAPLEN, 'cut at the snap length; the original length is kept');
  assert.equal(offer(t, p), true, 'room again');
});

test('a record becomes a JSON line with the decision taken', () => {
  const { sab, h, taps } = setup();
  h[L.CAP_MODE] = L.CAP_MODE_SAMPLE;
  h[L.CAP_SAMPLE_N] = 1;
  Atomics.store(h, L.CAP_ON, 1);
  taps[0]!.on();
  offer(taps[0]!, tcp4('10.0.0.1', 40000, '10.200.0.10', 80, 0x02));
  const p = tcp4('10.0.0.9', 1, '10.200.0.99', 81, 0x02);
  taps[0]!.begin(p, 0, p.length, 1_700_000_000_500);
  taps[0]!.end(DROP, L.DROP_NAMES.indexOf('no_service'), -1, -1, -1, 0);
  const recs: CaptureRecord[] = [];
  drainRing(sab, 0, recs);
  assert.deepEqual(describeRecord(recs[0]!, names), {
    time: '2023-11-14T22:13:20.123Z',
    worker: 0,
    length: 40,
    src: '10.0.0.1',
    dst: '10.200.0.10',
    protocol: 'tcp',
    sport: 40000,
    dport: 80,
    tcpFlags: 'SYN',
    verdict: 'forward',
    service: 'tcp 10.200.0.10:80',
    realServer: '10.200.11.2:8080',
    state: 'SYN_RECV',
  });
  const d = describeRecord(recs[1]!, names);
  assert.equal(d.verdict, 'drop');
  assert.equal(d.dropReason, 'no_service');
  assert.equal(d.service, undefined);
});

test('the pcap file is what tcpdump reads: raw IP link type, timestamps, lengths', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'uvs-pcap-'));
  try {
    const p = tcp4('10.0.0.1', 40000, '10.200.0.10', 80, 0x02);
    const file = join(dir, 'c.pcap');
    writeFileSync(
      file,
      Buffer.concat([
        pcapHeader(),
        pcapRecord(1_700_000_000_123, p.length, p),
        pcapRecord(1_700_000_001_000, 3000, tcp4('10.200.0.10', 80, '10.0.0.1', 40000, 0x12)),
      ]),
    );
    const hdr = pcapHeader();
    assert.equal(hdr.readUInt32LE(0), 0xa1b2c3d4);
    assert.equal(hdr.readUInt32LE(20), 101);
    let out: string;
    try {
      out = execFileSync('tcpdump', ['-nn', '-tt', '-r', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return t.skip('tcpdump is not installed (scripts/ensure-deps.sh installs it)');
      throw e;
    }
    const lines = out.trim().split('\n');
    assert.equal(lines.length, 2);
    assert.match(lines[0]!, /^1700000000\.123000 IP 10\.0\.0\.1\.40000 > 10\.200\.0\.10\.80: Flags \[S\]/);
    assert.match(lines[1]!, /^1700000001\.000000 IP 10\.200\.0\.10\.80 > 10\.0\.0\.1\.40000: Flags \[S\.\]/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('capture requests are validated: one of sample or flow, bounded time and packets, known fields', () => {
  assert.deepEqual(validateCaptureRequest({ sample: 10 }), { sample: 10, seconds: 10, maxPackets: 1000, format: 'pcap' });
  assert.deepEqual(validateCaptureRequest({ flow: { address: '10.0.0.1', port: 40000 }, format: 'jsonl', seconds: 3 }), {
    flow: { address: '10.0.0.1', port: 40000 },
    seconds: 3,
    maxPackets: 1000,
    format: 'jsonl',
  });
  const bad = (v: unknown, path: RegExp) =>
    assert.throws(
      () => validateCaptureRequest(v),
      (e: unknown) => e instanceof UvsError && e.code === 'UVS_ERR_API_BAD_REQUEST' && path.test(e.message),
    );
  bad({}, /^capture: give either/);
  bad({ sample: 2, flow: { port: 1 } }, /^capture: give either/);
  bad({ sample: 0 }, /capture\.sample: must be an integer from 1/);
  bad({ sample: 2, seconds: 301 }, /capture\.seconds/);
  bad({ sample: 2, maxPackets: 100_001 }, /capture\.maxPackets/);
  bad({ sample: 2, format: 'text' }, /capture\.format/);
  bad({ sample: 2, snaplen: 5 }, /capture\.snaplen: unknown field/);
  bad({ flow: { address: 'nope' } }, /capture\.flow\.address/);
  bad({ flow: { address: '10.0.0.1', peer: 'fd00::1' } }, /capture\.flow\.peer: address and peer must be of one family/);
  bad({ flow: {} }, /capture\.flow: needs at least one/);
});
