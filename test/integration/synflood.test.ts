/**
 * A spoofed SYN flood against a real node (issue 12, defect 2): spoofed SYNs written into uvsd's
 * TUN device fill a small table (1024 entries: SYN_RECV holds one 60 s, so 50 SYN/s fill it in
 * ~20 s — the default table's 65 536 at ~1 100 SYN/s, scaled down). Without the defenses new
 * clients time out; with the default configuration (drop_entry and secure_tcp automatic) real
 * curl clients keep connecting through the whole flood, and an echo flow established before it
 * loses nothing. And (issue 25, item 3) a burst that fills the default table, with the default
 * configuration, costs none of 100 idle established connections: drop_entry gives up half-open
 * entries only (the kernel's todrop_entry took idle ones with few packets). Needs root; skipped
 * (and said so) otherwise.
 */
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { DefenseResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { idleConnections, type IdleConnections } from '../../lab/clients';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const UVSADM = join(ROOT, 'dist', 'control', 'uvsadm.js');
const isRoot = process.getuid?.() === 0;

const TABLE = 1024;
const FLOOD_RATE = 50; // SYN/s: 1024 / 50 ≈ 20 s to fill the table without defenses
const FLOOD_SECONDS = 45;

describe('a spoofed SYN flood against one node', {
  skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)',
  timeout: 600_000,
}, () => {
  const lab = new Lab({ prefix: `uvsf${process.pid % 100000}` });
  const services = [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
    { protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 9007 })) },
  ];
  let flood: ChildProcess | null = null;
  let idle: IdleConnections | null = null;
  const api = async <T>(path: string) => (await apiCall<T>(lab.socket, 'GET', path)).body;

  const startFlood = (seed: number, rate = FLOOD_RATE, seconds = FLOOD_SECONDS, count = rate * seconds): Promise<string> => {
    flood = lab.spawn(
      lab.lbNs,
      process.execPath,
      [TOOLS, 'syn-flood', 'uvs0', LAB_VIP, '80', String(rate), String(seconds), String(count), String(seed)],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    flood.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    return new Promise((r) => flood!.once('exit', () => r(out)));
  };
  const stopFlood = () => {
    if (flood && flood.exitCode === null) flood.kill('SIGTERM');
    flood = null;
  };
  /** An echo flow held open (a line every 200 ms) for `seconds`; resolves with what it saw. */
  const holdEcho = (seconds: number): Promise<{ sent: number; echoed: number; bad: number; error: string | null }> =>
    new Promise((resolve) => {
      const c = lab.spawn(lab.clientNs, process.execPath, [TOOLS, 'hold-echo', LAB_VIP, '7', String(seconds), '200'], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let out = '';
      c.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      c.once('exit', () => resolve(JSON.parse(out || '{"sent":0,"echoed":0,"bad":0,"error":"no output"}')));
    });
  /** One real client's HTTP request through the VIP: true when it got an answer. */
  const curlOk = (timeoutS: number): boolean => {
    try {
      const body = lab.exec(
        lab.clientNs,
        'curl',
        [
          '-s',
          '-o',
          '/dev/null',
          '-w',
          '%{http_code}',
          '--connect-timeout',
          String(timeoutS),
          '-m',
          String(timeoutS + 2),
          `http://${LAB_VIP}/`,
        ],
        (timeoutS + 5) * 1000,
      );
      return body.trim() === '200';
    } catch {
      return false;
    }
  };
  const startUvsd = async (defense: Record<string, unknown> | null) => {
    const cfg = lab.config(services, { dataplane: { tableSize: TABLE }, ...(defense ? { defense } : {}) });
    await lab.startUvsd(lab.writeConfig(cfg));
    // The flood's spoofed sources are answered into nowhere, silently (no ICMP back into uvs0).
    lab.ip(lab.lbNs, ['route', 'replace', 'blackhole', '10.77.0.0/16']);
    assert.ok(curlOk(5), 'a client connects before the flood');
  };

  before(async () => {
    lab.up();
    await lab.waitServers();
  });
  afterEach(async () => {
    stopFlood();
    idle?.child.kill('SIGKILL');
    idle = null;
    await lab.stopUvsd();
  });
  after(() => {
    stopFlood();
    lab.down();
  });

  test('with the defenses off the flood fills the table and new clients time out, established flows survive', async () => {
    await startUvsd({ dropEntry: 0, dropPacket: 0, secureTcp: 0, halfOpenPerSource: 0, synProxy: 0 });
    const echo = holdEcho(30);
    const done = startFlood(1);
    const deadline = Date.now() + 40_000;
    let s = await api<StatsResponse>('/v1/stats');
    while (s.table.entries < TABLE && Date.now() < deadline) {
      await sleep(500);
      s = await api<StatsResponse>('/v1/stats');
    }
    assert.equal(s.table.entries, TABLE, 'the flood fills the table');
    assert.equal(curlOk(3), false, 'a new client times out');
    assert.ok((await api<StatsResponse>('/v1/stats')).drops.table_full! > 0);
    stopFlood();
    await done;
    const e = await echo;
    assert.deepEqual([e.error, e.bad, e.echoed === e.sent, e.sent > 100], [null, 0, true, true], JSON.stringify(e));
  });

  test('with the default defenses real clients keep connecting through the whole flood and established flows lose nothing', async (t) => {
    await startUvsd(null);
    const echo = holdEcho(FLOOD_SECONDS - 5);
    const done = startFlood(2);
    // Clients one after another for the flood's length: the table fills after ~20 s.
    const started = Date.now();
    let tries = 0;
    const failed: number[] = [];
    let peak = 0;
    while (Date.now() - started < (FLOOD_SECONDS - 5) * 1000) {
      tries++;
      if (!curlOk(8)) failed.push(Math.round((Date.now() - started) / 1000));
      peak = Math.max(peak, (await api<StatsResponse>('/v1/stats')).table.entries);
      await sleep(500);
    }
    const d = await api<DefenseResponse>('/v1/defense');
    const sent = await done;
    const e = await echo;
    const ctx = JSON.stringify({ tries, failed, peak, sent, echo: { ...e }, defense: d });
    t.diagnostic(ctx);
    assert.ok(tries >= 20, ctx);
    assert.deepEqual(failed, [], `every client connected: ${ctx}`);
    assert.deepEqual([e.error, e.bad, e.echoed === e.sent, e.sent > 100], [null, 0, true, true], JSON.stringify(e));
    assert.ok(d.nomemTicks > 0, `the flood pressed the table below amemthresh: ${ctx}`);
    assert.ok(d.droppedHalfOpen + d.secureTcpShortened > 0, `the defenses acted: ${ctx}`);
    // The same through uvsadm and the metrics' source.
    const l = spawnSync(process.execPath, [UVSADM, '--socket', lab.socket, '-L', '--defense'], { encoding: 'utf8', timeout: 30000 });
    assert.equal(l.status, 0, l.stderr);
    assert.match(l.stdout, /^drop_entry\s+1\s+[12]\s+(yes|no)$/m);
    assert.match(l.stdout, /^secure_tcp\s+1\s+[12]\s+(yes|no)$/m);
    const m = /Dropped entries: (\d+) half-open/.exec(l.stdout);
    assert.ok(m && Number(m[1]) >= d.droppedHalfOpen, l.stdout);
    const metrics = lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);
    assert.match(metrics, /^uvs_defense_mode\{defense="dropEntry"\} [12]$/m);
    assert.match(metrics, /^uvs_defense_dropped_entries_total\{kind="half_open"\} \d+$/m);
    assert.match(metrics, /^uvs_defense_secure_tcp_shortened_total \d+$/m);
  });

  test('with the default configuration a burst that fills the default table costs no idle established connection', async (t) => {
    // The lab's table is the default (65 536 entries, amemthresh 4 096); nothing else is set.
    await lab.startUvsd(lab.writeConfig(lab.config(services)));
    lab.ip(lab.lbNs, ['route', 'replace', 'blackhole', '10.77.0.0/16']);
    const IDLE = 100;
    idle = idleConnections(lab.clientNs, LAB_VIP, 7, IDLE, 400);
    const ready = await idle.ready;
    assert.equal(ready.ready, IDLE, `every idle connection made its first exchange: ${JSON.stringify(ready)}`);
    // The kernel's todrop_entry takes an established entry only once it has been idle 60 s, and
    // drop_entry acts until 60 s (holdTime) after the last shortage: idle 35 s before the burst,
    // the connections are exposed for the last ≥ 40 s of it, more than one pass of its 1/32-a-tick
    // scan (before dropEntryScope: 36 of 100 lost with 61 s, 20 with 35 s).
    await sleep(35_000);
    const table = (await api<StatsResponse>('/v1/stats')).table;
    assert.equal(table.capacity, 65536);
    // More spoofed SYNs than the table holds, at a rate uvsd reads in full (unpaced, the generator
    // wrote 80 000 in 1.2 s and the device's queues dropped half): 20 000/s fill it in ~3.3 s;
    // 120 000 leave room for a busy machine reading less.
    const done = startFlood(3, 20_000, 10, 120_000);
    let peak = 0;
    let flooding = true;
    void done.then(() => (flooding = false));
    while (flooding) {
      peak = Math.max(peak, (await api<StatsResponse>('/v1/stats')).table.entries);
      await sleep(200);
    }
    const sent = await done;
    const pressed = await api<DefenseResponse>('/v1/defense');
    // drop_entry acts until no tick has been short of room for holdTime (60 s): wait it out.
    const deadline = Date.now() + 150_000;
    let d = pressed;
    while (d.defenses.find((x) => x.name === 'dropEntry')!.active && Date.now() < deadline) {
      await sleep(1000);
      d = await api<DefenseResponse>('/v1/defense');
    }
    const results = await idle.check();
    const lost = results.filter((r) => !r.ok);
    const ctx = JSON.stringify({ sent, peak, lost, pressed, defense: d });
    t.diagnostic(ctx);
    assert.ok(pressed.nomemTicks > 0, `the burst pressed the table below amemthresh: ${ctx}`);
    assert.equal(d.defenses.find((x) => x.name === 'dropEntry')!.active, false, `drop_entry stood down within 150 s: ${ctx}`);
    assert.ok(d.droppedHalfOpen + d.secureTcpShortened > 0, `the defenses gave up half-open entries: ${ctx}`);
    assert.equal(results.length, IDLE);
    assert.deepEqual(lost, [], `every idle connection still carries bytes both ways: ${ctx}`);
    assert.equal(d.droppedIdle, 0, `no idle entry was dropped: ${ctx}`);
  });
});
