/**
 * Disruption preview: how much of a service a proposed change would move, before making it.
 * Pure: no daemon, no I/O; the API and `uvs simulate` both call previewDisruption().
 *
 * The change is applied as the daemon applies configuration changes (control/services.ts): real
 * servers deleted, then edited (weight; the list position is kept), then added (each at the head
 * of the list); a scheduler change keeps the list order (ip_vs_edit_service rebinds the scheduler
 * on the current list). last_weight follows the kernel (set on add, kept when a weight becomes 0),
 * so quiescing an mh server moves no slot.
 *
 *  - slotsMoved: share of lookup-table slots whose real server differs after the change (a slot
 *    becoming empty or filled counts). Defined when the scheduler is sh, dh or mh both before and
 *    after, with the same table (same scheduler, same mh table size); null otherwise.
 *  - flowsMoved: share of the given tracked flows that a new scheduling decision would send to a
 *    real server other than the one they are on now. With sh, dh or mh after the change the
 *    decision is the table lookup for the flow's client address and port (no server = moved);
 *    other schedulers decide from live counters and rotation state, so only flows whose real
 *    server leaves the list count as moved. 0 when there are no flows.
 *
 * Not modelled: an mh service with more real servers than table slots (the kernel refuses the
 * rebuild and keeps an older table).
 */
import { DH_TAB_SIZE } from '../schedulers/dh';
import { mhSlots } from '../schedulers/mh';
import { SH_TAB_SIZE } from '../schedulers/sh';
import { fold, formatEndpoint, parseEndpoint, parseInet, type Inet } from './inet';
import { SchedModel } from './sched-model';
import { schedFlagBits } from '../schedulers/types';

export interface PreviewRealServer {
  address: string;
  port: number;
  weight: number;
  /** Kernel last_weight (last non-zero weight); absent = weight. */
  lastWeight?: number;
  /** OVERLOAD set (upper threshold reached): hash lookups skip it like weight 0. */
  overloaded?: boolean;
}

export interface PreviewService {
  address: string;
  port: number;
  scheduler: string;
  /** sh-fallback, sh-port, mh-fallback, mh-port, flag-1..3. */
  flags?: string[];
  mhTableSize?: number;
  /** Kernel list order: most recently added first. */
  realServers: PreviewRealServer[];
}

export interface PreviewFlow {
  client: string;
  clientPort: number;
  /** "a.b.c.d:port" or "[v6]:port". */
  realServer: string;
}

export interface ProposedChange {
  /** "a.b.c.d:port" of listed real servers. */
  delete?: string[];
  setWeight?: { realServer: string; weight: number }[];
  add?: { address: string; port: number; weight: number }[];
  scheduler?: string;
  flags?: string[];
  mhTableSize?: number;
}

export interface DisruptionPreview {
  /** Scheduler after the change. */
  scheduler: string;
  slots: number | null;
  slotsChanged: number | null;
  slotsMoved: number | null;
  flows: number;
  flowsChanged: number;
  flowsMoved: number;
}

/** An input the preview cannot use; `path` is relative to the argument (e.g. "change.delete[0]"). */
export class PreviewError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path}: ${reason}`);
  }
}


export function flagBits(flags: string[] | undefined): number {
  return schedFlagBits(flags);
}

const HASHED = new Set(['sh', 'dh', 'mh']);

interface Entry {
  key: string;
  addr: Inet;
  port: number;
  weight: number;
  lastWeight: number;
  overloaded: boolean;
}

function addrOf(s: string, path: string): Inet {
  const a = parseInet(s);
  if (!a) throw new PreviewError(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(s)}`);
  return a;
}

function keyOf(s: string, path: string): string {
  const e = parseEndpoint(s);
  if (!e) throw new PreviewError(path, `must be "address:port" ("[v6]:port"), got ${JSON.stringify(s)}`);
  return formatEndpoint(e.addr, e.port);
}

function weightOk(w: unknown, path: string): number {
  if (typeof w !== 'number' || !Number.isInteger(w) || w < 0 || w > 65535) throw new PreviewError(path, `must be an integer between 0 and 65535, got ${JSON.stringify(w)}`);
  return w;
}

/** The slot table (list positions) of a hashing scheduler, or null. */
function slotTable(scheduler: string, model: SchedModel): Int32Array | null {
  const data = model.svc.data;
  if (data === null) return null;
  if (scheduler === 'mh') return mhSlots(data);
  if (scheduler === 'sh') return data.subarray(0, SH_TAB_SIZE);
  if (scheduler === 'dh') return data.subarray(0, DH_TAB_SIZE);
  return null;
}

function model(scheduler: string, flags: number, mhTableSize: number | undefined, list: Entry[]): SchedModel {
  const m = new SchedModel(scheduler, flags, mhTableSize, list.length + 1);
  m.load(list);
  return m;
}

export function previewDisruption(service: PreviewService, change: ProposedChange, flows: PreviewFlow[] = []): DisruptionPreview {
  const svcAddr = addrOf(service.address, 'service.address');
  const before: Entry[] = service.realServers.map((r, i) => {
    const addr = addrOf(r.address, `service.realServers[${i}].address`);
    const weight = weightOk(r.weight, `service.realServers[${i}].weight`);
    return { key: formatEndpoint(addr, r.port), addr, port: r.port, weight, lastWeight: r.lastWeight ?? weight, overloaded: r.overloaded === true };
  });

  // The daemon's order: -d, -e, -a.
  let after = before.map((e) => ({ ...e }));
  (change.delete ?? []).forEach((d, i) => {
    const k = keyOf(d, `change.delete[${i}]`);
    const at = after.findIndex((e) => e.key === k);
    if (at < 0) throw new PreviewError(`change.delete[${i}]`, `${k} is not a real server of the service`);
    after.splice(at, 1);
  });
  (change.setWeight ?? []).forEach((u, i) => {
    const k = keyOf(u.realServer, `change.setWeight[${i}].realServer`);
    const e = after.find((x) => x.key === k);
    if (!e) throw new PreviewError(`change.setWeight[${i}].realServer`, `${k} is not a real server of the service`);
    e.weight = weightOk(u.weight, `change.setWeight[${i}].weight`);
    if (e.weight !== 0) e.lastWeight = e.weight;
  });
  (change.add ?? []).forEach((a, i) => {
    const addr = addrOf(a.address, `change.add[${i}].address`);
    const k = formatEndpoint(addr, a.port);
    if (after.some((x) => x.key === k)) throw new PreviewError(`change.add[${i}]`, `${k} is already a real server of the service`);
    const weight = weightOk(a.weight, `change.add[${i}].weight`);
    after = [{ key: k, addr, port: a.port, weight, lastWeight: weight, overloaded: false }, ...after];
  });

  const schedBefore = service.scheduler;
  const schedAfter = change.scheduler ?? schedBefore;
  const mhBefore = service.mhTableSize;
  const mhAfter = change.mhTableSize ?? mhBefore;
  const mBefore = model(schedBefore, flagBits(service.flags), mhBefore, before);
  const mAfter = model(schedAfter, flagBits(change.flags ?? service.flags), mhAfter, after);

  let slots: number | null = null;
  let slotsChanged: number | null = null;
  const tb = slotTable(schedBefore, mBefore);
  const ta = slotTable(schedAfter, mAfter);
  if (tb && ta && schedBefore === schedAfter && tb.length === ta.length) {
    const lb = mBefore.listed();
    const la = mAfter.listed();
    slots = ta.length;
    slotsChanged = 0;
    for (let s = 0; s < ta.length; s++) {
      const kb = tb[s]! < 0 ? null : lb[tb[s]!]!.key;
      const ka = ta[s]! < 0 ? null : la[ta[s]!]!.key;
      if (kb !== ka) slotsChanged++;
    }
  }

  const listedAfter = new Set(after.map((e) => e.key));
  const vaddr = fold(svcAddr);
  let flowsChanged = 0;
  flows.forEach((f, i) => {
    const current = keyOf(f.realServer, `flows[${i}].realServer`);
    if (!HASHED.has(schedAfter)) {
      if (!listedAfter.has(current)) flowsChanged++;
      return;
    }
    const client = addrOf(f.client, `flows[${i}].client`);
    const next = mAfter.schedule({ caddr: fold(client), cport: f.clientPort, vaddr, vport: service.port, now: 0 });
    if (next === null || next.key !== current) flowsChanged++;
  });

  return {
    scheduler: schedAfter,
    slots,
    slotsChanged,
    slotsMoved: slots === null || slotsChanged === null ? null : slotsChanged / slots,
    flows: flows.length,
    flowsChanged,
    flowsMoved: flows.length === 0 ? 0 : flowsChanged / flows.length,
  };
}

/** The preview for several services at once (one change each), e.g. from the API's service list. */
export function previewServices(items: { service: PreviewService; change: ProposedChange; flows?: PreviewFlow[] }[]): DisruptionPreview[] {
  return items.map((it, i) => {
    try {
      return previewDisruption(it.service, it.change, it.flows ?? []);
    } catch (e) {
      if (e instanceof PreviewError) throw new PreviewError(`[${i}].${e.path}`, e.reason);
      throw e;
    }
  });
}

