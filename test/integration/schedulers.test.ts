/**
 * Every scheduler end to end: configured through a reload, real HTTP connections from the client
 * namespace, the spread checked against what the algorithm promises for one client.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import type { ServicesResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP, sleep } from '../../lab/lab';
import { needTool } from '../helpers/wait';

const isRoot = process.getuid?.() === 0;

describe('every scheduler carries real traffic', { skip: needTool(isRoot, 'root (network namespaces, TUN)'), timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvs${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  let configFile = '';
  const useService = async (svc: Record<string, unknown>, weights = [1, 2, 3]) => {
    const s = {
      protocol: 'tcp',
      address: LAB_VIP,
      port: 80,
      realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: weights[i] })),
      ...svc,
    };
    // A fresh service port per case, so each scheduler starts from empty counts. TIME_WAIT 60 s
    // (curl closes first, so every finished connection ends in TIME_WAIT): no entry of a case
    // expires while the case runs, so the inactive counts the schedulers read are exact.
    writeFileSync(
      configFile,
      stringify(
        lab.config([s], {
          timeouts: { tcpStates: { TIME_WAIT: 60 } },
          gracefulTermination: { checkInterval: 1 },
          reload: { watch: false },
        }),
      ),
    );
    const r = await apiCall(lab.socket, 'POST', '/v1/reload');
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };
  const conns = async (port: number) => {
    const r = await apiCall<ServicesResponse>(lab.socket, 'GET', '/v1/services');
    const svc = r.body.services.find((x) => x.port === port);
    return {
      active: svc?.realServers.reduce((a, x) => a + x.activeConns, 0) ?? -1,
      inactive: svc?.realServers.reduce((a, x) => a + x.inactConns, 0) ?? -1,
    };
  };
  /**
   * n connections one after another; before each, the previous one is seen closed by uvs (no
   * active connection, i inactive ones), so every decision is made from known counts and the
   * answer order is the scheduler's decision order.
   */
  const curlSeq = async (n: number, port: number, held = 0): Promise<string[]> => {
    const seq: string[] = [];
    for (let i = 0; i < n; i++) {
      let out: string;
      try {
        out = lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}:${port}/`], 30000).trim();
      } catch {
        out = 'FAIL';
      }
      seq.push(out);
      const deadline = Date.now() + 15000;
      for (;;) {
        const c = await conns(port);
        if (c.active === held && c.inactive === i + 1) break;
        if (Date.now() > deadline) throw new Error(`connection ${i + 1} not seen closed: ${JSON.stringify(c)} after ${seq.join(' ')}`);
        await sleep(50);
      }
    }
    return seq;
  };
  /**
   * Opens k connections that stay open (/hold answers after 60 s), one at a time, each seen
   * ACTIVE by uvs before the next: the servers they land on have ActiveConn 1 during the case.
   */
  const hold = async (k: number, port: number): Promise<ChildProcess[]> => {
    const held: ChildProcess[] = [];
    for (let i = 0; i < k; i++) {
      held.push(
        spawn('ip', ['netns', 'exec', lab.clientNs, 'curl', '-s', '-m', '90', `http://${LAB_VIP}:${port}/hold?ms=60000`], {
          stdio: 'ignore',
        }),
      );
      const deadline = Date.now() + 15000;
      while ((await conns(port)).active !== i + 1) {
        if (Date.now() > deadline) throw new Error(`held connection ${i + 1} not seen active`);
        await sleep(50);
      }
    }
    return held;
  };
  const count = (seq: string[]) => {
    const counts: Record<string, number> = {};
    for (const l of seq) counts[l] = (counts[l] ?? 0) + 1;
    return counts;
  };
  const times = (pattern: string[], k: number) => Array.from({ length: k }, () => pattern).flat();

  before(async () => {
    lab.up();
    await lab.waitServers();
    configFile = lab.writeConfig(lab.config([], { reload: { watch: false } }));
    await lab.startUvsd(configFile);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  let port = 100;
  // Weights rs1 1, rs2 2, rs3 3, added in that order: the kernel list is rs3, rs2, rs1. Every
  // decision sees ActiveConn 0 everywhere and InActConn = the connections each server had so far.
  const cases: [string, Record<string, unknown>, (seq: string[]) => void, number[]?][] = [
    ['rr', {}, (q) => assert.deepEqual(q, times(['rs3', 'rs2', 'rs1'], 4))],
    ['wrr', {}, (q) => assert.deepEqual(count(q), { rs1: 2, rs2: 4, rs3: 6 })],
    // lc: least 256·active + inactive, weights ignored, ties to the first in list order:
    // rs3 rs2 rs1 rs3 rs2 rs1 …
    ['lc', {}, (q) => assert.deepEqual(q, times(['rs3', 'rs2', 'rs1'], 4))],
    // wlc: least inactive/weight, ties to the first in list order. Counts (rs3, rs2, rs1) before
    // each decision: 000→rs3, 100→rs2, 110→rs1, 111→rs3, 211→rs2 (2/3 > 1/2), 221→rs3,
    // 321→rs3 (1 = 1 = 1: first), 421→rs2 (4/3 > 1 = 1: rs2 before rs1), 431→rs1, 432→rs3,
    // 532→rs2, 542→rs3: 6, 4, 2.
    ['wlc', {}, (q) => assert.deepEqual(q, ['rs3', 'rs2', 'rs1', 'rs3', 'rs2', 'rs3', 'rs3', 'rs2', 'rs1', 'rs3', 'rs2', 'rs3'])],
    // sed: least (active + 1)/weight, inactive ignored: 1/3 < 1/2 < 1/1 every time.
    ['sed', {}, (q) => assert.deepEqual(count(q), { rs3: 12 })],
    // nq: the first server in list order with no active connection: rs3 every time.
    ['nq', {}, (q) => assert.deepEqual(count(q), { rs3: 12 })],
    // Two connections held open first. sed puts them on rs3 (1/3) then rs2 (rs3 2/3 > rs2 1/2);
    // then rs3 2/3 < rs2 2/2 = rs1 1/1: rs3 every time, busy as it is.
    ['sed', { hold: 2 }, (q) => assert.deepEqual(count(q), { rs3: 12 })],
    // nq puts the held two on rs3 then rs2 (each the first idle); then rs1 is the only idle
    // server and nq takes it every time, though sed's rule would say rs3.
    ['nq', { hold: 2 }, (q) => assert.deepEqual(count(q), { rs1: 12 })],
    ['sh', {}, (q) => assert.equal(Object.keys(count(q)).length, 1, 'one client address → one server')],
    ['sh', { schedFlags: ['sh-port'] }, (q) => assert.ok(Object.keys(count(q)).length >= 2, 'sh-port: client ports spread')],
    ['dh', {}, (q) => assert.equal(Object.keys(count(q)).length, 1, 'one destination → one server')],
    ['mh', {}, (q) => assert.equal(Object.keys(count(q)).length, 1, 'one client address → one server')],
    ['mh', { schedFlags: ['mh-port'] }, (q) => assert.ok(Object.keys(count(q)).length >= 2, 'mh-port: client ports spread')],
    // lblc/lblcr: the first miss is scheduled by wlc (rs3); the cached server is kept while its
    // ActiveConn (0 here) does not exceed its weight.
    ['lblc', {}, (q) => assert.deepEqual(count(q), { rs3: 12 })],
    ['lblcr', {}, (q) => assert.deepEqual(count(q), { rs3: 12 })],
    ['fo', {}, (q) => assert.deepEqual(count(q), { rs3: 12 }, 'failover: the highest weight takes everything')],
    ['ovf', {}, (q) => assert.deepEqual(count(q), { rs3: 12 }, 'overflow: the highest weight while its active connections ≤ weight')],
    // twos draws its two candidates from a random stream seeded per service at creation, so the
    // exact spread is not fixed here (schedulers-twos.test.ts checks it with a fixed seed). What is
    // fixed: a weight-0 server is never a candidate.
    [
      'twos',
      {},
      (q) =>
        assert.deepEqual(
          Object.keys(count(q)).filter((k) => k !== 'rs2' && k !== 'rs3'),
          [],
          'rs1 (weight 0) is never chosen',
        ),
      [0, 2, 3],
    ],
    ['rr', { persistence: 60 }, (q) => assert.equal(Object.keys(count(q)).length, 1, 'persistence pins the client')],
  ];
  test('SIGHUP applies a good configuration file (the file is not watched here): counted, and traffic follows it; a broken one is refused', async () => {
    const reloads = async () => (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body.reloads;
    const waitReloads = async (want: (r: StatsResponse['reloads']) => boolean, what: string) => {
      const deadline = Date.now() + 20000;
      for (;;) {
        const r = await reloads();
        if (want(r)) return r;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(r)}`);
        await sleep(50);
      }
    };
    const ports = async () => (await apiCall<ServicesResponse>(lab.socket, 'GET', '/v1/services')).body.services.map((x) => x.port);
    const before = await reloads();
    const p = 190;
    writeFileSync(
      configFile,
      stringify(
        lab.config([{ protocol: 'tcp', address: LAB_VIP, port: p, scheduler: 'rr', realServers: [{ address: rs[1], port: 8080 }] }], {
          reload: { watch: false },
        }),
      ),
    );
    process.kill(lab.uvsdProcess!.pid!, 'SIGHUP');
    const after = await waitReloads((r) => r.ok === before.ok + 1, 'the SIGHUP reload');
    assert.equal(after.failed, before.failed);
    assert.deepEqual(await ports(), [p]);
    assert.deepEqual(count(await curlSeq(3, p)), { rs2: 3 });
    writeFileSync(configFile, 'services: [ {');
    process.kill(lab.uvsdProcess!.pid!, 'SIGHUP');
    const bad = await waitReloads((r) => r.failed === before.failed + 1, 'the refused SIGHUP reload');
    assert.equal(bad.ok, after.ok);
    assert.ok(bad.lastError, 'the reason is kept');
    assert.deepEqual(await ports(), [p], 'the running table stays');
    assert.equal(lab.uvsdProcess?.exitCode, null);
  });

  for (const [scheduler, extra, check, weights] of cases) {
    const p = port++;
    test(`${scheduler}${Object.keys(extra).length ? ' ' + JSON.stringify(extra) : ''}${weights ? ` weights ${weights.join(':')}` : ''}: 12 connections all answered, spread as the algorithm promises`, async () => {
      const { hold: k = 0, ...svc } = extra as { hold?: number };
      await useService({ port: p, scheduler, ...svc }, weights);
      const held = await hold(k, p);
      try {
        const q = await curlSeq(12, p, k);
        assert.equal(q.filter((x) => !/^rs\d$/.test(x)).length, 0, `failed requests: ${q.join(' ')}`);
        check(q);
      } finally {
        for (const c of held) c.kill();
      }
    });
  }
});
