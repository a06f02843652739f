/**
 * `npm run demo`: builds the namespace lab, starts uvsd in it, drives real traffic (curl, UDP,
 * iperf3) through the VIP and prints what happened — the spread over the real servers, the
 * connection counts as `ipvsadm -Ln` would show them, the dataplane counters — then removes
 * everything, also on Ctrl-C or failure.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { ConnectionsResponse, ServicesResponse, StatsResponse } from '../control/api-types';
import { apiCall } from '../control/client';
import { formatConnections, formatList } from '../control/ipvsadm/format';
import { hasCommand, Lab, LAB_VIP, LAB_VIP6, LAB_VIP6_CIDR, LAB_VIP_CIDR, sleep } from './lab';

const ROOT = join(__dirname, '..', '..');
const TOOLS = join(ROOT, 'dist', 'lab', 'tools.js');

function title(s: string): void {
  console.log(`\n\x1b[1m== ${s}\x1b[0m`);
}

function bar(counts: Record<string, number>): string {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  return Object.keys(counts)
    .sort()
    .map((k) => `  ${k.padEnd(5)} ${String(counts[k]).padStart(4)}  ${'#'.repeat(Math.round((40 * counts[k]!) / Math.max(1, total)))}`)
    .join('\n');
}

async function main(): Promise<number> {
  if (process.getuid?.() !== 0) {
    console.error('the demo needs root: it creates network namespaces and a TUN device');
    return 1;
  }
  const lab = new Lab({ prefix: 'uvsdemo' });
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    await lab.stopUvsd().catch(() => undefined);
    lab.down();
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      console.log(`\n${sig}: removing the lab`);
      void cleanup().then(() => process.exit(130));
    });
  }
  try {
    title('1. Lab: client, LB node and three real servers in network namespaces');
    lab.up();
    await lab.waitServers();
    console.log(`  client      ${lab.clientNs.padEnd(14)} ${lab.clientAddr}, ${lab.clientAddr6}`);
    console.log(`  LB node     ${lab.lbNs.padEnd(14)} runs uvsd; VIP ranges ${LAB_VIP_CIDR}, ${LAB_VIP6_CIDR} → TUN device uvs0`);
    lab.rsNs.forEach((n, i) =>
      console.log(`  real server ${n.padEnd(14)} ${lab.rsAddrs[i]}, ${lab.rsAddrs6[i]}  (HTTP :8080, UDP echo :5353, iperf3 :5201)`),
    );

    const services = [
      {
        name: 'web',
        protocol: 'tcp',
        address: LAB_VIP,
        port: 80,
        scheduler: 'rr',
        realServers: lab.rsAddrs.map((a) => ({ address: a, port: 8080 })),
      },
      {
        name: 'dns-ish',
        protocol: 'udp',
        address: LAB_VIP,
        port: 53,
        scheduler: 'wrr',
        realServers: lab.rsAddrs.map((a, i) => ({ address: a, port: 5353, weight: 3 - i })),
      },
      {
        name: 'iperf',
        protocol: 'tcp',
        address: LAB_VIP,
        port: 5201,
        scheduler: 'rr',
        realServers: [{ address: lab.rsAddrs[0]!, port: 5201 }],
      },
      {
        name: 'web6',
        protocol: 'tcp',
        address: LAB_VIP6,
        port: 80,
        scheduler: 'mh',
        realServers: lab.rsAddrs6.map((a) => ({ address: a, port: 8080 })),
      },
      {
        name: 'web6-fullnat',
        protocol: 'tcp',
        address: LAB_VIP6,
        port: 82,
        scheduler: 'rr',
        forwarding: 'fullnat',
        realServers: lab.rsAddrs6.map((a) => ({ address: a, port: 8080 })),
      },
    ];
    const cfgFile = lab.writeConfig(
      lab.config(services, {
        log: { level: 'warn' },
        dataplane: { vipCidrs: [LAB_VIP_CIDR, LAB_VIP6_CIDR], fullnat: { addresses: ['fd00:200:99::1'] } },
      }),
    );
    title('2. uvsd: masq (VIP:80 → :8080, VIP:53 → :5353), rr and wrr 3/2/1; IPv6 mh and full-NAT; two worker threads');
    await lab.startUvsd(cfgFile);
    console.log(`  uvsd running in ${lab.lbNs}; API on ${lab.socket}`);

    title(`3. 30 HTTP requests: curl http://${LAB_VIP}/ (rr)`);
    const web: Record<string, number> = {};
    for (let i = 0; i < 30; i++) {
      let who = 'no answer';
      try {
        who = lab.exec(lab.clientNs, 'curl', ['-s', '-m', '10', `http://${LAB_VIP}/`]).trim();
      } catch {
        /* counted as no answer: the verdict below reads uvs's own counters */
      }
      web[who] = (web[who] ?? 0) + 1;
    }
    console.log(bar(web));

    title(`4. 30 UDP datagrams to ${LAB_VIP}:53, each from a new source port (wrr 3/2/1)`);
    const dns: Record<string, number> = {};
    for (let i = 0; i < 30; i++) {
      // Source ports of our choosing: 30 random ephemeral ones repeat one about once in 60 runs,
      // and a repeated port is the same UDP flow (same server), not a new wrr pick.
      const args = [TOOLS, 'udp-ask', LAB_VIP, '53', `q${i}`, '5000', String(41000 + i)];
      let answer: string | null = null;
      try {
        answer = (JSON.parse(lab.exec(lab.clientNs, process.execPath, args, 30_000)) as { answer: string | null }).answer;
      } catch {
        /* no answer in 5 s (the tool exits 1): counted as such */
      }
      const who = answer ? answer.split(' ')[0]! : 'no answer';
      dns[who] = (dns[who] ?? 0) + 1;
    }
    console.log(bar(dns));
    // uvs's own count of the connections it scheduled, before anything else reaches these services.
    const scheduled = (await apiCall<ServicesResponse>(lab.socket, 'GET', '/v1/services')).body.services;

    if (hasCommand('iperf3')) {
      title(`5. Bulk TCP: iperf3 -c ${LAB_VIP} -t 3`);
      try {
        const j = JSON.parse(lab.exec(lab.clientNs, 'iperf3', ['-c', LAB_VIP, '-p', '5201', '-t', '3', '-J'], 30000));
        const gbps = j.end.sum_received.bits_per_second / 1e9;
        console.log(
          `  ${gbps.toFixed(2)} Gb/s received by ${lab.rsAddrs[0]} through uvs (retransmits: ${j.end.sum_sent.retransmits ?? 'n/a'})`,
        );
      } catch (e) {
        console.log(`  iperf3 failed: ${(e as Error).message.split('\n')[0]}`);
      }
    }

    title(`6. IPv6: curl http://[${LAB_VIP6}]/whoami (mh) and :82 (full-NAT: the server sees the pool address)`);
    for (const port of [80, 82]) {
      const who = JSON.parse(lab.exec(lab.clientNs, 'curl', ['-s', '-m', '5', `http://[${LAB_VIP6}]:${port}/whoami`]));
      console.log(`  :${port}  answered by ${who.name} (${who.server}); it saw the client as ${who.client}`);
    }

    title('7. A connection that stays open while we look: a 3 s HTTP response in the background');
    const bg = lab.spawn(lab.clientNs, 'curl', ['-s', '-m', '10', `http://${LAB_VIP}/hold?ms=3000`]);
    await sleep(800);

    title('8. uvsadm -Ln (ipvsadm layout)');
    const svcs = (await apiCall<ServicesResponse>(lab.socket, 'GET', '/v1/services')).body;
    process.stdout.write(formatList(svcs.tableSize, svcs.services));
    title('9. uvsadm -Ln --stats');
    process.stdout.write(formatList(svcs.tableSize, svcs.services, { stats: true, header: false }));
    title('10. uvsadm -Lnc (first 8 entries)');
    const conns = (await apiCall<ConnectionsResponse>(lab.socket, 'GET', '/v1/connections?limit=8')).body;
    process.stdout.write(formatConnections(conns.connections));
    console.log(`  … ${conns.total} entries in the connection table`);
    await new Promise((r) => bg.on('exit', r));

    title('11. Dataplane counters');
    const st = (await apiCall<StatsResponse>(lab.socket, 'GET', '/v1/stats')).body;
    console.log(`  packets in ${st.packets.rxPackets}, out ${st.packets.txPackets}, new connections ${st.packets.connsNew}`);
    console.log(`  per worker: ${st.workers.map((w) => `#${w.id} ${w.rxPackets} packets`).join(', ')}`);
    const drops = Object.entries(st.drops).filter(([, v]) => v > 0);
    console.log(`  drops: ${drops.length ? drops.map(([k, v]) => `${k} ${v}`).join(', ') : 'none'}`);
    console.log(
      st.node.replies.path === 'nftables'
        ? '  masq replies: nftables table inet uvs_uvs0 (a set element per real server) and one rule, however many servers'
        : `  masq replies: one policy rule per real server (no nftables: ${st.node.replies.reason})`,
    );

    title('12. Teardown');
    await cleanup();
    const left = Lab.existing('uvsdemo');
    console.log(left.length ? `  LEFT BEHIND: ${left.join(' ')}` : '  uvsd stopped, device, routes, rules and namespaces removed');
    // The verdict is the scheduling, as uvs counted it: new connections per real server (rr: 10
    // each; wrr 3/2/1: 15, 10, 5). What the clients saw can differ on a busy machine — a reply
    // lost or late — and is reported as that, not as a scheduling error.
    const scheduledTo = (name: string) =>
      Object.fromEntries(
        (scheduled.find((s) => s.name === name)?.realServers ?? []).map((r) => [`rs${lab.rsAddrs.indexOf(r.address) + 1}`, r.stats.conns]),
      ) as Record<string, number>;
    const same = (a: Record<string, number>, b: Record<string, number>) => ['rs1', 'rs2', 'rs3'].every((k) => (a[k] ?? 0) === (b[k] ?? 0));
    const want = { web: { rs1: 10, rs2: 10, rs3: 10 }, 'dns-ish': { rs1: 15, rs2: 10, rs3: 5 } };
    const seen = { web, 'dns-ish': dns };
    let ok = true;
    for (const name of ['web', 'dns-ish'] as const) {
      const c = scheduledTo(name);
      if (!same(c, want[name])) {
        ok = false;
        console.log(`  ${name}: uvs scheduled ${JSON.stringify(c)}, the scheduler promises ${JSON.stringify(want[name])}`);
      } else if (!same(seen[name], c)) {
        console.log(
          `  ${name}: uvs scheduled ${JSON.stringify(c)} as promised; the client saw ${JSON.stringify(seen[name])} (answers lost or late on a busy machine)`,
        );
      }
    }
    console.log(
      ok
        ? '\nDemo finished: traffic flowed through uvs as configured.'
        : '\nDemo finished, but uvs did not schedule as the schedulers promise (see above).',
    );
    return ok && left.length === 0 ? 0 : 1;
  } catch (e) {
    console.error(`\ndemo failed: ${(e as Error).message}`);
    try {
      console.error(execFileSync('tail', ['-n', '20', join(lab.dir, 'uvsd.log')], { encoding: 'utf8' }));
    } catch {
      /* no log */
    }
    await cleanup();
    return 1;
  }
}

if (process.argv[2] === 'failover') {
  void import('./demo-failover').then(({ failoverDemo }) => failoverDemo().then((c) => process.exit(c)));
} else if (process.argv[2] === 'ecmp') {
  void import('./demo-ecmp').then(({ ecmpDemo }) => ecmpDemo().then((c) => process.exit(c)));
} else if (process.argv[2] === undefined) {
  main().then((c) => process.exit(c));
} else {
  console.error(`usage: npm run demo [-- failover|ecmp]`);
  process.exit(2);
}
