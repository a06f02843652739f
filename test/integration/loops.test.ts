/**
 * One spoofed packet must not start a packet loop through a live uvsd (docs/generated-packets.md):
 * a RST or a SYN to an unused port of one VIP with another VIP as its source was answered, the
 * kernel routed the answer (to a VIP) back into the device, and the two VIPs answered each other
 * for ever — one IPv4 packet held uvsd at 300 k packets/s. Here each family's packet is written
 * into the TUN device in the LB namespace (as if routed there) and uvsd's received-packet counter
 * must stay bounded over the next seconds. Needs root; skipped (and said so) otherwise.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { StatsResponse } from '../../control/api-types';
import { apiCall } from '../../control/client';
import { Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sleep } from '../../lab/lab';

const ROOT = join(__dirname, '..', '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');
const isRoot = process.getuid?.() === 0;

/** Unused addresses of the VIP ranges: no service, nothing local. */
const OTHER_VIP = '10.200.0.77';
const OTHER_VIP6 = 'fd00:200::77';
const SYN = 2;
const RST = 4;

describe('one spoofed packet sets off no packet loop', {
  skip: isRoot ? false : 'integration tests need root (network namespaces, TUN)',
  timeout: 120_000,
}, () => {
  const lab = new Lab({ prefix: `uvl${process.pid % 100000}`, realServers: 1 });
  const stats = async () => (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
  const spoof = (src: string, dst: string, sport: number, dport: number, flags: number) =>
    JSON.parse(lab.exec(lab.lbNs, process.execPath, [TOOLS, 'spoof', 'uvs0', src, dst, String(sport), String(dport), String(flags)])) as {
      sent: number;
    };

  before(async () => {
    lab.up();
    await lab.waitServers();
    const cfg = lab.config(
      [
        { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: [{ address: lab.rsAddrs[0], port: 8080 }] },
        { protocol: 'tcp', address: LAB_VIP6, port: 80, scheduler: 'rr', realServers: [{ address: lab.rsAddrs6[0], port: 8080 }] },
      ],
      { dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR], tableSize: 4096 } },
    );
    await lab.startUvsd(lab.writeConfig(cfg));
  });

  after(async () => {
    await lab.stopUvsd();
    lab.down();
  });

  /**
   * Writes the packets and watches uvsd's rx counter for 3 s. Without a loop a handful of packets
   * arrive (the spoofed ones, at most one answer each); a loop is hundreds of thousands.
   */
  const bounded = async (what: string, packets: [string, string, number, number, number][]) => {
    const before = await stats();
    for (const p of packets) assert.equal(spoof(...p).sent, 1);
    let rx = 0;
    const deadline = Date.now() + 3000;
    while (Date.now() < deadline) {
      await sleep(250);
      rx = (await stats()).packets.rxPackets - before.packets.rxPackets;
      if (rx > 1000) break; // a loop: no need to watch it longer
    }
    assert.ok(rx >= packets.length, `${what}: uvsd received the spoofed packets (rx +${rx})`);
    assert.ok(rx <= 2 * packets.length, `${what}: rx +${rx} in 3 s after ${packets.length} packets — a loop`);
    return { before, after: await stats() };
  };

  test('IPv4: a RST and a SYN from another VIP to an unused VIP port are not answered', async () => {
    const { before, after } = await bounded('IPv4', [
      [OTHER_VIP, LAB_VIP, 1234, 22, RST],
      [OTHER_VIP, LAB_VIP, 1235, 22, SYN],
    ]);
    assert.equal(after.drops.no_service! - before.drops.no_service!, 1, 'the RST: no service, never answered');
    assert.equal(after.drops.unanswerable_source! - before.drops.unanswerable_source!, 1, 'the SYN: its RST would go to a VIP');
    assert.equal(after.generated.reset!.sent, before.generated.reset!.sent);
  });

  test('IPv6: a RST and a SYN from another VIP to an unused VIP port are not answered', async () => {
    const { before, after } = await bounded('IPv6', [
      [OTHER_VIP6, LAB_VIP6, 1234, 22, RST],
      [OTHER_VIP6, LAB_VIP6, 1235, 22, SYN],
    ]);
    assert.equal(after.drops.no_service! - before.drops.no_service!, 1);
    assert.equal(after.drops.unanswerable_source! - before.drops.unanswerable_source!, 1);
  });

  test('a real client is still refused at an unused port and served at the service', () => {
    let out: string;
    try {
      out = lab.exec(lab.clientNs, process.execPath, [TOOLS, 'tcp-connect', LAB_VIP, '22']);
    } catch (e) {
      out = (e as { stdout?: string }).stdout ?? ''; // it exits non-zero when the connection is refused
    }
    assert.deepEqual(JSON.parse(out), { connected: false, error: 'ECONNREFUSED' });
    assert.equal(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://${LAB_VIP}/`]).trim(), 'rs1');
    assert.equal(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', '-g', `http://[${LAB_VIP6}]/`]).trim(), 'rs1');
  });
});
