/**
 * Every scheduler end to end: configured through a reload, real HTTP connections from the client
 * namespace, the spread checked against what the algorithm promises for one client.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP } from '../../lab/lab';

const isRoot = process.getuid?.() === 0;

describe('every scheduler carries real traffic', { skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)', timeout: 600_000 }, () => {
  const lab = new Lab({ prefix: `uvs${process.pid % 100000}` });
  const rs = lab.rsAddrs;
  let configFile = '';
  const useService = async (svc: Record<string, unknown>, weights = [1, 2, 3]) => {
    const s = { protocol: 'tcp', address: LAB_VIP, port: 80, realServers: rs.map((a, i) => ({ address: a, port: 8080, weight: weights[i] })), ...svc };
    // Short TIME_WAIT so each scheduler starts from empty counts; a fresh service port per case.
    writeFileSync(configFile, stringify(lab.config([s], { timeouts: { tcpStates: { TIME_WAIT: 1 } }, gracefulTermination: { checkInterval: 1 }, reload: { watch: false } })));
    const r = await apiCall(lab.socket, 'POST', '/v1/reload');
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };
  const curlMany = (n: number, port: number): Record<string, number> => {
    const text = lab.exec(lab.clientNs, 'sh', ['-c', `for i in $(seq ${n}); do curl -s -m 5 http://${LAB_VIP}:${port}/ || echo FAIL; done`], 60000);
    const counts: Record<string, number> = {};
    for (const l of text.split('\n').filter(Boolean)) counts[l] = (counts[l] ?? 0) + 1;
    return counts;
  };

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
  const cases: [string, Record<string, unknown>, (c: Record<string, number>) => void][] = [
    ['rr', {}, (c) => assert.deepEqual(c, { rs1: 4, rs2: 4, rs3: 4 })],
    ['wrr', {}, (c) => assert.deepEqual(c, { rs1: 2, rs2: 4, rs3: 6 })],
    ['lc', {}, (c) => assert.equal(Object.keys(c).length, 3, 'sequential connections spread by least connections')],
    ['wlc', {}, (c) => assert.ok((c.rs3 ?? 0) >= (c.rs1 ?? 0), 'the heaviest server gets at least as many')],
    ['sed', {}, (c) => assert.ok((c.rs3 ?? 0) > 0)],
    ['nq', {}, (c) => assert.ok(Object.keys(c).every((k) => k.startsWith('rs')))],
    ['sh', {}, (c) => assert.equal(Object.keys(c).length, 1, 'one client address → one server')],
    ['sh', { schedFlags: ['sh-port'] }, (c) => assert.ok(Object.keys(c).length >= 2, 'sh-port: client ports spread')],
    ['dh', {}, (c) => assert.equal(Object.keys(c).length, 1, 'one destination → one server')],
    ['mh', {}, (c) => assert.equal(Object.keys(c).length, 1, 'one client address → one server')],
    ['mh', { schedFlags: ['mh-port'] }, (c) => assert.ok(Object.keys(c).length >= 2, 'mh-port: client ports spread')],
    ['lblc', {}, (c) => assert.equal(Object.keys(c).length, 1, 'one destination stays on its server while not overloaded')],
    ['lblcr', {}, (c) => assert.equal(Object.keys(c).length, 1)],
    ['fo', {}, (c) => assert.deepEqual(c, { rs3: 12 }, 'failover: the highest weight takes everything')],
    ['ovf', {}, (c) => assert.deepEqual(c, { rs3: 12 }, 'overflow: the highest weight while its active connections ≤ weight')],
    ['twos', {}, (c) => assert.ok(Object.keys(c).every((k) => k.startsWith('rs')))],
    ['rr', { persistence: 60 }, (c) => assert.equal(Object.keys(c).length, 1, 'persistence pins the client')],
  ];
  for (const [scheduler, extra, check] of cases) {
    const p = port++;
    test(`${scheduler}${Object.keys(extra).length ? ' ' + JSON.stringify(extra) : ''}: 12 connections all answered, spread as the algorithm promises`, async () => {
      await useService({ port: p, scheduler, ...extra });
      const c = curlMany(12, p);
      assert.equal(c.FAIL, undefined, `failed requests: ${JSON.stringify(c)}`);
      assert.equal(Object.values(c).reduce((a, b) => a + b, 0), 12);
      check(c);
    });
  }
});
