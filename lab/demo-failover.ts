/**
 * `npm run demo -- failover`: two LB nodes, one Redis, real keepalived (VRRPv3, both families, a
 * track script on uvsd's /healthz) holding the router's next hop and the servers' gateway. Live
 * TCP downloads, a UDP probe and a TCP echo run through the master; then
 *   1. uvsd on lb1 is SIGKILLed (the node lives): keepalived's track script faults lb1, lb2 takes
 *      the addresses and adopts the flows from Redis;
 *   2. lb1 comes back as backup (nopreempt), new traffic runs through lb2, and lb2 dies whole
 *      (links down, every process SIGKILLed): lb1 takes over by VRRP timeout.
 * Prints, for each, the streams kept and lost and the blackout as the clients saw it, then
 * removes everything (also on Ctrl-C).
 */
import { join } from 'node:path';
import type { ServicesResponse, StatsResponse } from '../control/api-types';
import { apiCall } from '../control/client';
import { formatList } from '../control/ipvsadm/format';
import { blackout } from '../perf/failures';
import { blobDownload, runTool } from './clients';
import { FailoverLab, LAB_VRRP, NEXT_HOP, GATEWAY, waitFor, type KillKind, type LbNode } from './failover-lab';
import { Lab, LAB_VIP } from './lab';

function title(s: string): void {
  console.log(`\n\x1b[1m== ${s}\x1b[0m`);
}

export async function failoverDemo(): Promise<number> {
  const lab = new FailoverLab('uvsfo');
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    await lab.reset().catch(() => undefined);
    lab.down();
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      console.log(`\n${sig}: removing the lab`);
      void cleanup().then(() => process.exit(130));
    });
  }
  const list = async (n: LbNode) => {
    const v = (await apiCall<ServicesResponse>(lab.socket(n), 'GET', '/v1/services')).body;
    process.stdout.write(formatList(v.tableSize, v.services, { header: false }));
  };
  const stats = async (n: LbNode) => (await apiCall<StatsResponse>(lab.socket(n), 'GET', '/v1/stats')).body;
  const svcs = [
    { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
    { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 5353 })) },
    { protocol: 'tcp', address: LAB_VIP, port: 7, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 9007 })) },
  ];
  const startUvsd = (n: LbNode) => lab.startUvsd(n, lab.config(n, svcs, { log: { level: 'warn' } }));
  let allKept = true;

  /** Traffic through the master, then `kind` kills it; prints what the clients and lb2 saw. */
  const killUnderLoad = async (kind: KillKind, seedBase: number) => {
    const from = lab.active;
    const N = 6;
    const to: LbNode = from === 'lb1' ? 'lb2' : 'lb1';
    const before = new Set(await lab.flows(from));
    // 16 MB at 2 MB/s: 8 s, far more than the socket buffers hold at the kill, so the surviving
    // node must carry every download to its end.
    const downloads = Array.from({ length: N }, (_, i) => blobDownload(lab.ns.cl, LAB_VIP, 80, 16 << 20, seedBase + i, '2M', 60));
    const udp = runTool<{ sent: number; answered: number; probes: [number, number | null, string | null][] }>(
      lab.ns.cl,
      ['udp-probe', LAB_VIP, '53', '12', '10'],
      60000,
    ).result;
    const echo = runTool<{ error: string | null; times: number[] }>(lab.ns.cl, ['echo-probe', LAB_VIP, '7', '12', '20'], 60000).result;
    const base = (await stats(to)).adopted;
    const started = Date.now();
    // Every download, the echo connection and the UDP probe running through the master, and the
    // other node holding each of them, before the kill. (Waiting for N + 2 records written let
    // the kill fall within the echo connection's first write period — its tool starts last — so
    // its record never left the master and the echo broke in 3 of 12 kills.)
    await lab.waitCarried(from, to, { 'tcp/80': N, 'tcp/7': 1, 'udp/53': 1 }, before, 20000);
    console.log(
      `  ${N} downloads (16 MB at 2 MB/s), a UDP probe every 10 ms and a TCP echo line every 20 ms run through ${from}; after ${Date.now() - started} ms ${to} holds each of these flows (${(await stats(to)).shadows} shadow entries)`,
    );
    console.log(`  ${from} (uvsadm -Ln):`);
    await list(from);
    const f = await lab.failover(kind);
    let adoptedMs = NaN;
    await waitFor(
      async () => {
        if ((await stats(to)).adopted - base < N) return false;
        adoptedMs = Date.now() - f.killedAt;
        return true;
      },
      15000,
      `${to} did not adopt the downloads`,
    ).catch(() => undefined);
    console.log(`  ${to} (uvsadm -Ln) after the adoptions:`);
    await list(to);
    const ok = await Promise.all(downloads.map((d) => d.done));
    const u = (await udp).out;
    const e = (await echo).out;
    const bu = u
      ? blackout(
          u.probes.flatMap((p) => (p[1] === null ? [] : [p[1]])),
          f.killedAt,
        )
      : null;
    const bt = e ? blackout(e.times, f.killedAt) : null;
    const kept = ok.filter(Boolean).length;
    allKept &&= kept === N && e?.error === null;
    const servers = u ? [...new Set(u.probes.map((p) => p[2]).filter((s) => s !== null))] : [];
    console.log(`  keepalived on ${to} MASTER (both families) ${f.vrrpMs} ms after the kill`);
    console.log(
      `  blackout, UDP (kill → first answer through ${to}): ${bu ? `${bu.blackoutMs} ms` : 'no answer after the kill'}; ${u ? `${u.sent - u.answered} of ${u.sent} probes unanswered, answered by ${servers.join(', ')}` : ''}`,
    );
    console.log(
      `  blackout, TCP echo (kill → first echo through ${to}): ${bt ? `${bt.blackoutMs} ms` : 'no echo after the kill'}; connection ${e?.error === null ? 'kept' : `broken (${e?.error})`}`,
    );
    console.log(
      `  ${to} adopted all ${N} downloads ${Number.isNaN(adoptedMs) ? 'not within 15 s' : `${adoptedMs} ms after the kill (TCP retransmission brings each flow's next packet)`}`,
    );
    console.log(`  downloads: ${N} started, ${kept} completed byte-identical, ${N - kept} lost`);
  };

  try {
    title('1. Lab: client → router → br-front (lb1 | lb2) → br-back → three real servers and redis-server');
    lab.up();
    await lab.waitServers();
    console.log(
      `  the router sends ${LAB_VIP}/24 to ${NEXT_HOP}; the servers' gateway is ${GATEWAY}: both are VRRP addresses (and their IPv6 twins)`,
    );

    title('2. uvsd on both nodes (same services, same Redis), then keepalived on both');
    for (const n of ['lb1', 'lb2'] as const) await startUvsd(n);
    await lab.startVrrp('lb1');
    console.log(
      `  keepalived: ${LAB_VRRP.advertSeconds * 1000} ms VRRPv3 adverts, track script on uvsd's /healthz (API socket) every ${LAB_VRRP.scriptInterval} s (fall ${LAB_VRRP.scriptFall}), nopreempt`,
    );
    console.log(`  lb1 ${lab.state('lb1')} holds ${lab.heldAddresses('lb1').join(' ')}; lb2 ${lab.state('lb2')}`);
    console.log(
      `  keepalived.conf of lb1: ${join(lab.dir, 'lb1.keepalived.conf')} (examples/keepalived/keepalived.conf is the documented one)`,
    );

    title("3. kill -9 uvsd on lb1 (the node lives): keepalived's track script fails, lb2 takes over");
    await killUnderLoad('uvsd', 300);

    title('4. uvsd on lb1 again: its keepalived goes back to BACKUP and stays there (nopreempt)');
    await startUvsd('lb1');
    await lab.waitState('lb1', 'BACKUP');
    console.log(`  lb1 ${lab.state('lb1')}, lb2 ${lab.state('lb2')} holds ${lab.heldAddresses('lb2').join(' ')}`);

    title('5. lb2 dies whole (links down, every process SIGKILLed): lb1 takes over by VRRP timeout');
    await killUnderLoad('node', 400);

    title('6. Teardown');
    await cleanup();
    const left = Lab.existing('uvsfo');
    console.log(left.length ? `  LEFT BEHIND: ${left.join(' ')}` : '  keepalived and uvsd stopped on both nodes, namespaces removed');
    return allKept && left.length === 0 ? 0 : 1;
  } catch (e) {
    console.error(`\nfailover demo failed: ${(e as Error).message}`);
    await cleanup();
    return 1;
  }
}
