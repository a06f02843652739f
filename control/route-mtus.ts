/**
 * The MTU of the route to every real server, written into the shared region (RS_MTU) where the
 * workers check DF packets against it (ICMP fragmentation needed, as IPVS does with the route's
 * MTU). Routes and device MTUs change without telling us, so:
 *  - a configuration change asks only for the addresses of the slots it allocated that were
 *    never asked for (`changed`): its cost is its own size, not the number of servers;
 *  - every MTU_REFRESH_MS the devices' MTUs are re-read from sysfs, once per device (no process),
 *    and every few of those the routes of every address are asked again (`refresh`): one `ip`
 *    for all (lb/dataplane.ts routeMtus, not waited for on this thread), the slots written in
 *    slices (control/slices.ts) — 100,000 servers are ~10 ms of stores and lookups.
 * A slot without a known route gets 0: no path-MTU check until one is known.
 */
import type { Logger } from 'pino';
import * as L from '../conntrack/layout';
import { deviceMtu, routeMtus, type RouteMtu } from '../lb/dataplane';
import type { ServiceModel } from './services';
import { Slicer } from './slices';

export class RouteMtus {
  /** How each address is routed (null routeMtu: the device's MTU, re-read every refresh). */
  private readonly routes = new Map<string, RouteMtu>();
  /** Addresses asked for (routed or not), with the refresh epoch they were asked in. */
  private readonly asked = new Map<string, number>();
  private epoch = 0;
  /** The refresh of every slot in progress (the timer skips a turn rather than start a second). */
  private running: Promise<void> | null = null;

  constructor(
    private readonly model: ServiceModel,
    private readonly log: Logger,
  ) {}

  /** Every slot's MTU: the devices' MTUs re-read, and with `routesToo` every address's route asked again. */
  refresh(routesToo: boolean): Promise<void> {
    this.running ??= this.refreshAll(routesToo).finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** The slots allocated since the last call: routes of addresses never asked for, then their MTUs. */
  async changed(): Promise<void> {
    const slots = this.model.takeFreshSlots();
    if (slots.length === 0) return;
    const ask = [...new Set(slots.filter((x) => !this.asked.has(x.addr)).map((x) => x.addr))];
    // An address without a route stays asked until the next refresh of every route.
    for (const a of ask) this.asked.set(a, this.epoch);
    if (ask.length > 0) {
      try {
        for (const [a, r] of await routeMtus(ask)) this.routes.set(a, r);
      } catch (e) {
        this.warn(e);
      }
    }
    for (const x of slots) if (this.model.slotAddr(x.slot) === x.addr) this.store(x.slot, x.addr);
  }

  private async refreshAll(routesToo: boolean): Promise<void> {
    try {
      if (routesToo) {
        const epoch = ++this.epoch;
        const all = new Set<string>();
        let s = new Slicer('mtus');
        for (const x of this.model.eachRsSlotAddr()) {
          all.add(x.addr);
          if (s.due()) await s.pause();
        }
        s.end();
        const got = await routeMtus([...all]);
        s = new Slicer('mtus');
        for (const a of all) {
          const r = got.get(a);
          if (r) this.routes.set(a, r);
          else this.routes.delete(a);
          this.asked.set(a, epoch);
          if (s.due()) await s.pause();
        }
        // Addresses no server had when this refresh began, and none asked for since: forgotten.
        for (const [a, e] of this.asked) {
          if (e < epoch) {
            this.asked.delete(a);
            this.routes.delete(a);
          }
          if (s.due()) await s.pause();
        }
        s.end();
      } else {
        const devices = new Map<string, number>();
        for (const r of this.routes.values()) {
          if (r.routeMtu !== null) continue;
          let m = devices.get(r.dev);
          if (m === undefined) devices.set(r.dev, (m = deviceMtu(r.dev)));
          r.mtu = m;
        }
      }
      const s = new Slicer('mtus');
      for (const x of this.model.eachRsSlotAddr()) {
        this.store(x.slot, x.addr);
        if (s.due()) await s.pause();
      }
      s.end();
    } catch (e) {
      this.warn(e);
    }
  }

  private store(slot: number, addr: string): void {
    Atomics.store(this.model.rs, slot * L.RS_WORDS + L.RS_MTU, this.routes.get(addr)?.mtu ?? 0);
  }

  private warn(e: unknown): void {
    this.log.warn(
      { err: (e as Error).message },
      'cannot read the MTU of the routes to the real servers; path-MTU checks keep the last values',
    );
  }
}
