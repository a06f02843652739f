/**
 * Other nodes' per-real-server connection counts, as a drain must see them (issue 33): what live
 * nodes report, plus what a node that stopped reporting still holds in Redis.
 *
 * A node publishes its counts every countsInterval with a TTL of three intervals; its flows'
 * records live in Redis with the TTL of their entries' timers (up to the ESTABLISHED timeout,
 * 900 s by default). When the node dies its counts expire within seconds, but its flows go on:
 * the router moves them to the survivors, which adopt them from their records when they next
 * send. Counting only live reports, a drain saw 0 and deleted the server 1.6–2.9 s after the kill,
 * and every idle flow of the dead node to that server then found no server (`unknown_server`).
 *
 * Kernel IPVS binds a synced connection to its local dest and counts it, so its drain waits for
 * the connection's timeout. Here: a node's last report is held after it stops reporting, until
 * every flow it counted could have expired — its active (ESTABLISHED) flows by the ESTABLISHED
 * timeout, its inactive ones by the longest other TCP timeout — counted from the last moment its
 * report was still alive in Redis (read time + the report's TTL). Flows adopted meanwhile are
 * counted twice (held and by their new node): a drain may wait longer, never shorter. A node that
 * reports again replaces its held report.
 *
 * Not covered: a node restarted under the same id replaces the report of its dead incarnation,
 * whose flows it no longer has; a node that starts after another died never saw that report.
 * What the drain then deletes too early is caught by the drained servers' trash
 * (control/services.ts): their records are still served for the same horizon.
 */

/** How long a vanished node's counts stay (ms from the last moment its report was alive). */
export interface HoldTimes {
  active: number;
  inactive: number;
}

interface Report {
  counts: Map<string, [number, number]>;
  /** The last moment the report was alive in Redis: read time + its TTL. */
  aliveUntil: number;
}

export class ClusterCounts {
  private reports = new Map<string, Report>();
  private merged = new Map<string, [number, number]>();
  /** Nodes counted only from a held report in the last merge. */
  held: string[] = [];

  /** At most `maxReports` nodes are remembered (the ones alive most recently stay). */
  constructor(private readonly maxReports: number) {}

  /**
   * One exchange's reports, read at `now` with TTL `ttl`; nodes not in `live` keep their last
   * report until its hold ends. The merged counts are what counts() answers until the next call.
   */
  update(live: ReadonlyMap<string, Map<string, [number, number]>>, now: number, ttl: number, hold: HoldTimes): void {
    for (const [node, counts] of live) this.reports.set(node, { counts, aliveUntil: now + ttl });
    if (this.reports.size > this.maxReports) {
      const oldest = [...this.reports].sort((x, y) => x[1].aliveUntil - y[1].aliveUntil);
      for (const [node] of oldest.slice(0, this.reports.size - this.maxReports)) this.reports.delete(node);
    }
    const merged = new Map<string, [number, number]>();
    const held: string[] = [];
    for (const [node, r] of this.reports) {
      const isLive = live.has(node);
      const active = isLive || now < r.aliveUntil + hold.active;
      const inactive = isLive || now < r.aliveUntil + hold.inactive;
      if (!active && !inactive) {
        this.reports.delete(node);
        continue;
      }
      if (!isLive) held.push(node);
      for (const [k, [a, n]] of r.counts) {
        const m = merged.get(k) ?? [0, 0];
        merged.set(k, [m[0] + (active ? a : 0), m[1] + (inactive ? n : 0)]);
      }
    }
    this.merged = merged;
    this.held = held;
  }

  /** Connections other nodes report or held, for "<service>|<realServer>". */
  counts(key: string): [number, number] {
    return this.merged.get(key) ?? [0, 0];
  }
}
