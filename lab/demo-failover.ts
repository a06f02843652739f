/**
 * `npm run demo -- failover`: two LB nodes and one Redis. Live TCP transfers and a UDP session run
 * through lb1; lb1 is killed with SIGKILL; the same connections complete through lb2. Prints the
 * connections kept and lost and how long the takeover took, then removes everything.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { apiCall } from '../control/client';
import { formatList, type FmtService } from '../control/ipvsadm-format';
import { blobDownload } from './clients';
import { FailoverLab, type LbNode } from './failover-lab';
import { Lab, LAB_VIP, sleep } from './lab';

const ROOT = join(__dirname, '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');

function title(s: string): void {
  console.log(`\n\x1b[1m== ${s}\x1b[0m`);
}

export async function failoverDemo(): Promise<number> {
  const lab = new FailoverLab('uvsfo');
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    await lab.stopUvsd('lb1').catch(() => undefined);
    await lab.stopUvsd('lb2').catch(() => undefined);
    lab.down();
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      console.log(`\n${sig}: removing the lab`);
      void cleanup().then(() => process.exit(130));
    });
  }
  const list = async (n: LbNode) => {
    const v = (await apiCall<{ tableSize: number; services: FmtService[] }>(lab.socket(n), 'GET', '/v1/services')).body;
    process.stdout.write(formatList(v.tableSize, v.services, { header: false }));
  };
  const stats = async (n: LbNode) => (await apiCall<{ adopted: number; shadows: number; table: { entries: number }; redis: { written: number; received: number } }>(lab.socket(n), 'GET', '/v1/stats')).body;
  try {
    title('1. Lab: client → router → lb1 | lb2 → switch → three real servers and redis-server');
    lab.up();
    await lab.waitServers();
    console.log(`  router sends ${LAB_VIP} to lb1; the servers' gateway 10.201.10.1 is on lb1 (as keepalived would hold it)`);
    const services = [
      { protocol: 'tcp', address: LAB_VIP, port: 80, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })) },
      { protocol: 'udp', address: LAB_VIP, port: 53, scheduler: 'rr', realServers: lab.rsAddrs.map((a) => ({ address: a, port: 5353 })) },
    ];
    title('2. uvsd on both nodes, same services, same Redis');
    for (const n of ['lb1', 'lb2'] as const) await lab.startUvsd(n, lab.config(n, services, { log: { level: 'warn' } }));
    await sleep(1000);

    title('3. Six 16 MB downloads (2 MB/s each) and a UDP session start through lb1');
    const streams = Array.from({ length: 6 }, (_, i) => blobDownload(lab.ns.cl, LAB_VIP, 80, 16 << 20, 300 + i, '2M').done);
    const udp = spawn('ip', ['netns', 'exec', lab.ns.cl, process.execPath, TOOLS, 'udp-session', LAB_VIP, '53', '40', '150'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let udpText = '';
    udp.stdout.on('data', (d: Buffer) => (udpText += d.toString()));
    const udpDone = new Promise((r) => udp.on('exit', r)); // listen now: it may end before the streams
    await sleep(3000);
    console.log('  lb1 (uvsadm -Ln):');
    await list('lb1');
    const s1 = await stats('lb1');
    const s2 = await stats('lb2');
    console.log(`  lb1 wrote ${s1.redis.written} flow records to Redis; lb2 pre-loaded ${s2.shadows} of them as shadow entries`);

    title('4. kill -9 lb1 — the router and the servers\' gateway move to lb2');
    const t0 = Date.now();
    await lab.failover();
    let takeover = -1;
    for (let i = 0; i < 200 && takeover < 0; i++) {
      if ((await stats('lb2')).adopted >= 6) takeover = Date.now() - t0;
      else await sleep(50);
    }
    console.log(takeover >= 0 ? `  lb2 carried every TCP flow ${takeover} ms after the kill (TCP retransmission brings the next packet)` : '  lb2 did not adopt all flows in 10 s');

    title('5. The same connections complete through lb2');
    const ok = await Promise.all(streams);
    await udpDone;
    const answers = (JSON.parse(udpText || '{"answers":[]}').answers as (string | null)[]).filter((a): a is string => a !== null);
    const kept = ok.filter(Boolean).length;
    console.log(`  TCP: ${ok.length} started, ${kept} completed byte-identical, ${ok.length - kept} lost`);
    console.log(`  UDP: ${answers.length}/40 answered, by ${[...new Set(answers)].join(', ')} (one real server before and after)`);
    console.log('  lb2 (uvsadm -Ln):');
    await list('lb2');
    const after = await stats('lb2');
    console.log(`  lb2 adopted ${after.adopted} flows`);

    title('6. Teardown');
    await cleanup();
    const left = Lab.existing('uvsfo');
    console.log(left.length ? `  LEFT BEHIND: ${left.join(' ')}` : '  both nodes stopped, namespaces removed');
    return kept === ok.length && new Set(answers).size === 1 && left.length === 0 ? 0 : 1;
  } catch (e) {
    console.error(`\nfailover demo failed: ${(e as Error).message}`);
    await cleanup();
    return 1;
  }
}
