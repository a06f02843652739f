/**
 * The two worker I/O paths (dataplane.io): io_uring (lb/native/uring.c) and poll + read + write.
 * Each runs real traffic in its own lab — HTTP, a 20 MB download (64 KB GSO super-packets
 * rewritten in their receive slot), an 8 MB upload through the IPIP tunnel (super-packets cut
 * into segments in the out slots: many writes per slot), UDP request/response — and the path is
 * checked where an operator sees it: /metrics, GET /v1/stats, and the kernel's view (the
 * process's io_uring file descriptors). The whole dataplane suite runs on one path with
 * UVS_LAB_IO=io_uring|poll. The io_uring lab steers queues with uvs's eBPF program
 * (dataplane.steering auto), the poll lab with the device's own flow table (automq), so the same
 * traffic crosses both steerings too. Needs root; the io_uring half is skipped (saying why) where the
 * kernel or a seccomp profile refuses io_uring.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { blobSha256 } from '../../lab/blob';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';
import { tunAddon } from '../../lb/tun';
import { balance, type StatsLike } from '../../perf/reliability/report';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;
const uringWhy = isRoot ? tunAddon().uringProbe() : 'not root';

/** io_uring instances the process holds (anon_inode:[io_uring] file descriptors). */
function uringFds(pid: number): number {
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:[io_uring]') n++;
    } catch {
      /* closed meanwhile */
    }
  }
  return n;
}

for (const [path, steering] of [
  ['io_uring', 'auto'],
  ['poll', 'automq'],
] as const) {
  const skip = !isRoot
    ? 'integration tests need root (network namespaces, TUN)'
    : path === 'io_uring' && uringWhy
      ? `io_uring unavailable here: ${uringWhy}`
      : false;
  describe(`the ${path} worker I/O path carries real traffic (steering ${steering})`, { skip, timeout: 300_000 }, () => {
    // One lab at a time (the two describes run in turn): the uvt<pid> name test/run.sh cleans up.
    const lab = new Lab({ prefix: `uvt${process.pid % 100000}` });
    const rs = lab.rsAddrs;
    const client = (cmd: string, args: string[], timeoutMs = 60000) => lab.exec(lab.clientNs, cmd, args, timeoutMs);
    const api = <T>(method: string, p: string) => apiCall<T>(lab.socket, method, p);
    const stats = async () => (await api<StatsResponse>('GET', '/v1/stats')).body;
    const services = [
      { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 8080 })) },
      { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: rs.map((a) => ({ address: a, port: 5353 })) },
      {
        protocol: 'tcp',
        address: LAB_VIP,
        port: 82,
        scheduler: 'rr',
        forwarding: 'fullnat',
        realServers: rs.map((a) => ({ address: a, port: 8080 })),
      },
      {
        protocol: 'tcp',
        address: LAB_VIP,
        port: 9007,
        scheduler: 'rr',
        forwarding: 'tunnel',
        realServers: rs.map((a) => ({ address: a })),
      },
    ];

    before(async () => {
      lab.up();
      await lab.waitServers();
      // This kernel has no ipip driver: each real server decapsulates with `uvs decap`.
      for (const ns of lab.rsNs)
        lab
          .spawn(ns, process.execPath, [join(ROOT, 'dist', 'control', 'uvs.js'), 'decap', '--vips', LAB_VIP, '--directors', '10.200.1.1'], {
            detached: true,
          })
          .unref();
      const cfg = lab.config(services, {
        dataplane: { io: path, steering, tunnelSource: '10.200.1.1', fullnat: { addresses: ['10.200.99.1'] } },
      });
      await lab.startUvsd(lab.writeConfig(cfg));
      const deadline = Date.now() + 15000;
      while (!(await stats()).workers.every((w) => w.ready)) {
        assert.ok(Date.now() < deadline, 'workers ready');
        await sleep(100);
      }
    });

    after(async () => {
      await lab.stopUvsd();
      lab.down();
    });

    test(`/v1/stats, uvs_worker_io_path and uvsadm -L --workers say every worker runs on ${path}, and the steering`, async () => {
      const st = await stats();
      assert.equal(st.workers.length, 2);
      for (const w of st.workers) assert.equal(w.io, path, `worker ${w.id}`);
      // auto: the program, unless this kernel or process refuses bpf() (then the reason is given).
      const refused = steering === 'auto' && st.steering.reason !== null;
      if (refused) assert.match(st.steering.reason!, /not permitted|EPERM|ENOSYS|Inappropriate ioctl/);
      const steers = steering === 'automq' || refused ? 'automq' : 'ebpf';
      assert.deepEqual(st.steering, { path: steers, reason: refused ? st.steering.reason : null });
      const text = lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);
      for (const id of ['0', '1']) {
        for (const p of ['io_uring', 'poll']) {
          const m = new RegExp(`^uvs_worker_io_path\\{worker="${id}",path="${p}"\\} (\\d+)$`, 'm').exec(text);
          assert.ok(
            m,
            `uvs_worker_io_path for worker ${id}, ${p}:\n${text
              .split('\n')
              .filter((l) => l.includes('io_path'))
              .join('\n')}`,
          );
          assert.equal(m[1], p === path ? '1' : '0', `worker ${id} ${p}`);
        }
      }
      const listing = execFileSync(
        process.execPath,
        [join(ROOT, 'dist', 'control', 'uvsadm.js'), '--socket', lab.socket, '-L', '--workers'],
        { encoding: 'utf8' },
      ).split('\n');
      assert.match(listing[0]!, /^Worker +State +Restarts +I\/O +RxPkts +TxPkts$/);
      for (const id of [0, 1]) assert.match(listing[id + 1]!, new RegExp(`^${id} +up +0 +${path} +\\d+ +\\d+$`), listing.join('\n'));
      assert.equal(listing[3], `Queue steering: ${steers}${refused ? ` (${st.steering.reason})` : ''}`);
      for (const p of ['ebpf', 'automq'])
        assert.match(
          text,
          new RegExp(`^uvs_dataplane_steering\\{path="${p}"\\} ${p === steers ? 1 : 0}$`, 'm'),
          `uvs_dataplane_steering ${p}`,
        );
      // The kernel's view: one ring per worker on io_uring, none on poll.
      assert.equal(uringFds(lab.uvsdProcess!.pid!), path === 'io_uring' ? 2 : 0);
    });

    test('HTTP spreads over the servers and a 20 MB download arrives intact (GSO super-packets)', () => {
      const counts: Record<string, number> = {};
      for (let i = 0; i < 6; i++) {
        const who = client('curl', ['-s', '-m', '5', `http://${LAB_VIP}/`]).trim();
        counts[who] = (counts[who] ?? 0) + 1;
      }
      assert.deepEqual(counts, { rs1: 2, rs2: 2, rs3: 2 });
      const bytes = 20 * 1024 * 1024;
      const sum = client('sh', ['-c', `curl -s -m 60 "http://${LAB_VIP}/blob?bytes=${bytes}&seed=21" | sha256sum`], 90000).split(' ')[0];
      assert.equal(sum, blobSha256(21, bytes));
    });

    test('an 8 MB upload through the tunnel is echoed intact (super-packets cut into segments by the worker)', () => {
      const p = lab.prefix;
      const out = client(
        'sh',
        [
          '-c',
          `head -c 8000000 /dev/urandom > /tmp/${p}-up && sha256sum < /tmp/${p}-up && timeout 40 nc -N ${LAB_VIP} 9007 < /tmp/${p}-up | tail -c +5 | sha256sum; rm -f /tmp/${p}-up`,
        ],
        60000,
      );
      const [sent, echoed] = out
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]);
      assert.equal(echoed, sent);
    });

    test('UDP request/response: new flows rotate over the servers; 300 datagrams of one flow are all answered', () => {
      const answers = new Set<string>();
      for (let i = 0; i < 6; i++) {
        const r = JSON.parse(client(process.execPath, [TOOLS, 'udp-ask', LAB_VIP, '53', `q${i}`], 10000));
        assert.equal(r.error, null, `request ${i}`);
        assert.match(r.answer, new RegExp(`^rs[123] q${i}$`));
        answers.add(r.answer.split(' ')[0]);
      }
      assert.equal(answers.size, 3);
      // One socket, one datagram every 10 ms: each is read, rewritten and written on its own. The
      // socket closes 10 ms after the last one, so on a loaded machine the last answer or two
      // may come too late to count; a path that loses or holds packets loses many more.
      const r = JSON.parse(client(process.execPath, [TOOLS, 'udp-session', LAB_VIP, '53', '300', '10'], 30000)) as {
        answers: (string | null)[];
      };
      const lost = r.answers.map((x, i) => (x === null ? i : -1)).filter((i) => i >= 0);
      assert.ok(
        lost.every((i) => i >= 298),
        `unanswered: ${lost.join(',')}`,
      );
      assert.equal(new Set(r.answers.filter((x) => x !== null)).size, 1, 'one flow, one server');
    });

    test('every packet is counted once on each side: read = drops + forwarded, written = forwarded + generated + segments', async () => {
      // Counters read while nothing moves through uvsd (a worker counts a batch's reads and writes
      // at its end; on io_uring its writes when their completions come, within a 50 ms idle poll).
      let st = await stats();
      for (let settled = false, tries = 0; !settled; tries++) {
        assert.ok(tries < 100, 'no moment without a packet through uvsd in 15 s');
        await sleep(150);
        const next = await stats();
        settled = (['rxPackets', 'txPackets', 'txErrors'] as const).every((k) => next.packets[k] === st.packets[k]);
        st = next;
      }
      // perf/reliability/report.ts balance: the packets forwarded, counted from what was read and
      // from what was written, agree exactly — a stray dropped (router solicitations on the new
      // device) is a counted drop, the tunnel upload's super-packets cut into segments by the
      // worker are packets.txExtra.
      const b = balance({ packets: {}, drops: {} }, st as unknown as StatsLike);
      assert.equal(b.difference, 0, JSON.stringify(b));
      assert.ok(b.forwarded_read > 500, `forwarded ${b.forwarded_read}: the traffic above`);
      assert.ok(b.extra > 0, 'the tunnel upload was cut into segments by the worker');
      assert.ok(st.packets.txBytes > 28e6, `tx bytes ${st.packets.txBytes}: the 20 MB download and the 8 MB upload`);
      assert.equal(st.packets.txErrors, 0);
    });

    test('a killed worker comes back on the same path; its ring is gone with it', async () => {
      const before = await stats();
      for (const w of before.workers) assert.equal((await api('POST', `/v1/workers/${w.id}/kill`)).status, 202);
      const deadline = Date.now() + 15000;
      let st = await stats();
      while (!st.workers.every((w, i) => w.ready && w.restarts === before.workers[i]!.restarts + 1)) {
        assert.ok(Date.now() < deadline, `workers restarted: ${JSON.stringify(st.workers)}`);
        await sleep(100);
        st = await stats();
      }
      for (const w of st.workers) assert.equal(w.io, path);
      // A dead worker's ring would keep a read armed into freed memory: it must be closed.
      assert.equal(uringFds(lab.uvsdProcess!.pid!), path === 'io_uring' ? 2 : 0);
      const bytes = 4 * 1024 * 1024;
      const sum = client('sh', ['-c', `curl -s -m 60 "http://${LAB_VIP}/blob?bytes=${bytes}&seed=22" | sha256sum`], 90000).split(' ')[0];
      assert.equal(sum, blobSha256(22, bytes));
    });

    // The program belongs to the device (the queues stay open in the main thread across a
    // worker's restart); the kernel has no getter for it, so this checks what it does. With it,
    // each connection's packets, both ways, are written by one worker: masq by the key (the
    // client's endpoint both ways), full-NAT because the worker picked a pool port whose replies
    // the program steers back to it (lb/xmit.ts steeredPort). With the device's own table (the
    // poll lab: the control), the server's SYN-ACK takes the queue its hash picks — the flow is
    // learnt only after the SYN is delivered (docs/steering.md) — so about half the connections
    // are split across the two workers, one direction each (seen: 4+6, 5+5, 3+8).
    for (const [kind, port] of [
      ['masq', 80],
      ['full-NAT', 82],
    ] as const) {
      test(`after the restart, the steering holds: with the program each ${kind} connection is forwarded by one worker`, async (t) => {
        const path = (await stats()).steering.path;
        const N = 16;
        const tx = async () => (await stats()).workers.map((w) => w.txPackets);
        const seen: string[] = [];
        let split = 0;
        await sleep(500); // the last packets of the test before
        for (let i = 0; i < N; i++) {
          const t0 = await tx();
          client('curl', ['-s', '-m', '10', '-o', '/dev/null', `http://${LAB_VIP}:${port}/blob?bytes=2000&seed=${i}`]);
          await sleep(200); // the closing FIN and ACKs, and any delayed ACK
          const d = (await tx()).map((n, k) => n - t0[k]!);
          seen.push(d.join('+'));
          assert.ok(
            d.reduce((a, b) => a + b, 0) >= 8,
            `connection ${i}: ${d.join('+')} packets written: the handshake, request, answer and close`,
          );
          // Split: a second worker wrote two or more of its packets (one may be a stray of another
          // flow; a split by the device's table is a whole direction, 4 or more).
          if (d.filter((n) => n >= 2).length > 1) split++;
        }
        t.diagnostic(`${kind}, ${path}: ${split} of ${N} connections split; packets written per worker: ${seen.join(', ')}`);
        if (path === 'ebpf') assert.equal(split, 0, `packets written per worker, each connection: ${seen.join(', ')}`);
        else assert.ok(split > 0, `the device's table split none of ${N} connections: ${seen.join(', ')}`);
      });
    }
  });
}
