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
import type { Scheduler } from './types';

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
