/**
 * `npm run demo -- ecmp`: three LB nodes active-active behind a BGP router (lab/ecmp-lab.ts).
 * Live TCP streams run through the VIP, spread by the router's ECMP hash; one node is killed
 * (links down, SIGKILL), later a fourth joins. Prints the router's next hops, the flows each
 * node carries before and after each event, the adoptions, and the streams kept and lost;
 * removes everything at the end, on failure or on Ctrl-C.
 */
import type { StatsResponse } from '../control/api-types';
import { apiCall } from '../control/client';
import { echoStreams } from './clients';
import { EcmpLab } from './ecmp-lab';
import { Lab, LAB_VIP, LAB_VIP6, sleep } from './lab';

const PORT = 9007;
const PREFIX = 'uvsecmp';

function title(s: string): void {
  console.log(`\n\x1b[1m== ${s}\x1b[0m`);
}

export async function ecmpDemo(): Promise<number> {
  if (!EcmpLab.available()) {
    console.error('the ECMP demo needs BIRD 2: apt-get install bird2 (scripts/ensure-deps.sh does it as root)');
    return 1;
  }
  const lab = new EcmpLab(PREFIX);
  let cleaned = false;
  const cleanup = () => {
    if (cleaned) return;
    cleaned = true;
    lab.down();
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      console.log(`\n${sig}: removing the lab`);
      cleanup();
      process.exit(130);
    });
  }
  const service = (vip: string, rs: string[]) => ({
    protocol: 'tcp',
    address: vip,
    port: PORT,
    scheduler: 'mh',
    schedFlags: ['mh-fallback', 'mh-port'],
    forwarding: 'tunnel',
    realServers: rs.map((a) => ({ address: a })),
  });
  const services = [service(LAB_VIP, lab.rsAddrs), service(LAB_VIP6, lab.rsAddrs6)];
  const stats = async (k: number) => (await apiCall<StatsResponse>(lab.socket(k), 'GET', '/v1/stats')).body;
  const adopted = async (ks: number[]) =>
    Object.fromEntries(await Promise.all(ks.map(async (k) => [k, (await stats(k)).adopted] as const))) as Record<number, number>;
  const line = (label: string, nodes: number[], ks: number[]) => {
    const per = ks.map((k) => `lb${k} ${String(nodes.filter((n) => n === k).length).padStart(3)}`).join('   ');
    console.log(`  ${label.padEnd(34)} ${per}`);
  };
  const route = () =>
    `router: ${LAB_VIP.replace(/\.\d+$/, '.0/24')} → ${lab
      .nexthops()
      .map((k) => `lb${k}`)
      .join(', ')}`;
  try {
    title('1. Lab: client → router (BIRD) → lb1 | lb2 | lb3 (BIRD + uvsd) → switch → three real servers and redis-server');
    lab.up(3);
    await lab.waitServers();
    for (const k of [1, 2, 3]) lab.startBird(k);
    console.log('  every node announces the VIP ranges over BGP while uvsd keeps them in its table 4712;');
    console.log('  the router merges the equal routes into one multipath route and hashes each flow (addresses, ports) onto a node;');
    console.log('  forwarding is IPIP with direct return (the servers answer through the router), scheduler mh with mh-port');

    title('2. uvsd on the three nodes, same services, same Redis');
    await Promise.all([1, 2, 3].map((k) => lab.startUvsd(k, { ...lab.config(k, services), log: { level: 'warn' } })));
    const conv = await lab.waitNexthops([1, 2, 3]);
    await lab.waitNexthops([1, 2, 3], true);
    console.log(`  ${route()} (BGP converged ${conv} ms after the last uvsd started)`);

    title('3. 60 TCP streams (a 500-byte chunk every 100 ms each, every echoed byte checked), 24 s long');
    const st = echoStreams(lab.ns.cl, LAB_VIP, PORT, 60, 24);
    const ready = await st.ready;
    await sleep(2500);
    const ports = ready.ports;
    const b0 = await lab.carriers([1, 2, 3], ports);
    console.log('  flows per node (asked of each uvsd):');
    line('before', b0, [1, 2, 3, 4]);

    title('4. lb2 dies: links down, then kill -9 of its uvsd and BIRD');
    const a0 = await adopted([1, 3]);
    const t0 = Date.now();
    await lab.killNode(2);
    const gone = await lab.waitNexthops([1, 3]);
    console.log(`  ${route()} (${gone} ms after the kill)`);
    await sleep(1500);
    const b1 = await lab.carriers([1, 3], ports);
    const a1 = await adopted([1, 3]);
    line('after the kill', b1, [1, 2, 3, 4]);
    const between = b0.filter((k, i) => k !== 2 && k !== b1[i]).length;
    console.log(
      `  flows moved: ${b0.filter((k, i) => k !== b1[i]).length}: lb2's ${b0.filter((k) => k === 2).length}` +
        (between ? `, and ${between} between lb1 and lb3 (hash-threshold ECMP re-draws the boundaries of every next hop)` : ''),
    );
    console.log(`  adopted from Redis: lb1 ${a1[1]! - a0[1]!}, lb3 ${a1[3]! - a0[3]!} (shadow entries pre-loaded from Redis: no wait)`);

    title('5. lb4 joins: BIRD + uvsd on a new node');
    lab.addNode(4);
    lab.startBird(4);
    const t4 = Date.now();
    await lab.startUvsd(4, { ...lab.config(4, services), log: { level: 'warn' } });
    const joined = await lab.waitNexthops([1, 3, 4]);
    console.log(`  ${route()} (${Date.now() - t4} ms after uvsd started; it announces once Redis is connected; ${joined} ms of it BGP)`);
    await sleep(1500);
    const b2 = await lab.carriers([1, 3, 4], ports);
    const a2 = await adopted([1, 3, 4]);
    const s4 = await stats(4);
    line('after lb4 joined', b2, [1, 2, 3, 4]);
    console.log(
      `  adopted: lb1 ${a2[1]! - a1[1]!}, lb3 ${a2[3]! - a1[3]!}, lb4 ${a2[4]} (lb4: ${s4.redis!.lookups.hit} by a Redis lookup, the rest from records published since it subscribed)`,
    );

    title('6. The streams end');
    const ss = await st.done;
    const lost = ss.filter((s) => s.error !== null || s.bad !== 0 || s.echoed !== s.sent);
    const spanned = ss.filter((s) => s.firstAt < t0 && s.lastAt > t4 + 3000).length;
    console.log(
      `  TCP streams: ${ss.length} started, ${ss.length - lost.length} completed byte-identical, ${lost.length} lost; ${spanned} of them ran across both events`,
    );
    for (const s of lost.slice(0, 5)) console.log(`    lost: client port ${s.port} (${s.server}): ${s.error ?? `${s.bad} bad bytes`}`);

    title('7. Teardown');
    cleanup();
    const left = Lab.existing(PREFIX);
    console.log(left.length ? `  LEFT BEHIND: ${left.join(' ')}` : '  nodes, router and servers stopped, namespaces removed');
    return lost.length === 0 && ss.length === 60 && left.length === 0 ? 0 : 1;
  } catch (e) {
    console.error(`\nECMP demo failed: ${(e as Error).message}`);
    cleanup();
    return 1;
  }
}
