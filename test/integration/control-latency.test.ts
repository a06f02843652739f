/**
 * The control thread never stalls (issue 25, item 6): while the largest requests uvsd accepts run
 * — reloads of configurations at issue 25's limits (maxServices 1024, maxRealServers 4096), a
 * POST /v1/batch of 100 000 operations (the schema's maximum), the reads of such a configuration
 * (metrics, GET /v1/services, /v1/config, /v1/connections), a capture of 100 000 packets, and a
 * disruption preview of 4 000 real servers against a full connection table, and at 5,000
 * services under the default limits (issue 37) an edit, a reload of one weight and a reload that
 * replaces one real server in every service — a probe asks
 * /healthz and GET /v1/info on the API socket and /healthz on TCP, one every 5 ms
 * (test/helpers/latency-probe.ts), and reads, for each answer, what uvsd's control thread and the
 * probe did meanwhile (schedstat).
 *
 * Asserted for every answer during each request: status 200, and 100 ms (the issue's bound) for
 *  - the CPU time the control thread ran while the answer was awaited: what a request that holds
 *    the thread costs every probe behind it (0.3 to 28 s before the fix). uvsd cuts request-sized
 *    work into slices of 5 ms (control/slices.ts) or hands it to its control worker
 *    (control/offload.ts); what remains in one piece — a GC pause, a fork for `ip`, a snapshot's
 *    clone — measured 10 to 40 ms. CPU time does not grow with other programs' load;
 *  - on the API socket (what keepalived's track script asks), the answer's latency less the time
 *    the control thread and the probe spent waiting for a CPU (their schedstat run-queue delay): a
 *    busy machine's scheduling is not the design's, but any other wait is counted. Not on TCP:
 *    loopback packets wait for the kernel's softirq work, which the flood below makes ksoftirqd's,
 *    a thread that waits for a CPU like any other (189 ms seen, the control thread idle).
 * And, from uvsd's own figures (GET /v1/stats controlThread): its longest CPU run between two turns
 * of the event loop stayed under 100 ms, and the sliced work really ran in slices. The answers'
 * plain latencies are reported (test diagnostics) but not asserted: on a machine shared with other
 * programs they measure that machine.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { PreviewResponse, StatsResponse } from '../../control/api-types';
import { apiCall, apiCallRaw } from '../../control/client';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';
import { waitFor } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const PROBE = join(ROOT, 'dist', 'test', 'helpers', 'latency-probe.js');
const isRoot = process.getuid?.() === 0;
/** The bound: /healthz and the API answer within 100 ms whatever request runs. */
const BOUND_MS = 100;

interface Sample {
  t: number;
  ms: number;
  what: string;
  status: number;
  /** ms the control thread ran, and waited for a CPU, while this answer was awaited; ms the probe waited for a CPU. */
  cpu: number;
  wait: number;
  self: number;
}

describe('the control thread while the largest accepted requests run', {
  skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)',
  timeout: 900_000,
}, () => {
  const lab = new Lab({ prefix: `uvt${process.pid % 100000}` });
  const http = {
    protocol: 'tcp',
    address: LAB_VIP,
    port: 80,
    scheduler: 'rr',
    realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })),
  };
  /** Real servers nothing answers for (their packets go nowhere): only their number matters. */
  const fake = (k: number) => ({ address: `10.${201 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}`, port: 8080 });
  const small = [http];
  /** The default limits filled as far as a change from `small` can go: 1023 services, 4091 real servers, mh. */
  const bigService = (i: number) => ({
    protocol: 'tcp',
    address: `10.200.0.${100 + (i >> 8)}`,
    port: 1000 + (i & 255),
    scheduler: 'mh',
    realServers: [0, 1, 2, 3].map((j) => fake(i * 4 + j)),
  });
  const big = [http, ...Array.from({ length: 1022 }, (_, i) => bigService(i))];
  /** One mh service of 4092 real servers: the largest preview, and a full table of its flows. */
  const WIDE = {
    protocol: 'tcp',
    address: '10.200.0.20',
    port: 80,
    scheduler: 'mh',
    realServers: Array.from({ length: 4092 }, (_, k) => fake(k)),
  };
  const wide = [http, WIDE];
  let configFile = '';
  // Defenses off: the flood below must leave its flows in the table (the SYN proxy would keep
  // them out, drop_entry and secure_tcp thin them) for the preview to walk.
  const defense = { synProxy: 0, dropEntry: 0, secureTcp: 0 };
  const write = (services: unknown[]) =>
    writeFileSync(
      configFile,
      stringify(
        lab.config(services, {
          // The limits these requests fill (issue 25's; the defaults are larger since issue 37, whose scale test covers them).
          dataplane: { maxServices: 1024, maxRealServers: 4096 },
          reload: { watch: false },
          log: { level: 'warn' },
          timeouts: { sweepInterval: 0.2 },
          defense,
        }),
      ),
    );
  const stats = async () => (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
  const reload = async () => {
    const r = await apiCallRaw(lab.socket, 'POST', '/v1/reload', {}, 300_000);
    assert.equal(r.status, 200, r.body.toString());
  };

  const samples: Sample[] = [];
  let probe: ChildProcess | null = null;
  const report: string[] = [];

  /**
   * Runs `run` and checks the control thread meanwhile: the CPU bound, the slices of `sliced`,
   * and the probe's answers.
   */
  async function measured(what: string, sliced: string[], run: () => Promise<void>): Promise<void> {
    await sleep(500);
    const before = await stats();
    const t0 = Date.now();
    await run();
    const t1 = Date.now();
    await sleep(1200); // the one-second window holding t1 closes
    const after = await stats();
    const during = samples.filter((s) => s.t + s.ms >= t0 && s.t <= t1);
    const worst = (f: (s: Sample) => number, what?: string) => Math.max(...during.filter((s) => !what || s.what === what).map(f));
    const ct = after.controlThread;
    const windows = ct?.loopDelay.windows.filter((w) => w.end > t0 && w.end - 1000 <= t1) ?? [];
    const cpuRun = Math.max(...windows.map((w) => w.maxCpuMs ?? Number.NaN));
    const slices = sliced.map((k) => `${k} ${(ct?.slices[k]?.slices ?? 0) - (before.controlThread?.slices[k]?.slices ?? 0)}`);
    report.push(
      `${what}: ${t1 - t0} ms; ${during.length} probe answers: worst ${worst((s) => s.ms, 'healthz')} ms (socket /healthz), ${worst((s) => s.ms, 'info')} ms (/v1/info), ${worst((s) => s.ms, 'healthz-tcp')} ms (TCP /healthz); control-thread CPU meanwhile ≤ ${worst((s) => s.cpu)} ms; socket answers less CPU waits ≤ ${Math.max(
        worst((s) => s.ms - s.wait - s.self, 'healthz'),
        worst((s) => s.ms - s.wait - s.self, 'info'),
      ).toFixed(1)} ms; uvsd's longest CPU run ${cpuRun.toFixed(1)} ms; slices: ${slices.join(', ') || 'none (control worker)'}`,
    );
    assert.ok(during.length > 0, `${what}: the probe answered during it`);
    for (const s of during) {
      assert.ok(s.cpu < BOUND_MS, `${what}: ${s.what} at +${s.t - t0} ms waited while the control thread ran ${s.cpu} ms`);
      const own = s.ms - s.wait - s.self;
      if (s.what !== 'healthz-tcp')
        assert.ok(
          own < BOUND_MS,
          `${what}: ${s.what} at +${s.t - t0} ms took ${s.ms} ms, ${own.toFixed(1)} ms of it not waiting for a CPU`,
        );
    }
    assert.deepEqual([...new Set(during.map((s) => s.status))], [200], `${what}: every probe answered 200`);
    assert.ok(ct, 'GET /v1/stats has controlThread');
    assert.ok(windows.length > 0 && windows.every((w) => w.maxCpuMs !== null), `${what}: uvsd measured its CPU runs`);
    assert.ok(cpuRun < BOUND_MS, `${what}: uvsd's control thread ran ${cpuRun.toFixed(1)} ms of CPU without its loop turning`);
    for (const k of sliced) {
      const n = (ct.slices[k]?.slices ?? 0) - (before.controlThread.slices[k]?.slices ?? 0);
      assert.ok(n > 1, `${what}: ${k} ran in ${n} slices`);
    }
  }

  /** The probe against the running uvsd (its pid: the schedstat it reads). */
  async function startProbe(): Promise<void> {
    probe = lab.spawn(lab.lbNs, process.execPath, [PROBE, lab.socket, String(lab.uvsdProcess!.pid), '5'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let buf = '';
    const n = samples.length;
    probe.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines) if (l) samples.push(JSON.parse(l) as Sample);
    });
    await waitFor('the probe answering', () => samples.length > n + 10);
  }

  before(async () => {
    lab.up();
    configFile = join(lab.dir, 'uvs.yaml');
    write(small);
    await lab.startUvsd(configFile);
    await waitFor('workers ready', async () => (await stats().catch(() => null))?.workers.every((w) => w.ready) === true);
    await startProbe();
  });

  after(async (t) => {
    for (const r of report) (t as unknown as { diagnostic(s: string): void }).diagnostic?.(r);
    for (const r of report) console.log(`# ${r}`);
    probe?.kill('SIGTERM');
    await lab.stopUvsd();
    lab.down();
  });

  test('a reload to 1023 services and 4091 real servers, and back', async () => {
    write(big);
    await measured('reload to the largest configuration', ['apply', 'publish'], reload);
    write(small);
    await measured('reload back to one service', ['apply'], reload);
  });

  test('a batch of 100 000 operations that builds the same configuration', async () => {
    await sleep(1000); // the last reload's real servers leave the trash (sweepInterval 0.2 s)
    const ops: unknown[] = [{ op: 'clear' }, ...big.map((service) => ({ op: 'addService', service }))];
    for (let n = 0; ops.length < 100_000; n++) {
      const i = n % 1022;
      const { protocol, address, port } = bigService(i);
      ops.push({ op: 'editRealServer', ref: { protocol, address, port }, realServer: { ...fake(i * 4 + (n & 3)), weight: 1 + (n % 3) } });
    }
    await measured('POST /v1/batch of 100 000 operations', ['apply'], async () => {
      const r = await apiCallRaw(lab.socket, 'POST', '/v1/batch', { ops }, 300_000);
      assert.equal(r.status, 200, r.body.toString().slice(0, 300));
    });
    assert.equal((await stats()).workers.length, 2);
  });

  test('the reads of that configuration: metrics, services, config, connections', async () => {
    await measured('GET /metrics, /v1/services, /v1/config, /v1/connections?limit=100000', ['metrics', 'services'], async () => {
      const m = lab.exec(lab.lbNs, 'curl', ['-sf', '-m', '60', 'http://127.0.0.1:10249/metrics']);
      assert.equal(m.match(/^node_ipvs_backend_weight\{/gm)?.length, 4091, 'one weight per real server');
      const s = await apiCall<{ services: unknown[] }>(lab.socket, 'GET', '/v1/services');
      assert.equal(s.body.services.length, 1023);
      assert.equal((await apiCall(lab.socket, 'GET', '/v1/config')).status, 200);
      assert.equal((await apiCall(lab.socket, 'GET', '/v1/connections?limit=100000')).status, 200);
    });
  });

  test('a capture of 100 000 packets, then a preview of 4000 real servers against a full table', async () => {
    write(small);
    await reload();
    await sleep(1000);
    write(wide);
    await measured('reload to one mh service of 4092 real servers', ['apply'], reload);
    // Spoofed SYNs to that service, written into the device: every one the workers read is a
    // packet to capture and a new flow (until the table's 65 536 entries are full). 15 000 a
    // second, what the workers' capture rings (512 records each, drained every 50 ms) take; the
    // device drops some on a loaded machine, so the flood goes on until the capture has its
    // 100 000.
    const flood = lab.spawn(lab.lbNs, process.execPath, [
      TOOLS,
      'syn-flood',
      'uvs0',
      WIDE.address,
      String(WIDE.port),
      '15000',
      '150',
      '2000000',
      '7',
    ]);
    try {
      await measured('POST /v1/capture of 100 000 packets (jsonl)', ['capture'], async () => {
        const r = await apiCallRaw(
          lab.socket,
          'POST',
          '/v1/capture',
          { sample: 1, maxPackets: 100_000, seconds: 120, format: 'jsonl' },
          200_000,
        );
        assert.equal(r.status, 200, r.body.toString().slice(0, 300));
        report.push(`capture: ${r.headers['x-uvs-capture-packets']} packets, ${r.headers['x-uvs-capture-overruns']} lost to full rings`);
        assert.equal(r.headers['x-uvs-capture-packets'], '100000');
        assert.equal(r.body.toString().split('\n').filter(Boolean).length, 100_000);
      });
    } finally {
      flood.kill('SIGTERM');
      if (flood.exitCode === null) await new Promise<void>((r) => flood.once('exit', () => r()));
    }
    const entries = (await stats()).table.entries;
    assert.ok(entries > 30_000, `the flood left ${entries} entries`);
    await measured('POST …/preview deleting 4000 of 4092 real servers, against the full table', [], async () => {
      const change = { delete: WIDE.realServers.slice(0, 4000).map((r) => `${r.address}:${r.port}`) };
      const r = await apiCall<PreviewResponse>(lab.socket, 'POST', `/v1/services/tcp/${WIDE.address}/${WIDE.port}/preview`, change);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      report.push(`preview: ${r.body.flows} flows of the service in the table, ${r.body.flowsMoved} of them moved`);
      assert.ok(r.body.flows > 30_000, `the preview saw ${r.body.flows} flows`);
    });
  });
  test('at 5,000 services under the default limits (issue 37): an edit, a reload of one weight, a reload replacing a server of every service', async () => {
    // Its own uvsd: the limits above (issue 25's) cannot change on a reload.
    probe?.kill('SIGTERM');
    await lab.stopUvsd();
    const N = 5000;
    const svc = (i: number, gen: number) => ({
      protocol: 'tcp',
      address: `10.200.${1 + (i >> 8)}.${i & 255}`,
      port: 2000 + (i & 255),
      scheduler: 'rr',
      realServers: [0, 1, 2, 3].map((j) => fake(i * 4 + j + (j === 0 ? gen * 40_000 : 0))),
    });
    const scaled = (gen: number, weight: number) =>
      writeFileSync(
        configFile,
        stringify(
          lab.config(
            [http, ...Array.from({ length: N - 1 }, (_, i) => svc(i, gen))].map((s, i) =>
              i === 1 ? { ...s, realServers: s.realServers.map((r, j) => (j === 1 ? { ...r, weight } : r)) } : s,
            ),
            { dataplane: { vipCidrs: ['10.200.0.0/16'] }, reload: { watch: false }, log: { level: 'warn' }, defense },
          ),
        ),
      );
    scaled(0, 1);
    await lab.startUvsd(configFile, 120_000);
    await waitFor('workers ready', async () => (await stats().catch(() => null))?.workers.every((w) => w.ready) === true, 60_000);
    await startProbe();
    await sleep(3000); // start-up's background work (the control worker's prime, the route MTUs)
    const ref = { protocol: 'tcp', address: '10.200.1.7', port: 2007 };
    await measured('an edit of one real server at 5,000 services', [], async () => {
      const ops = [{ op: 'editRealServer', ref, realServer: { ...fake(7 * 4 + 2), weight: 3 } }];
      const r = await apiCallRaw(lab.socket, 'POST', '/v1/batch', { ops }, 60_000);
      assert.equal(r.status, 200, r.body.toString().slice(0, 300));
    });
    scaled(0, 4);
    await measured('a reload changing one weight at 5,000 services', [], reload);
    scaled(1, 4);
    await measured('a reload replacing one real server in each of 5,000 services', ['apply', 'publish', 'unpack'], reload);
    const s = await apiCall<{ services: { realServers: { address: string }[] }[] }>(lab.socket, 'GET', '/v1/services');
    assert.equal(s.body.services.length, N);
  });
});
