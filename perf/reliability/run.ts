/**
 * `npm run reliability`: uvs under hostile input and failures, measured with real clients in
 * namespace labs it creates (prefix `uvrel`, and `uvrelf` for the two-node Redis lab) and always
 * removes — at the end, on failure and on Ctrl-C. Writes RELIABILITY.md and reliability.json
 * (every figure of this one run) into perf/reliability/. Scenarios, in order:
 *
 *   fuzz       ≥ 10 M malformed/random frames through a live uvsd          (fuzz.ts)
 *   synflood   SYN floods at several rates against the default table        (floods.ts)
 *   hashflood  IPv6 SYNs from one /64 vs from random addresses              (floods.ts)
 *   tablefull  a tiny table filled by a flood                               (floods.ts)
 *   steerflood SYNs aimed at one queue vs random ones: the workers' shares   (floods.ts)
 *   redis      Redis killed 30 s and hung 30 s under load, then a failover  (redis.ts)
 *   replay     a signed record replayed and a forged node list, recordKey set (redis.ts)
 *   reload     ×10 reloads and a worker crash under load                    (reload.ts)
 *   abuse      bad API bodies, YAML, state files, forged Redis data, the     (abuse.ts)
 *              largest accepted requests, a squatter on the healthz port
 *
 * Every load is bounded in time and count; measurement only, nothing here changes uvs.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { Lab } from '../../lab/lab';
import { FailoverLab } from '../../lab/failover-lab';
import { ensureTools } from '../deps';
import { killLive, waitLive } from '../exec';
import { buildRelgen, killClients, type Ctx } from './common';
import { renderMarkdown, type ReliabilityReport, type ScenarioResult, type Value } from './report';
import { fuzzScenario } from './fuzz';
import { hashFloodScenario, steerFloodScenario, synFloodScenario, tableFullScenario } from './floods';
import { redisScenario, replayScenario } from './redis';
import { reloadScenario } from './reload';
import { abuseScenario } from './abuse';

const ROOT = join(__dirname, '..', '..', '..');

export const SCENARIOS = ['fuzz', 'synflood', 'hashflood', 'tablefull', 'steerflood', 'redis', 'replay', 'reload', 'abuse'] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

const TITLES: Record<ScenarioName, string> = {
  fuzz: 'Fuzz: malformed and random frames through a live uvsd',
  synflood: 'SYN flood against the default table',
  hashflood: 'IPv6 hash flood: one /64 against random addresses',
  tablefull: 'Table full: a tiny table under a flood',
  steerflood: 'Queue steering: floods aimed at one worker against random ones',
  redis: 'Redis killed and hung under load, then a failover',
  replay: 'Redis records replayed and a forged node list, with a record key',
  reload: 'Reloads and a worker crash under load',
  abuse: 'Abuse of the control plane',
};

export interface Options {
  quick: boolean;
  only: ScenarioName[];
  out: string;
  prefix: string;
  install: boolean;
  workers: number;
  capture: string | null;
}

const HELP = `Usage: npm run reliability -- [options]      (as root, alone on the machine)

Runs uvs under hostile input and failures in namespace labs it creates and removes, and writes
RELIABILITY.md and reliability.json (the raw figures) into perf/reliability/. The full run takes
about 20 minutes; --quick about 5.

Scenarios (in this order): ${SCENARIOS.join(', ')}

Options:
  --quick             every count and duration scaled down (development; not figures to quote)
  --only LIST         only these scenarios (comma-separated), e.g. --only fuzz,abuse
  --out DIR           where RELIABILITY.md and reliability.json go (default perf/reliability/)
  --prefix P          lab prefix, ≤ 7 characters of a-z0-9 (default uvrel; the Redis lab P + "f")
  --workers N         uvsd worker threads (default 2)
  --capture DIR       keep tcpdump captures of the real clients' traffic in DIR (Redis scenario:
                      the client, lb1's device, lb1's link to the servers, lb2's device), and each
                      failed request's packets in DIR/redis-failures.txt; SYN flood and table
                      full: the echo streams' packets at the client and the real servers, each
                      broken stream's in DIR/<round>-echo-failures.txt (diagnosis; costs CPU)
  --no-install        do not apt-get missing tools (cc, curl, redis-server); what needs them is skipped
  -h, --help          this text`;

export function parseOptions(argv: string[]): Options | 'help' {
  const o: Options = {
    quick: false,
    only: [...SCENARIOS],
    out: join(ROOT, 'perf', 'reliability'),
    prefix: 'uvrel',
    install: true,
    workers: 2,
    capture: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const val = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    switch (a) {
      case '-h':
      case '--help':
        return 'help';
      case '--quick':
        o.quick = true;
        break;
      case '--only': {
        const xs = val()
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        for (const x of xs)
          if (!(SCENARIOS as readonly string[]).includes(x))
            throw new Error(`unknown scenario ${JSON.stringify(x)} (one of ${SCENARIOS.join(', ')})`);
        o.only = SCENARIOS.filter((s) => xs.includes(s));
        break;
      }
      case '--out':
        o.out = val();
        break;
      case '--prefix':
        o.prefix = val();
        if (!/^[a-z0-9]{1,7}$/.test(o.prefix)) throw new Error('--prefix: 1–7 characters of a-z0-9');
        break;
      case '--workers': {
        const n = Number(val());
        if (!Number.isInteger(n) || n < 1 || n > 64) throw new Error('--workers: an integer from 1 to 64');
        o.workers = n;
        break;
      }
      case '--no-install':
        o.install = false;
        break;
      case '--capture':
        o.capture = val();
        break;
      default:
        throw new Error(`unknown option ${a}`);
    }
  }
  return o;
}

const t0 = Date.now();
function log(s: string): void {
  const e = Math.round((Date.now() - t0) / 1000);
  process.stderr.write(`[${String(Math.floor(e / 60)).padStart(2)}:${String(e % 60).padStart(2, '0')}] ${s}\n`);
}

function machineInfo(prefix: string): Record<string, Value> {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  let os = '?';
  try {
    os = /^PRETTY_NAME="?([^"\n]*)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? '?';
  } catch {
    /* none */
  }
  const others = otherNetns(prefix);
  return {
    cpus: availableParallelism(),
    cpuModel: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1]?.trim() ?? cpus()[0]?.model ?? '?',
    memGiB: Math.round(totalmem() / 2 ** 30),
    kernel: release(),
    os,
    node: process.version,
    loadavgAtStart: loadavg()
      .map((x) => x.toFixed(2))
      .join(' '),
    otherNamespacesAtStart: others.length ? `${others.length} (other programs sharing the CPUs: the figures are then noisier)` : 'none',
  };
}

function otherNetns(prefix: string): string[] {
  try {
    return execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter((n) => n && !n.startsWith(`${prefix}-`) && !n.startsWith(`${prefix}f-`));
  } catch {
    return [];
  }
}

function clockTicks(): number {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
}

const METHOD = [
  "Labs (lab/lab.ts): network namespaces client ↔ LB node ↔ three real servers over veth pairs; uvsd runs in the LB node on its multi-queue TUN device with the lab's real servers (lab/servers.ts: HTTP 8080, TCP echo 9007, UDP echo 5353). The Redis scenario uses the two-node lab (lab/failover-lab.ts): client → router → lb1 or lb2, real servers and redis-server on a shared switch. Both labs are created for the run and removed at its end, also on failure and Ctrl-C.",
  "Attack traffic comes from relgen (perf/reliability/relgen.c, compiled with cc at run time): an AF_PACKET sender (sendmmsg, 32 frames per call, paced by a token schedule when a rate is given). Fuzz frames go straight into uvsd's TUN device from the LB node (so malformed packets the kernel's IP input would refuse still reach uvsd); floods leave the client's veth with the LB node's MAC and are routed into the device as real traffic is. Spoofed sources are in 198.18.0.0/15 and 2001:db8::/32, blackholed in the LB node, so answers to them vanish as they would on the Internet.",
  "Real clients (perf/reliability/client.ts, in the client namespace): connect-probe opens a new TCP connection every interval and sends one HTTP GET (success = a 200 answer within 5 s; connect time = SYN to established, as the client saw it, so a dropped SYN costs the kernel's 1 s retransmission); echo streams keep one TCP connection each and check every numbered line that comes back; lab/clients.ts's curl downloads are checked byte for byte (sha256) against the generated content. API latency: api-probe sends GET /v1/info over uvsd's unix socket, one at a time, every 20 ms — what the control thread's event loop makes a request wait.",
  "uvsd's own figures come from its API (GET /v1/stats: packet counters, drops by reason, table entries, worker restarts, Redis sync state) and /proc (CPU = utime+stime of the uvsd process, all threads, over the window; RSS sampled every 200 ms).",
  'Percentiles are nearest-rank over every sample of the window. "Expected" is what a load balancer that holds up shows; "met" compares this run against it. Nothing here is a pass/fail test: the figures are measured and reported as they came out, on a shared machine whose load is recorded under Machine.',
];

export async function reliabilityCommand(argv: string[]): Promise<number> {
  let o: Options;
  try {
    const p = parseOptions(argv);
    if (p === 'help') {
      console.log(HELP);
      return 0;
    }
    o = p;
  } catch (e) {
    console.error(`reliability: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (process.getuid?.() !== 0) {
    console.error('reliability needs root: it creates network namespaces and a TUN device');
    return 1;
  }
  if (!existsSync(join(ROOT, 'dist', 'control', 'uvsd.js')) || !existsSync(join(ROOT, 'build', 'Release', 'uvs_tun.node'))) {
    console.error('reliability: uvs is not built (npm run build)');
    return 1;
  }
  log(`uvs reliability run, ${o.quick ? 'quick' : 'full'}: ${o.only.join(', ')}`);
  const need = ['cc', 'curl'];
  if (o.only.includes('redis') || o.only.includes('replay') || o.only.includes('abuse')) need.push('redis');
  const missing = new Set(ensureTools(need, o.install, log));
  if (missing.has('cc')) {
    console.error('reliability: no C compiler (cc) for the packet generator');
    return 1;
  }

  const machine = machineInfo(o.prefix);
  const hz = clockTicks();
  const lab = new Lab({ prefix: o.prefix });
  const flab = new FailoverLab(`${o.prefix}f`);
  let cleaning: Promise<void> | null = null;
  const cleanup = (): Promise<void> =>
    (cleaning ??= (async () => {
      killClients('SIGKILL');
      killLive('SIGKILL');
      await lab.stopUvsd(5000).catch(() => undefined);
      await waitLive(3000);
      lab.down();
      flab.down();
    })());
  const onSignal = (sig: NodeJS.Signals) => {
    log(`${sig}: stopping and removing the labs ${o.prefix}, ${o.prefix}f`);
    void cleanup().then(() => process.exit(130));
  };
  const sigs: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of sigs) process.on(s, onSignal);
  const onFatal = (e: unknown) => {
    log(`fatal: ${(e as Error)?.stack ?? String(e)}`);
    void cleanup().then(() => process.exit(1));
  };
  process.on('uncaughtException', onFatal);
  process.on('unhandledRejection', onFatal);

  const results: ScenarioResult[] = [];
  try {
    lab.up();
    await lab.waitServers();
    const relgenBin = join(lab.dir, 'relgen');
    await buildRelgen(relgenBin);
    if (o.capture) mkdirSync(o.capture, { recursive: true });
    const ctx: Ctx = { lab, quick: o.quick, relgen: relgenBin, workers: o.workers, hz, log, capture: o.capture ?? undefined };
    for (const name of o.only) {
      const r: ScenarioResult = { key: name, title: TITLES[name], how: '', figures: [], tables: [], notes: [], seconds: 0 };
      results.push(r);
      const s0 = Date.now();
      log(`── ${TITLES[name]}`);
      try {
        if ((name === 'redis' || name === 'replay') && missing.has('redis')) throw new Error('redis-server is not installed');
        if (name === 'abuse' && missing.has('redis')) r.notes.push('redis-server is not installed: the forged-Redis cases were skipped.');
        switch (name) {
          case 'fuzz':
            await fuzzScenario(ctx, r);
            break;
          case 'synflood':
            await synFloodScenario(ctx, r);
            break;
          case 'hashflood':
            await hashFloodScenario(ctx, r);
            break;
          case 'tablefull':
            await tableFullScenario(ctx, r);
            break;
          case 'steerflood':
            await steerFloodScenario(ctx, r);
            break;
          case 'redis':
            await redisScenario(ctx, flab, r);
            break;
          case 'replay':
            await replayScenario(ctx, flab, r);
            break;
          case 'reload':
            await reloadScenario(ctx, r);
            break;
          case 'abuse':
            await abuseScenario(ctx, r, !missing.has('redis'));
            break;
        }
      } catch (e) {
        r.error = (e as Error).message;
        log(`${name}: did not finish: ${r.error}`);
      } finally {
        killClients('SIGKILL');
        await lab.stopUvsd(5000).catch(() => undefined);
        r.seconds = (Date.now() - s0) / 1000;
      }
      for (const f of r.figures.filter((x) => x.ok === false))
        log(`${name}: NOT MET: ${f.label}: ${JSON.stringify(f.value)} (expected ${f.expect})`);
      log(
        `${name}: done in ${Math.round(r.seconds)} s, ${r.figures.filter((x) => x.ok === true).length} of ${r.figures.filter((x) => x.ok === true || x.ok === false).length} checks met`,
      );
    }
  } catch (e) {
    log(`run failed: ${(e as Error).message}`);
    results.push({
      key: 'harness',
      title: 'Harness',
      how: 'The run itself.',
      figures: [],
      tables: [],
      notes: [],
      seconds: 0,
      error: (e as Error).message,
    });
  } finally {
    log(`removing the labs ${o.prefix}, ${o.prefix}f`);
    await cleanup();
    for (const s of sigs) process.off(s, onSignal);
    process.off('uncaughtException', onFatal);
    process.off('unhandledRejection', onFatal);
  }
  const left = [...Lab.existing(o.prefix), ...Lab.existing(`${o.prefix}f`)];
  if (left.length) log(`WARNING: namespaces left behind: ${left.join(' ')}`);
  machine.loadavgAtEnd = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  machine.clockTicksPerSecond = hz;
  const report: ReliabilityReport = {
    tool: 'uvs reliability (perf/reliability/run.ts)',
    generatedAt: new Date().toISOString(),
    mode: o.only.length !== SCENARIOS.length ? 'custom' : o.quick ? 'quick' : 'full',
    command: argv.length ? `npm run reliability -- ${argv.join(' ')}` : 'npm run reliability',
    wallSeconds: (Date.now() - t0) / 1000,
    machine,
    method: METHOD,
    scenarios: results,
    leftBehind: left,
  };
  mkdirSync(o.out, { recursive: true });
  const md = renderMarkdown(report);
  writeFileSync(join(o.out, 'RELIABILITY.md'), md);
  writeFileSync(join(o.out, 'reliability.json'), JSON.stringify(report, null, 2) + '\n');
  log(`wrote ${join(o.out, 'RELIABILITY.md')} and reliability.json (${Math.round(report.wallSeconds)} s in all)`);
  const sum = md.indexOf('## Summary');
  process.stdout.write(md.slice(sum, md.indexOf('\n## ', sum + 5)) + '\n');
  return left.length || results.some((r) => r.error) ? 1 : 0;
}

if (require.main === module) {
  reliabilityCommand(process.argv.slice(2)).then((c) => process.exit(c));
}
