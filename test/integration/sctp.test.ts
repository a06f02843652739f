/**
 * SCTP through uvsd in the namespace lab, with crafted packets.
 *
 * Why crafted: this machine's kernel — and CI's, the same kind of machine — has no SCTP module
 * (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) fails with EPROTONOSUPPORT), so no real SCTP
 * client or server can run here. Raw IPPROTO_SCTP sockets work without the module: the client
 * namespace sends hand-built chunks (INIT, COOKIE ECHO, DATA, SHUTDOWN …) to the VIP, and a small
 * responder on a raw socket in each real-server namespace checks what arrives (destination
 * rewritten to RIP:port, a valid CRC32c) and answers as an SCTP endpoint would (INIT ACK with a
 * cookie, COOKIE ACK, the DATA echoed, SHUTDOWN ACK). The client checks every answer comes from
 * VIP:port with a valid CRC32c. Both sides are python3 (standard library only).
 * Needs root; skipped (and said so) otherwise.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { AppliedResponse, ConnectionsResponse, DrainsResponse, ServicesResponse, StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP } from '../../lab/lab';
import { needTool } from '../helpers/wait';

const ROOT = join(__dirname, '..', '..', '..');
const isRoot = process.getuid?.() === 0;
const VPORT = 3868;
const FNPORT = 3869;
const RPORT = 13868;
const POOL = '10.200.99.1';

/** CRC32c and chunk helpers shared by both scripts. */
const COMMON = `
import json, select, socket, struct, sys, time
TAB = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TAB.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = (c >> 8) ^ TAB[(c ^ x) & 255]
    return c ^ 0xFFFFFFFF
def crc_ok(sc):
    z = bytearray(sc); z[8:12] = b'\\0\\0\\0\\0'
    return crc32c(z) == struct.unpack('<I', bytes(sc[8:12]))[0]
def chunk(t, value=b'', flags=0):
    l = 4 + len(value)
    return struct.pack('!BBH', t, flags, l) + value + b'\\0' * ((4 - l % 4) % 4)
def packet(sport, dport, vtag, chunks, corrupt=False):
    p = bytearray(struct.pack('!HHII', sport, dport, vtag, 0) + b''.join(chunks))
    p[8:12] = struct.pack('<I', crc32c(p) ^ (1 if corrupt else 0))
    return bytes(p)
def parse(d):
    ihl = (d[0] & 15) * 4
    sc = d[ihl:]
    if len(sc) < 16:
        return None
    sport, dport, vtag = struct.unpack('!HHI', sc[:8])
    return dict(src=socket.inet_ntoa(d[12:16]), dst=socket.inet_ntoa(d[16:20]), sport=sport, dport=dport, vtag=vtag,
                type=sc[12], crcOk=crc_ok(sc), value=bytes(sc[16:12 + struct.unpack('!H', sc[14:16])[0]]))
`;

/** Real-server side: answers like an SCTP endpoint and logs every packet to its port as JSON. */
const RESPONDER = `${COMMON}
port, seconds = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 132)
peer = {}
until = time.time() + seconds
while time.time() < until:
    if not select.select([s], [], [], 0.5)[0]:
        continue
    p = parse(s.recv(65535))
    if p is None or p['dport'] != port:
        continue
    v = p.pop('value')
    print(json.dumps(p), flush=True)
    if not p['crcOk']:
        continue
    key = (p['src'], p['sport'])
    t = p['type']
    if t == 1:    # INIT → INIT ACK with our tag and a state cookie
        peer[key] = struct.unpack('!I', v[0:4])[0]
        cookie = struct.pack('!HH', 7, 12) + b'uvs-ck!!'
        out = chunk(2, struct.pack('!IIHHI', 0x52530000 | (p['sport'] & 0xffff), 65536, 10, 10, 7) + cookie)
    elif t == 10: # COOKIE ECHO → COOKIE ACK
        out = chunk(11)
    elif t == 0:  # DATA → the same data back
        out = chunk(0, v, 3)
    elif t == 7:  # SHUTDOWN → SHUTDOWN ACK
        out = chunk(8)
    else:
        continue
    s.sendto(packet(port, p['sport'], peer.get(key, 0), [out]), (p['src'], 0))
`;

/** Client side: one step of an association per run; prints what came back from the VIP. */
const CLIENT = `${COMMON}
vip, vport, sport, step, mytag, peertag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 132)
def send(vtag, chunks, corrupt=False):
    s.sendto(packet(sport, vport, vtag, chunks, corrupt), (vip, 0))
def answer(timeout=2.0):
    until = time.time() + timeout
    while time.time() < until:
        if not select.select([s], [], [], max(0, until - time.time()))[0]:
            break
        p = parse(s.recv(65535))
        if p and p['dport'] == sport:
            return p
    return None
answers = []
out = dict(answers=answers)
def expect(vtag, chunks, retries=2):
    for _ in range(retries):
        send(vtag, chunks)
        a = answer()
        if a:
            answers.append(dict(a, value=a['value'].hex()))
            return a
    answers.append(None)
    return None
if step == 'open':
    a = expect(0, [chunk(1, struct.pack('!IIHHI', mytag, 65536, 10, 10, 1))])
    if a:
        out['peerTag'] = struct.unpack('!I', a['value'][0:4])[0]
        params = a['value'][16:]
        cookie = params[4:struct.unpack('!H', params[2:4])[0]]
        if expect(out['peerTag'], [chunk(10, cookie)], 1):
            expect(out['peerTag'], [chunk(0, struct.pack('!IHHI', 1, 0, 0, 0) + b'hello through uvs', 3)], 1)
elif step == 'close':
    if expect(peertag, [chunk(7, struct.pack('!I', 1))], 1):
        send(peertag, [chunk(14)])
elif step == 'stray':      # DATA with no association: nothing may come back
    expect(peertag, [chunk(0, struct.pack('!IHHI', 1, 0, 0, 0) + b'nobody', 3)], 1)
elif step == 'badcrc':     # an INIT whose CRC32c is wrong: dropped, never forwarded
    send(0, [chunk(1, struct.pack('!IIHHI', mytag, 65536, 10, 10, 1))], corrupt=True)
    a = answer(1.0)
    answers.append(a and dict(a, value=a['value'].hex()))
print(json.dumps(out))
`;

interface Seen {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  vtag: number;
  type: number;
  crcOk: boolean;
}
interface Answer extends Seen {
  value: string;
}

describe('SCTP through uvs (crafted packets on raw sockets: no SCTP module here)', {
  skip: needTool(isRoot, 'root (network namespaces, TUN)'),
  timeout: 300_000,
}, () => {
  const lab = new Lab({ prefix: `uvsc${process.pid % 100000}`, realServers: 2 });
  const rs = lab.rsAddrs;
  const services = (members = rs) => [
    { protocol: 'sctp', address: LAB_VIP, port: VPORT, scheduler: 'rr', realServers: members.map((a) => ({ address: a, port: RPORT })) },
    {
      protocol: 'sctp',
      address: LAB_VIP,
      port: FNPORT,
      scheduler: 'rr',
      forwarding: 'fullnat',
      realServers: [{ address: rs[0], port: RPORT }],
    },
  ];
  const labConfig = (members = rs) =>
    lab.config(services(members), {
      dataplane: { workers: 2, fullnat: { addresses: [POOL], portMin: 30000, portMax: 30999 } },
      reload: { watch: false },
    });
  let configFile = '';
  let clientPy = '';

  const api = <T>(method: string, path: string) => apiCall<T>(lab.socket, method, path);
  const step = (vport: number, sport: number, name: string, mytag = 0, peertag = 0) =>
    JSON.parse(
      lab.exec(lab.clientNs, 'python3', [clientPy, LAB_VIP, String(vport), String(sport), name, String(mytag), String(peertag)], 30000),
    ) as { answers: (Answer | null)[]; peerTag?: number };
  const seen = (i: number): Seen[] =>
    readFileSync(join(lab.dir, `sctp-rs${i + 1}.log`), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Seen);
  /** What the real servers' responders saw from the client's port, and where. */
  const seenFrom = (sport: number) =>
    rs.flatMap((addr, i) =>
      seen(i)
        .filter((p) => p.src === lab.clientAddr && p.sport === sport)
        .map((p) => ({ ...p, at: addr })),
    );
  const realServers = async (port: number) =>
    (await api<ServicesResponse>('GET', '/v1/services')).body.services.find((s) => s.protocol === 'sctp' && s.port === port)!.realServers;
  const conn = async (sport: number) =>
    (await api<ConnectionsResponse>('GET', '/v1/connections')).body.connections.find((c) => c.client === `${lab.clientAddr}:${sport}`);
  const drops = async () => (await api<StatsResponse>('GET', '/v1/stats')).body.drops;
  const uvsadm = (args: string[]) =>
    execFileSync(process.execPath, [join(ROOT, 'dist', 'control', 'uvsadm.js'), '--socket', lab.socket, ...args], { encoding: 'utf8' });
  /** The answers of a step: each from VIP:vport to the client's port with a valid CRC32c. */
  const fromVip = (answers: (Answer | null)[], vport: number, sport: number, types: number[]) => {
    assert.deepEqual(
      answers.map((a) => a?.type ?? null),
      types,
      'chunk types answered',
    );
    for (const a of answers) {
      assert.deepEqual([a!.src, a!.sport, a!.dst, a!.dport], [LAB_VIP, vport, lab.clientAddr, sport], 'the answer comes from the VIP');
      assert.equal(a!.crcOk, true, 'CRC32c valid after uvs rewrote the source');
    }
  };

  before(async () => {
    lab.up();
    clientPy = join(lab.dir, 'sctp-client.py');
    writeFileSync(clientPy, CLIENT);
    const responderPy = join(lab.dir, 'sctp-responder.py');
    writeFileSync(responderPy, RESPONDER);
    lab.rsNs.forEach((ns, i) => {
      const log = openSync(join(lab.dir, `sctp-rs${i + 1}.log`), 'a');
      lab.spawn(ns, 'python3', ['-u', responderPy, String(RPORT), '280'], { stdio: ['ignore', log, log], detached: true }).unref();
    });
    configFile = lab.writeConfig(labConfig());
    await lab.startUvsd(configFile);
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  let peerTag = 0;
  let firstRs = '';

  test('INIT, COOKIE ECHO, DATA: the real server gets RIP:port with a valid CRC32c, the client gets answers from VIP:port; ESTABLISHED is ActiveConn', async () => {
    const r = step(VPORT, 41000, 'open', 0x0c11e47a);
    fromVip(r.answers, VPORT, 41000, [2, 11, 0]);
    assert.equal(r.answers[0]!.vtag, 0x0c11e47a, 'INIT ACK carries our tag');
    assert.equal(Buffer.from(r.answers[2]!.value, 'hex').subarray(12).toString(), 'hello through uvs');
    peerTag = r.peerTag!;
    const got = seenFrom(41000);
    assert.deepEqual(
      got.map((p) => p.type),
      [1, 10, 0],
      'INIT, COOKIE ECHO, DATA arrived once each',
    );
    firstRs = got[0]!.at;
    for (const p of got) {
      assert.deepEqual(
        [p.src, p.sport, p.dst, p.dport, p.at],
        [lab.clientAddr, 41000, firstRs, RPORT, firstRs],
        'masq: RIP:port, the real client address',
      );
      assert.equal(p.crcOk, true, 'CRC32c valid after uvs rewrote the destination port');
    }
    const c = await conn(41000);
    assert.deepEqual([c?.protocol, c?.state, c?.realServer], ['SCTP', 'ESTABLISHED', `${firstRs}:${RPORT}`]);
    assert.ok(c!.expiresIn > 890, `ESTABLISHED: 900 s, got ${c!.expiresIn}`);
    const me = (await realServers(VPORT)).find((x) => x.address === firstRs)!;
    assert.deepEqual([me.activeConns, me.inactConns], [1, 0]);
  });

  test('uvsadm lists the service as ipvsadm does; metrics carry proto="SCTP"', () => {
    const list = uvsadm(['-Ln']);
    // ipvsadm's "%-4s %s": the four letters of SCTP leave one space (TCP and UDP get two).
    assert.match(list, new RegExp(`^SCTP ${LAB_VIP.replace(/\./g, '\\.')}:${VPORT} rr$`, 'm'));
    assert.match(uvsadm(['-Sn']), new RegExp(`^-A --sctp-service ${LAB_VIP.replace(/\./g, '\\.')}:${VPORT} -s rr$`, 'm'));
    assert.match(uvsadm(['-Lnc']), new RegExp(`^SCTP \\d\\d:\\d\\d  ESTABLISHED +${lab.clientAddr.replace(/\./g, '\\.')}:41000 `, 'm'));
    const text = lab.exec(lab.lbNs, 'curl', ['-s', '-m', '5', 'http://127.0.0.1:10249/metrics']);
    const line = text
      .split('\n')
      .find(
        (l) =>
          l.startsWith('node_ipvs_backend_connections_active{') &&
          l.includes(`remote_address="${firstRs}"`) &&
          l.includes(`local_port="${VPORT}"`),
      );
    assert.ok(line, 'a backend series for the SCTP service');
    assert.match(line!, /proto="SCTP"/);
    assert.match(line!, / 1$/);
  });

  test('a second association goes to the other real server (rr)', () => {
    const r = step(VPORT, 41001, 'open', 0x22222222);
    fromVip(r.answers, VPORT, 41001, [2, 11, 0]);
    const at = seenFrom(41001).map((p) => p.at);
    assert.equal(new Set(at).size, 1);
    assert.notEqual(at[0], firstRs);
  });

  test('SHUTDOWN, SHUTDOWN ACK, SHUTDOWN COMPLETE: the entry ends CLOSED and counts as InActConn', async () => {
    const r = step(VPORT, 41000, 'close', 0, peerTag);
    fromVip(r.answers, VPORT, 41000, [8]);
    await new Promise((res) => setTimeout(res, 300));
    const c = await conn(41000);
    assert.equal(c?.state, 'CLOSED');
    assert.ok(c!.expiresIn <= 61 && c!.expiresIn > 55);
    const me = (await realServers(VPORT)).find((x) => x.address === firstRs)!;
    assert.deepEqual([me.activeConns, me.inactConns], [0, 1]);
    assert.deepEqual(
      seenFrom(41000).map((p) => p.type),
      [1, 10, 0, 7, 14],
    );
  });

  test('DATA without an association and an INIT with a wrong CRC32c are dropped (counted), never forwarded', async () => {
    const before = await drops();
    assert.deepEqual(step(VPORT, 41002, 'stray', 0, 0x1234).answers, [null]);
    assert.deepEqual(step(VPORT, 41003, 'badcrc', 0x5555).answers, [null]);
    const afterDrops = await drops();
    assert.equal(afterDrops.no_connection! - before.no_connection!, 1);
    assert.equal(afterDrops.bad_checksum! - before.bad_checksum!, 1);
    assert.deepEqual([...seenFrom(41002), ...seenFrom(41003)], []);
    assert.equal(await conn(41002), undefined);
    assert.equal(await conn(41003), undefined);
  });

  test('full-NAT: the real server sees a pool address and port and answers to it', () => {
    const r = step(FNPORT, 41004, 'open', 0x44444444);
    fromVip(r.answers, FNPORT, 41004, [2, 11, 0]);
    const got = seen(0).filter((p) => p.src === POOL);
    assert.deepEqual(
      got.map((p) => p.type),
      [1, 10, 0],
    );
    assert.ok(got.every((p) => p.sport >= 30000 && p.sport <= 30999 && p.dst === rs[0] && p.dport === RPORT && p.crcOk));
  });

  test('removing a real server with a live association deletes it at once (SCTP is not drained, as kube-proxy)', async () => {
    const other = rs.find((a) => a !== firstRs)!;
    assert.equal((await realServers(VPORT)).find((x) => x.address === other)!.activeConns, 1);
    writeFileSync(configFile, stringify(labConfig([firstRs])));
    const r = await api<AppliedResponse>('POST', '/v1/reload');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(
      (await realServers(VPORT)).map((x) => x.address),
      [firstRs],
    );
    assert.deepEqual((await api<DrainsResponse>('GET', '/v1/drains')).body.draining, []);
  });
});
