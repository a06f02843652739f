/**
 * What an ECMP event costs a uvs tier of N nodes carrying F flows — computed, not measured: the
 * lab machine has two cores and runs at most four nodes and a few hundred flows
 * (test/integration/ecmp.test.ts measures those). This model scales the same mechanisms up:
 *
 *   1. Which flows move. The router hashes each flow to a point h in [0, 1) and, with Linux's
 *      hash-threshold multipath (fib_select_multipath: next hop i owns [i/n, (i+1)/n) for equal
 *      weights), a death or a join re-draws every boundary: besides the dead node's 1/n, flows
 *      move between survivors. A resilient nexthop group (`ip nexthop … type resilient`, which
 *      BIRD 2.0 does not program) moves only the dead node's share, or 1/(n+1) on a join.
 *   2. How a moved flow is adopted. Every node pre-loads the records the others publish as
 *      shadow entries, up to redis.maxShadowShare (0.5) of dataplane.tableSize; a moved flow
 *      that is a shadow on its new node is adopted by its first packet with no wait; one that is
 *      not is parked while its node asks Redis (two GETs: both directions' keys), at most
 *      redis.maxLookups (1024) per node in flight, and dropped after redis.parkTimeout (1 s) —
 *      then the client's TCP retransmits later.
 *   3. What Redis and the nodes carry. Per new connection the ECMP test measured ~3.5 SETs
 *      (≈1.75 records × 2 keys) and ~0.07 PUBLISH (records are batched every 50 ms) in a flow's
 *      first seconds; every published record reaches the N−1 other nodes.
 *
 * Assumptions (not measured here, stated in the output): a Redis instance serves ~100 k simple
 * commands/s (the order of redis-benchmark's GET/SET figures on one core without pipelining;
 * uvs pipelines, so this is conservative), the round trip to Redis is 0.5 ms, a shadow entry
 * costs 76 bytes of shared memory (layout.ts: 64-byte entry + chain and lock words).
 *
 *   node dist/perf/ecmp-model.js [--json]
 */

/** Next hop (0-based position) that owns hash point h among n equal next hops. */
export function owner(h: number, n: number): number {
  return Math.min(n - 1, Math.floor(h * n));
}

/**
 * Share of flows (uniform hash points) whose next hop changes when the next hop at position
 * `victim` of n is removed (kill), or one is appended at position n (join). Exact: the owners are
 * constant between the breakpoints i/n and j/m, so each segment is checked at its midpoint.
 */
export function movedShare(n: number, event: 'kill' | 'join', o: { victim?: number; resilient?: boolean } = {}): number {
  if (o.resilient) return event === 'kill' ? 1 / n : 1 / (n + 1);
  const m = event === 'kill' ? n - 1 : n + 1;
  const victim = o.victim ?? 0;
  // Identity of the next hop at position p after the event, as its position before (join: n = new).
  const after = (p: number) => (event === 'kill' ? (p >= victim ? p + 1 : p) : p);
  const points = new Set<number>([0, 1]);
  for (let i = 1; i < n; i++) points.add(i / n);
  for (let j = 1; j < m; j++) points.add(j / m);
  const xs = [...points].sort((a, b) => a - b);
  let moved = 0;
  for (let i = 0; i + 1 < xs.length; i++) {
    const mid = (xs[i]! + xs[i + 1]!) / 2;
    if (owner(mid, n) !== after(owner(mid, m))) moved += xs[i + 1]! - xs[i]!;
  }
  return moved;
}

export interface ModelParams {
  nodes: number;
  flows: number;
  tableSize: number;
  maxShadowShare: number;
  maxLookups: number;
  redisOpsPerSecond: number;
  redisMasters: number;
  redisRttMs: number;
  parkTimeoutMs: number;
  resilient: boolean;
}

export const DEFAULT_PARAMS: Omit<ModelParams, 'nodes' | 'flows'> = {
  tableSize: 65536,
  maxShadowShare: 0.5,
  maxLookups: 1024,
  redisOpsPerSecond: 100_000,
  redisMasters: 1,
  redisRttMs: 0.5,
  parkTimeoutMs: 1000,
  resilient: false,
};

export interface ModelResult {
  nodes: number;
  flows: number;
  tableSize: number;
  /** Flows that change node when a middle node dies / when one joins. */
  movedOnKill: number;
  movedOnJoin: number;
  /** Other nodes' flows each node would pre-load, and how many it may (the shadow cap). */
  shadowsWanted: number;
  shadowsHeld: number;
  /** Smallest power-of-two dataplane.tableSize that holds every shadow under the cap. */
  tableSizeForAllShadows: number;
  shadowMemoryMiB: number;
  /** Moved flows adopted with a Redis lookup (not a shadow on their new node), kill. */
  lookupsOnKill: number;
  /** Time for Redis to answer all of them (ms): the last moved flow's extra wait. */
  lastLookupMsOnKill: number;
  /** Those beyond parkTimeout: their first packet is dropped, TCP retransmits (RTO ≥ 200 ms). */
  beyondParkTimeoutOnKill: number;
}

/** The model for one (nodes, flows) point. */
export function model(p: ModelParams): ModelResult {
  const { nodes: n, flows: f } = p;
  const victim = Math.floor(n / 2); // a middle node: hash-threshold's worst case moves the most
  const movedOnKill = Math.round(f * movedShare(n, 'kill', { victim, resilient: p.resilient }));
  const movedOnJoin = Math.round(f * movedShare(n, 'join', { resilient: p.resilient }));
  const shadowsWanted = Math.round((f * (n - 1)) / n);
  const cap = Math.floor(p.tableSize * p.maxShadowShare);
  const shadowsHeld = Math.min(shadowsWanted, cap);
  // The cap refuses records beyond it, whichever they are: a moved flow is a shadow on its new
  // node with the probability held/wanted. The dead node's flows and its neighbours' alike.
  const shadowed = shadowsWanted === 0 ? 1 : shadowsHeld / shadowsWanted;
  const lookupsOnKill = Math.round(movedOnKill * (1 - shadowed));
  // Served at the slower of: Redis (2 GETs a lookup, over all masters) and the nodes' in-flight
  // bound (each survivor holds maxLookups in flight, each for one round trip).
  const survivors = n - 1;
  const redisMs = ((2 * lookupsOnKill) / (p.redisOpsPerSecond * p.redisMasters)) * 1000;
  const windowMs = ((lookupsOnKill / survivors / p.maxLookups) * p.redisRttMs) | 0;
  const lastLookupMsOnKill = lookupsOnKill === 0 ? 0 : Math.max(p.redisRttMs, redisMs, windowMs);
  const beyond = lastLookupMsOnKill <= p.parkTimeoutMs ? 0 : Math.round(lookupsOnKill * (1 - p.parkTimeoutMs / lastLookupMsOnKill));
  let tableSizeForAllShadows = 16;
  // The cap must hold every other node's flows, and the table this node's own besides.
  while (Math.floor(tableSizeForAllShadows * p.maxShadowShare) < shadowsWanted || tableSizeForAllShadows < shadowsWanted + Math.ceil(f / n))
    tableSizeForAllShadows *= 2;
  return {
    nodes: n,
    flows: f,
    tableSize: p.tableSize,
    movedOnKill,
    movedOnJoin,
    shadowsWanted,
    shadowsHeld,
    tableSizeForAllShadows,
    shadowMemoryMiB: (shadowsHeld * 76) / (1 << 20),
    lookupsOnKill,
    lastLookupMsOnKill: Math.round(lastLookupMsOnKill * 10) / 10,
    beyondParkTimeoutOnKill: beyond,
  };
}

/** Records per second each node receives through Redis pub/sub at a rate of new connections. */
export function recordsInPerNode(newConnsPerSecond: number, nodes: number, recordsPerConn = 1.75): number {
  return (newConnsPerSecond * recordsPerConn * (nodes - 1)) / nodes;
}

function fmt(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(n % 1e6 ? 2 : 0)} M` : n >= 1e4 ? `${Math.round(n / 1e3)} k` : String(n);
}

function main(argv: string[]): void {
  const rows: ModelResult[] = [];
  for (const nodes of [3, 4, 10, 20]) {
    for (const flows of [1_000, 100_000, 1_000_000]) {
      const d = model({ ...DEFAULT_PARAMS, nodes, flows });
      rows.push(d);
      // …and with dataplane.tableSize raised until every shadow fits.
      if (d.tableSizeForAllShadows > d.tableSize)
        rows.push(model({ ...DEFAULT_PARAMS, nodes, flows, tableSize: d.tableSizeForAllShadows }));
    }
  }
  if (argv.includes('--json')) {
    process.stdout.write(JSON.stringify({ params: DEFAULT_PARAMS, rows }, null, 1) + '\n');
    return;
  }
  const out: string[] = [];
  out.push(
    '| nodes | flows | tableSize | moved on kill (middle node) | moved on join | shadows per node (held / wanted) | shadow memory | kill: lookups to Redis | kill: last lookup answered | kill: first packet dropped (park timeout) |',
  );
  out.push('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    out.push(
      `| ${r.nodes} | ${fmt(r.flows)} | ${fmt(r.tableSize)} | ${fmt(r.movedOnKill)} (${((100 * r.movedOnKill) / r.flows).toFixed(0)} %) | ${fmt(r.movedOnJoin)} (${((100 * r.movedOnJoin) / r.flows).toFixed(0)} %) | ${fmt(r.shadowsHeld)} / ${fmt(r.shadowsWanted)} | ${r.shadowMemoryMiB.toFixed(1)} MiB | ${fmt(r.lookupsOnKill)} | ${r.lastLookupMsOnKill} ms | ${fmt(r.beyondParkTimeoutOnKill)} |`,
    );
  }
  out.push('');
  out.push(
    `Resilient hashing instead (only the dead node's flows move): ${[3, 4, 10, 20].map((n) => `${n} nodes ${(100 * movedShare(n, 'kill', { resilient: true })).toFixed(0)} %`).join(', ')}.`,
  );
  out.push(
    `Records each node receives through pub/sub at 10 k new connections/s: ${[3, 4, 10, 20].map((n) => `${n} nodes ${fmt(Math.round(recordsInPerNode(10_000, n)))}/s`).join(', ')}.`,
  );
  out.push(
    `Assumed: Redis ${fmt(DEFAULT_PARAMS.redisOpsPerSecond)} commands/s per master, ${DEFAULT_PARAMS.redisRttMs} ms round trip, maxLookups ${DEFAULT_PARAMS.maxLookups}, maxShadowShare ${DEFAULT_PARAMS.maxShadowShare}, parkTimeout ${DEFAULT_PARAMS.parkTimeoutMs} ms.`,
  );
  process.stdout.write(out.join('\n') + '\n');
}

if (require.main === module) main(process.argv.slice(2));
