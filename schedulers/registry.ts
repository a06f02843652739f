/**
 * Scheduler registry: names → schedulers, like the kernel's register_ip_vs_scheduler (duplicate
 * names are rejected, and so is a flag name another scheduler already gives a meaning). The
 * dataplane imports only this file and ./types; the control plane asks the scheduler objects
 * what they are (types.ts Scheduler) and the flag helpers below, never a scheduler's name.
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
/** Flag name → the scheduler that declares it (Scheduler.flags). */
const flagOwner = new Map<string, string>();

export function registerScheduler(s: Scheduler): void {
  if (registry.has(s.name)) throw new Error(`scheduler ${s.name} is already registered`);
  for (const f of s.flags ?? []) {
    if (SCHED_FLAG_BITS[f] === undefined) throw new Error(`scheduler ${s.name}: flag ${f} has no IP_VS_SVC_F_SCHED bit`);
    const other = flagOwner.get(f);
    if (other !== undefined) throw new Error(`scheduler ${s.name}: flag ${f} is already scheduler ${other}'s`);
  }
  registry.set(s.name, s);
  for (const f of s.flags ?? []) flagOwner.set(f, s.name);
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

/**
 * The scheduler a flag name needs (sh-fallback → sh: the one whose Scheduler.flags has it), or
 * null when every scheduler accepts it (flag-1..3) or it is no flag name: ipvsadm.c
 * parse_sched_flags' "incompatible scheduler flag" is a flag whose scheduler is another one.
 */
export function flagScheduler(flag: string): string | null {
  return flagOwner.get(flag) ?? null;
}

/**
 * The names ipvsadm.c print_sched_flags uses for a scheduler's flag bits, in bit order: its own
 * (Scheduler.flags), else the generic flag-1..3.
 */
export function schedFlagNames(scheduler: string): readonly string[] {
  return registry.get(scheduler)?.flags ?? SCHED_FLAG_NAMES.filter((f) => !flagOwner.has(f));
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
