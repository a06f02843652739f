/**
 * The node's announcement: the signal a routing daemon on the node (BIRD, FRR) follows to draw the
 * VIP ranges' traffic here — and node maintenance, which takes it away while uvsd keeps forwarding.
 *
 * With dataplane.announceTable = T, uvsd keeps one route per VIP range in kernel table T,
 *
 *     <vip cidr> dev <device> table T proto static
 *
 * while it wants traffic, and the node's BGP speaker announces what it learns from that table
 * (BIRD: `protocol kernel { kernel table T; learn; … }`, then exported to the router; FRR: a
 * `table T` import). Why a kernel route and not a health-check script:
 *   - uvsd's death withdraws it with no help: the routes point into uvsd's TUN device, which the
 *     kernel deletes with the last descriptor of a killed uvsd, and every route through it goes
 *     too. BIRD notices the device's removal at once (measured in the ECMP lab: the router lost
 *     the next hop 40–90 ms after `ip link del`, no scan involved);
 *   - a graceful stop deletes the routes first, before the device, so the withdrawal is sent while
 *     the dataplane still forwards what is in flight;
 *   - maintenance deletes the routes while the device and its main-table routes stay: what still
 *     arrives (until the router has converged) is forwarded, and flows move to the other nodes,
 *     which adopt them from Redis;
 *   - no polling: the daemon hears the change on netlink.
 *
 * A (re)started node announces only once it can adopt: Redis connected when configured, or after
 * ANNOUNCE_WAIT_MS without it (a node that draws re-hashed flows before it can ask Redis drops
 * their packets; one that never announced while Redis is down would leave a whole tier dark).
 */
import type { Logger } from 'pino';
import { ip } from '../lb/dataplane';
import { UvsError } from './errors';

/** Longest wait for Redis before announcing anyway (ms): a few reconnect attempts. */
export const ANNOUNCE_WAIT_MS = 5000;
/** How often the packet counter is sampled for `idleSeconds` (ms): cheap, one sum per worker. */
const IDLE_SAMPLE_MS = 100;

export interface AnnounceOptions {
  /** Kernel table for the announcement routes; 0 = this node announces nothing. */
  table: number;
  device: string;
  vipCidrs: string[];
}

export interface AnnounceStatus {
  /** The announcement table (0 = none). */
  table: number;
  /** Maintenance asked for (the announcement withdrawn on purpose). */
  maintenance: boolean;
  /** When maintenance was turned on (ISO time) or null. */
  since: string | null;
  /** The announcement routes are in the table now. */
  announced: boolean;
  /** Seconds since the dataplane last received a packet: how long the node has been idle. */
  idleSeconds: number;
}

export class Announcer {
  private readonly o: AnnounceOptions;
  private readonly log: Logger;
  private readonly packetsIn: () => number;
  private maintenanceSince: number | null = null;
  private announced = false;
  /** Until start() has seen uvsd ready, nothing is announced. */
  private ready = false;
  private waitTimer: NodeJS.Timeout | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  private lastPackets = -1;
  private lastPacketAt = Date.now();

  constructor(o: AnnounceOptions, log: Logger, packetsIn: () => number) {
    this.o = o;
    this.log = log;
    this.packetsIn = packetsIn;
  }

  /** Announces once `canAdopt()` holds (polled) or ANNOUNCE_WAIT_MS have passed. */
  start(canAdopt: () => boolean): void {
    this.idleTimer = setInterval(() => this.sampleIdle(), IDLE_SAMPLE_MS);
    this.idleTimer.unref();
    if (this.o.table === 0) return;
    const deadline = Date.now() + ANNOUNCE_WAIT_MS;
    const poll = () => {
      this.waitTimer = null;
      if (!canAdopt() && Date.now() < deadline) {
        this.waitTimer = setTimeout(poll, 50);
        return;
      }
      if (!canAdopt())
        this.log.warn({ waitedMs: ANNOUNCE_WAIT_MS }, 'announcing without Redis: re-hashed flows cannot be adopted until it connects');
      this.ready = true;
      try {
        this.apply();
      } catch (e) {
        // The device exists (the dataplane is up), so this is rare: retry rather than stay dark.
        this.log.error({ err: (e as Error).message }, 'cannot add the announcement routes; retrying in 1 s');
        this.waitTimer = setTimeout(poll, 1000);
      }
    };
    poll();
  }

  /** Turns maintenance on (withdraw) or off (announce again). */
  setMaintenance(on: boolean): AnnounceStatus {
    if (this.o.table === 0) {
      throw new UvsError(
        'UVS_ERR_MAINTENANCE_UNAVAILABLE',
        'dataplane.announceTable is 0: this node announces nothing, so there is nothing to withdraw',
      );
    }
    if (on && this.maintenanceSince === null) this.maintenanceSince = Date.now();
    if (!on) this.maintenanceSince = null;
    this.apply();
    this.log.info(
      { maintenance: on, announced: this.announced },
      on ? 'maintenance on: announcement withdrawn, still forwarding what arrives' : 'maintenance off: announcing again',
    );
    return this.status();
  }

  status(): AnnounceStatus {
    this.sampleIdle();
    return {
      table: this.o.table,
      maintenance: this.maintenanceSince !== null,
      since: this.maintenanceSince === null ? null : new Date(this.maintenanceSince).toISOString(),
      announced: this.announced,
      idleSeconds: (Date.now() - this.lastPacketAt) / 1000,
    };
  }

  /** Withdraws (graceful stop: before the device goes) and stops the timers. */
  stop(): void {
    if (this.waitTimer) clearTimeout(this.waitTimer);
    if (this.idleTimer) clearInterval(this.idleTimer);
    this.waitTimer = this.idleTimer = null;
    this.ready = false;
    if (this.o.table !== 0) this.apply();
  }

  /** Puts the routes in or takes them out, as ready and maintenance say. */
  private apply(): void {
    const want = this.ready && this.maintenanceSince === null;
    for (const c of this.o.vipCidrs) {
      const args = ['route', want ? 'replace' : 'del', c, 'dev', this.o.device, 'table', String(this.o.table)];
      if (!want)
        ip(args, true); // already gone (the device went first) is fine
      else {
        try {
          ip([...args, 'proto', 'static']);
        } catch (e) {
          throw new UvsError('UVS_ERR_DATAPLANE_SETUP', (e as Error).message);
        }
      }
    }
    if (want !== this.announced)
      this.log.info({ table: this.o.table, vipCidrs: this.o.vipCidrs }, want ? 'announcing the VIP ranges' : 'announcement withdrawn');
    this.announced = want;
  }

  private sampleIdle(): void {
    const n = this.packetsIn();
    if (n !== this.lastPackets) {
      this.lastPackets = n;
      this.lastPacketAt = Date.now();
    }
  }
}
