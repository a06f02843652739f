/**
 * Scheduler test fixtures: a service built by -a commands in a given order (so the kernel list is
 * the reverse), counters set per real server, and decisions named by "address:port".
 */
import * as L from '../../conntrack/layout';
import { fold, parseInet } from '../../net/addr';
import { SchedModel, type ModelServer } from '../../control/sched-model';
import type { SchedInput } from '../../schedulers/types';

export const VIP = '10.96.0.10';

export interface ServerSpec {
  address: string;
  port?: number;
  weight?: number;
  upper?: number;
  lower?: number;
}

/** Adds the servers in the given order (each goes to the head of the list). */
export function service(scheduler: string, servers: ServerSpec[], flags = 0, mhTableSize?: number): SchedModel {
  const m = new SchedModel(scheduler, flags, mhTableSize, servers.length + 1);
  for (const s of servers) m.add(parseInet(s.address)!, s.port ?? 80, s.weight ?? 1, s.upper ?? 0, s.lower ?? 0);
  return m;
}

export function server(m: SchedModel, key: string): ModelServer {
  const s = m.servers.get(key.includes(':') ? key : `${key}:80`);
  if (!s) throw new Error(`no server ${key}`);
  return s;
}

/** Sets ActiveConn / InActConn (and OVERLOAD) of a server directly. */
export function load(m: SchedModel, key: string, active: number, inactive = 0, overloaded = false): void {
  const o = server(m, key).rs * L.RS_WORDS;
  m.rs[o + L.RS_ACTIVE] = active;
  m.rs[o + L.RS_INACTIVE] = inactive;
  if (overloaded) m.rs[o + L.RS_FLAGS]! |= L.RSF_OVERLOAD;
  else m.rs[o + L.RS_FLAGS]! &= ~L.RSF_OVERLOAD;
}

export function input(client = '192.168.1.100', cport = 0, now = 0, vaddr = VIP, vport = 80): SchedInput {
  return { caddr: fold(parseInet(client)!), cport, vaddr: fold(parseInet(vaddr)!), vport, now };
}

/** One decision: the chosen server's address (":80" dropped) or null. */
export function pick(m: SchedModel, inp: SchedInput = input()): string | null {
  const s = m.schedule(inp);
  return s === null ? null : s.key.replace(/:80$/, '');
}

/** n decisions from one client with successive source ports. */
export function picks(m: SchedModel, n: number): (string | null)[] {
  const out: (string | null)[] = [];
  for (let i = 0; i < n; i++) out.push(pick(m, input('192.168.1.100', 1000 + i)));
  return out;
}
