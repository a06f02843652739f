/**
 * Names for listings without -n (control/ipvsadm/names.ts): service names from a services file, host
 * names from a hosts file and then reverse DNS — here a real c-ares resolver asking a small DNS
 * server on 127.0.0.1 that this test runs, so answers, NXDOMAIN and silence are all deterministic.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { promises as dns } from 'node:dns';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveNames, servicesTable } from '../../control/ipvsadm/names';

const dir = mkdtempSync(join(tmpdir(), 'uvs-names-'));
const servicesFile = join(dir, 'services');
const hostsFile = join(dir, 'hosts');
writeFileSync(
  servicesFile,
  [
    '# comment',
    'http\t\t80/tcp\t\twww\t\t# WorldWideWeb HTTP',
    'domain\t\t53/tcp',
    'domain\t\t53/udp',
    'http-alt\t8080/tcp\twebcache',
    'webcache2\t8080/tcp',
    'mdns\t\t5353/udp',
    '',
  ].join('\n'),
);
writeFileSync(
  hostsFile,
  ['127.0.0.1 localhost', '10.200.0.10 web.lb.example web', '10.200.0.10 second-line-loses', 'FD00:200:0::10 web6.lb.example', ''].join(
    '\n',
  ),
);

/** PTR answers by query name; an unknown name gets NXDOMAIN. */
const PTR: Record<string, string> = { '2.11.200.10.in-addr.arpa': 'rs1.lb.example' };

function encodeName(name: string): Buffer {
  return Buffer.concat([...name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])), Buffer.from([0])]);
}
/** The question's name and where the question ends (type and class included). */
function readQuestion(q: Buffer): { name: string; end: number } {
  const labels: string[] = [];
  let i = 12;
  while (q[i]! !== 0) {
    labels.push(q.subarray(i + 1, i + 1 + q[i]!).toString());
    i += 1 + q[i]!;
  }
  return { name: labels.join('.'), end: i + 5 };
}
function answer(q: Buffer): Buffer {
  const { name, end } = readQuestion(q);
  const ptr = PTR[name];
  const head = Buffer.alloc(12);
  q.copy(head, 0, 0, 2); // id
  head.writeUInt16BE(ptr ? 0x8180 : 0x8183, 2); // response, RD, RA; NOERROR or NXDOMAIN
  head.writeUInt16BE(1, 4);
  head.writeUInt16BE(ptr ? 1 : 0, 6);
  const question = q.subarray(12, end);
  if (!ptr) return Buffer.concat([head, question]);
  const rdata = encodeName(ptr);
  const rr = Buffer.alloc(12);
  rr.writeUInt16BE(0xc00c, 0); // the question's name
  rr.writeUInt16BE(12, 2); // PTR
  rr.writeUInt16BE(1, 4); // IN
  rr.writeUInt32BE(60, 6);
  rr.writeUInt16BE(rdata.length, 10);
  return Buffer.concat([head, question, rr, rdata]);
}

let server: Socket;
let silent: Socket;
let asked: string[] = [];
const bound = (s: Socket) => new Promise<number>((resolve) => s.bind(0, '127.0.0.1', () => resolve(s.address().port)));
let serverPort = 0;
let silentPort = 0;

before(async () => {
  server = createSocket('udp4');
  server.on('message', (m, r) => {
    asked.push(readQuestion(m).name);
    server.send(answer(m), r.port, r.address);
  });
  serverPort = await bound(server);
  silent = createSocket('udp4'); // receives, never answers: a resolver that is down
  silentPort = await bound(silent);
});
after(() => {
  server.close();
  silent.close();
  rmSync(dir, { recursive: true, force: true });
});

function resolverAt(port: number, timeout: number): dns.Resolver {
  const r = new dns.Resolver({ timeout, tries: 1 });
  r.setServers([`127.0.0.1:${port}`]);
  return r;
}

test('service names: the first services line for the port and protocol, its official name', () => {
  const t = servicesTable(servicesFile);
  assert.equal(t.get('80/tcp'), 'http');
  assert.equal(t.get('8080/tcp'), 'http-alt', 'first line wins, not webcache2');
  assert.equal(t.get('80/udp'), undefined, 'no udp line for 80: the number is printed');
  assert.equal(t.get('53/udp'), 'domain');
  assert.equal(servicesTable(servicesFile), t, 'parsed once');
});

test('host names come from the hosts file first, then reverse DNS; no answer leaves the number', async () => {
  asked = [];
  const n = await resolveNames(['10.200.0.10', '10.200.11.2', '10.200.12.2', 'fd00:200::10', '10.200.11.2'], {
    servicesFile,
    hostsFile,
    resolver: resolverAt(serverPort, 2000),
  });
  assert.equal(n.host('10.200.0.10'), 'web.lb.example', "the hosts file's first line and first name");
  assert.equal(n.host('fd00:200:0:0::10'), 'web6.lb.example', 'IPv6 in any spelling');
  assert.equal(n.host('10.200.11.2'), 'rs1.lb.example', 'PTR record');
  assert.equal(n.host('10.200.12.2'), null, 'NXDOMAIN: numeric');
  assert.deepEqual(
    asked.sort(),
    ['2.11.200.10.in-addr.arpa', '2.12.200.10.in-addr.arpa'],
    'DNS asked once per address, never for what the hosts file has',
  );
  assert.equal(n.service(80, 'tcp'), 'http');
  assert.equal(n.service(5353, 'tcp'), null);
});

test('a resolver that never answers costs the listing its budget once, not a timeout per address', async () => {
  const addrs = Array.from({ length: 50 }, (_, i) => `10.201.0.${i + 1}`);
  const t0 = Date.now();
  const n = await resolveNames(addrs, { servicesFile, hostsFile, resolver: resolverAt(silentPort, 60_000), budgetMs: 150 });
  const took = Date.now() - t0;
  assert.ok(took >= 140, `waited for the budget: ${took} ms`);
  assert.ok(took < 5000, `gave up after the budget, not per address: ${took} ms`);
  for (const a of addrs) assert.equal(n.host(a), null);
});

test('at most maxReverse distinct addresses are asked; the rest print as numbers', async () => {
  asked = [];
  const addrs = Array.from({ length: 10 }, (_, i) => `10.202.0.${i + 1}`);
  await resolveNames([...addrs, ...addrs], { servicesFile, hostsFile, resolver: resolverAt(serverPort, 2000), maxReverse: 4 });
  assert.equal(asked.length, 4);
});
