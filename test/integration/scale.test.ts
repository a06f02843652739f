/**
 * Ten thousand services (issue 37): the node's shared state does not grow with the services.
 *
 * One uvsd in the namespace lab, first with one service, then reloaded to 5,000 services under
 * the default limits (the first and the last on the lab's real servers, the others on four
 * addresses each that nothing answers for: 19,996 masq real servers on distinct ports). With
 * both, the node's policy rules (`ip rule`, `ip -6 rule`), its routes (every table, both
 * families) and its nftables chains and rules are counted: the same numbers, the servers only as
 * elements of uvs's sets. Traffic to the first and the last service flows, a runtime edit and a
 * reload that changes one weight finish. The bounds are generous: this is correctness; how fast
 * is `npm run perf -- scale`'s business (perf/SCALE.md).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { apiCall } from '../../control/client';
import { Lab } from '../../lab/lab';
import { waitFor } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const UVSADM = join(ROOT, 'dist', 'control', 'uvsadm.js');
const isRoot = process.getuid?.() === 0;
const SERVICES = 5000;

describe('5,000 services: the node keeps one service’s rules, routes and nftables rules', {
  skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)',
  timeout: 600_000,
}, () => {
  const lab = new Lab({ prefix: `uvsc${process.pid % 100000}` });
  /** Service i: address 10.200.0.(10 + i / 250), port 1000 + i % 250. */
  const vip = (i: number) => `10.200.0.${10 + Math.floor(i / 250)}`;
  const port = (i: number) => 1000 + (i % 250);
  const fake = (k: number) => ({ address: `10.${201 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}`, port: 8080 + (k % 7) });
  const service = (i: number) => ({
    protocol: 'tcp',
    address: vip(i),
    port: port(i),
    scheduler: 'rr',
    realServers:
      i === 0 || i === SERVICES - 1 ? lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) : [0, 1, 2, 3].map((j) => fake(i * 4 + j)),
  });
  const all = Array.from({ length: SERVICES }, (_, i) => service(i));
  let file = '';
  const write = (services: unknown[]) => writeFileSync(file, stringify(lab.config(services, { reload: { watch: false } })));
  const uvsadm = (...args: string[]) =>
    spawnSync(process.execPath, [UVSADM, '--socket', lab.socket, ...args], { encoding: 'utf8', timeout: 300_000 });
  const run = (cmd: string, args: string[]) => {
    const r = spawnSync('ip', ['netns', 'exec', lab.lbNs, cmd, ...args], { encoding: 'utf8', maxBuffer: 1 << 28 });
    assert.equal(r.status, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  /** What the node holds: rules, routes of every table, nftables chains and rules, and uvs's set elements. */
  const node = () => {
    const json = (cmd: string, args: string[]) => JSON.parse(run(cmd, args) || '[]') as unknown[];
    const ruleset = (JSON.parse(run('nft', ['-j', 'list', 'ruleset'])) as { nftables: Record<string, { elem?: unknown[] }>[] }).nftables;
    return {
      rules4: json('ip', ['-j', '-4', 'rule', 'show']).length,
      rules6: json('ip', ['-j', '-6', 'rule', 'show']).length,
      // Without the kernel's own routes (addresses, IPv6 link-local and multicast), which come and go with the devices.
      routes4: (json('ip', ['-j', '-4', 'route', 'show', 'table', 'all']) as { protocol?: string }[]).filter((r) => r.protocol !== 'kernel')
        .length,
      routes6: (json('ip', ['-j', '-6', 'route', 'show', 'table', 'all']) as { protocol?: string }[]).filter((r) => r.protocol !== 'kernel')
        .length,
      chains: ruleset.filter((o) => o.chain).length,
      nftRules: ruleset.filter((o) => o.rule).length,
      sets: ruleset.filter((o) => o.set).length,
      elements: ruleset.reduce((n, o) => n + (o.set?.elem?.length ?? 0), 0),
    };
  };
  const curl = (i: number) =>
    spawnSync('ip', ['netns', 'exec', lab.clientNs, 'curl', '-s', '-m', '5', `http://${vip(i)}:${port(i)}/`], {
      encoding: 'utf8',
    }).stdout.split('\n')[0];

  before(async () => {
    lab.up();
    await lab.waitServers();
    file = join(lab.dir, 'uvs.yaml');
  });
  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  test('the same rules, routes and nftables rules at 1 and at 5,000 services; traffic to the first and the last; an edit and a reload', async () => {
    write([service(0)]);
    await lab.startUvsd(file, 60_000);
    await waitFor('the first service forwards', () => /^rs\d$/.test(curl(0) ?? ''), 20_000);
    const one = node();
    assert.equal(one.elements, 3 + 3, 'three servers: three reply elements and three ICMP elements');

    write(all);
    const reload = uvsadm('--reload');
    assert.equal(reload.status, 0, reload.stderr);
    const services = await apiCall<{ services: unknown[] }>(lab.socket, 'GET', '/v1/services');
    assert.equal(services.body.services.length, SERVICES);
    // The elements are added after the reload's answer: wait for them, then compare.
    const servers = 3 + (SERVICES - 2) * 4;
    await waitFor('every reply element', () => node().elements === 2 * servers, 120_000, 500);
    const many = node();
    assert.deepEqual(
      { ...many, elements: 0 },
      { ...one, elements: 0 },
      `rules, routes, chains and nftables rules the same as with one service: ${JSON.stringify(one)} vs ${JSON.stringify(many)}`,
    );
    await waitFor('the first service forwards', () => /^rs\d$/.test(curl(0) ?? ''), 20_000);
    await waitFor('the last service forwards', () => /^rs\d$/.test(curl(SERVICES - 1) ?? ''), 20_000);

    // A runtime edit of one server's weight, and a reload that changes one weight.
    const last = `${vip(SERVICES - 1)}:${port(SERVICES - 1)}`;
    const edit = uvsadm('-e', '-t', last, '-r', `${lab.rsAddrs[0]}:8080`, '-m', '-w', '3');
    assert.equal(edit.status, 0, edit.stderr);
    const list = uvsadm('-L', '-n', '-t', last);
    assert.match(list.stdout, new RegExp(`${lab.rsAddrs[0]!.replace(/\./g, '\\.')}:8080\\s+Masq\\s+3\\b`));
    const changed = all.map((s, i) =>
      i === 1 ? { ...s, realServers: s.realServers.map((r, j) => (j === 0 ? { ...r, weight: 5 } : r)) } : s,
    );
    write(changed);
    const again = uvsadm('--reload');
    assert.equal(again.status, 0, again.stderr);
    const one1 = uvsadm('-L', '-n', '-t', `${vip(1)}:${port(1)}`);
    assert.match(one1.stdout, /Masq\s+5\b/, one1.stdout);
    assert.equal(node().elements, many.elements);
    await waitFor('the last service still forwards', () => /^rs\d$/.test(curl(SERVICES - 1) ?? ''), 20_000);
  });
});
