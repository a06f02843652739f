/**
 * Scheduler registry: names → schedulers, like the kernel's register_ip_vs_scheduler (duplicate
 * names are rejected). The dataplane imports only this file and ./types.
 * Adding a scheduler = one new file plus one line below.
 */
import { dh } from './dh';
import { fo } from './fo';
import { lblc } from './lblc';
import { lblcr } from './lblcr';
import { lc } from './lc';
import { mh } from './mh';
import { nq } from './nq';
import { ovf } from './ovf';
import { rr } from './rr';
import { sed } from './sed';
import { sh } from './sh';
import { twos } from './twos';
import { wlc } from './wlc';
import { wrr } from './wrr';
import { SCHED_FLAG_BITS, type Scheduler } from './types';

const registry = new Map<string, Scheduler>();

export function registerScheduler(s: Scheduler): void {
  if (registry.has(s.name)) throw new Error(`scheduler ${s.name} is already registered`);
  registry.set(s.name, s);
}

export function getScheduler(name: string): Scheduler | undefined {
  return registry.get(name);
}

export function schedulerNames(): string[] {
  return [...registry.keys()];
}

/** ipvsadm's default scheduler (ipvsadm.c DEF_SCHED): a service that names none gets it. */
export const DEFAULT_SCHEDULER = 'wlc';

/** The scheduler flags (ipvsadm -b), in ipvsadm's order; SCHED_FLAG_BITS gives their bits. */
export const SCHED_FLAG_NAMES: readonly string[] = Object.keys(SCHED_FLAG_BITS);

/** The scheduler a flag belongs to (sh-fallback, sh-port: sh; mh-*: mh); null for flag-1..3. */
export function flagScheduler(flag: string): 'sh' | 'mh' | null {
  return flag.startsWith('sh-') ? 'sh' : flag.startsWith('mh-') ? 'mh' : null;
}

registerScheduler(rr);
registerScheduler(wrr);
registerScheduler(lc);
registerScheduler(wlc);
registerScheduler(sed);
registerScheduler(nq);
registerScheduler(sh);
registerScheduler(dh);
registerScheduler(mh);
registerScheduler(lblc);
registerScheduler(lblcr);
registerScheduler(fo);
registerScheduler(ovf);
registerScheduler(twos);
