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
 *    becoming empty or filled counts). Defined when the scheduler has a lookup table
 *    (Scheduler.lookupTable: sh, dh, mh) both before and after, with the same table (same
 *    scheduler, same mh table size); null otherwise.
 *  - flowsMoved: share of the given tracked flows that a new scheduling decision would send to a
 *    real server other than the one they are on now. With a lookup-table scheduler after the
 *    change the decision is the table lookup for the flow's client address and port (no server =
 *    moved); other schedulers decide from live counters and rotation state, so only flows whose
 *    real server leaves the list count as moved. 0 when there are no flows.
 *
 * Not modelled: an mh service with more real servers than table slots (the kernel refuses the
 * rebuild and keeps an older table).
 */
import { fold, formatEndpoint, parseEndpoint, parseInet, type Inet } from '../net/addr';
import { MH_PRIMES } from '../schedulers/mh';
import { SCHED_FLAG_NAMES, schedulerNames } from '../schedulers/registry';
import { schedFlagBits } from '../schedulers/types';
import { SchedModel } from './sched-model';
import { fail, leaf, list, obj, oneOf, opt, SchemaError, type Out } from './schema';

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

/** A whole number in [min, max] (the preview's message names the range). */
const whole = (min: number, max: number) =>
  leaf({ type: 'integer', minimum: min, maximum: max }, (v, path) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
      fail(path, `must be an integer between ${min} and ${max}, got ${JSON.stringify(v)}`);
    return v;
  });

/** A listed real server, "a.b.c.d:port" or "[v6]:port" (any spelling: the preview folds it). */
const endpoint = (doc: string) =>
  leaf({ type: 'string', description: doc }, (v, path) => {
    if (typeof v !== 'string' || parseEndpoint(v) === null) fail(path, `must be "address:port" ("[v6]:port"), got ${JSON.stringify(v)}`);
    return v;
  });

/**
 * The proposed change (POST /v1/services/…/preview, control/api-bodies.ts PREVIEW): what there is
 * to change and what each field holds. Whether a real server named is one of the service's is
 * previewDisruption's to say (it needs the service).
 */
export const PROPOSED_CHANGE = obj({
  delete: opt(list(endpoint('address:port ([v6]:port)'), { doc: 'Real servers to delete' })),
  setWeight: opt(
    list(obj({ realServer: endpoint('address:port'), weight: whole(0, 65535) }, { mapping: true }), {
      doc: 'New weights',
    }),
  ),
  add: opt(
    list(
      obj(
        {
          address: leaf({ type: 'string' }, (v, path) => {
            if (typeof v !== 'string' || parseInet(v) === null) fail(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(v)}`);
            return v;
          }),
          port: whole(0, 65535),
          weight: whole(0, 65535),
        },
        { mapping: true },
      ),
      { doc: 'Real servers to add' },
    ),
  ),
  scheduler: opt(
    oneOf(schedulerNames(), {
      strict: true,
      msg: (v) => `unknown scheduler ${JSON.stringify(v)} (available: ${schedulerNames().join(', ')})`,
    }),
  ),
  flags: opt(
    list(
      oneOf(SCHED_FLAG_NAMES, {
        strict: true,
        msg: (v) => `must be one of ${SCHED_FLAG_NAMES.join(', ')}, got ${JSON.stringify(v)}`,
      }),
    ),
  ),
  mhTableSize: opt(
    leaf({ type: 'integer', enum: [...MH_PRIMES] }, (v, path) => {
      if (typeof v !== 'number' || !MH_PRIMES.includes(v))
        fail(path, `must be one of the kernel's sizes ${MH_PRIMES.join(', ')}, got ${JSON.stringify(v)}`);
      return v;
    }),
  ),
});

export type ProposedChange = Out<typeof PROPOSED_CHANGE>;

/** Checks a proposed change given from outside (`path` names it in errors); throws PreviewError. */
export function parseChange(v: unknown, path = 'change'): ProposedChange {
  try {
    return PROPOSED_CHANGE.parse(v, path, null);
  } catch (e) {
    if (e instanceof SchemaError) throw new PreviewError(e.path, e.reason);
    throw e;
  }
}

export function flagBits(flags: string[] | undefined): number {
  return schedFlagBits(flags);
}

interface Entry {
  key: string;
  addr: Inet;
  port: number;
  weight: number;
  lastWeight: number;
  overloaded: boolean;
}

function addrOf(s: string, path: string): Inet {
  const a = typeof s === 'string' ? parseInet(s) : null;
  if (!a) throw new PreviewError(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(s)}`);
  return a;
}

function keyOf(s: string, path: string): string {
  const e = typeof s === 'string' ? parseEndpoint(s) : null;
  if (!e) throw new PreviewError(path, `must be "address:port" ("[v6]:port"), got ${JSON.stringify(s)}`);
  return formatEndpoint(e.addr, e.port);
}

function weightOk(w: unknown, path: string): number {
  if (typeof w !== 'number' || !Number.isInteger(w) || w < 0 || w > 65535)
    throw new PreviewError(path, `must be an integer between 0 and 65535, got ${JSON.stringify(w)}`);
  return w;
}

/** The lookup table (list positions) of a table-driven scheduler, or null. */
function slotTable(model: SchedModel): Int32Array | null {
  const data = model.svc.data;
  const table = model.scheduler.lookupTable;
  return data === null || table === undefined ? null : table(data);
}

function model(scheduler: string, flags: number, mhTableSize: number | undefined, list: Entry[]): SchedModel {
  const m = new SchedModel(scheduler, flags, mhTableSize, list.length + 1);
  m.load(list);
  return m;
}

/** `change` as PROPOSED_CHANGE gives it (parseChange, the API's body, uvs simulate's own checks). */
export function previewDisruption(service: PreviewService, change: ProposedChange, flows: PreviewFlow[] = []): DisruptionPreview {
  const svcAddr = addrOf(service.address, 'service.address');
  const before: Entry[] = service.realServers.map((r, i) => {
    const addr = addrOf(r.address, `service.realServers[${i}].address`);
    const weight = weightOk(r.weight, `service.realServers[${i}].weight`);
    return {
      key: formatEndpoint(addr, r.port),
      addr,
      port: r.port,
      weight,
      lastWeight: r.lastWeight ?? weight,
      overloaded: r.overloaded === true,
    };
  });

  // The daemon's order: -d, -e, -a. Indexed by key: 15 000 additions used to take seconds of
  // list scans and copies (each add went to the head of a fresh copy).
  const byKey = new Map(before.map((e) => [e.key, { ...e }]));
  (change.delete ?? []).forEach((d, i) => {
    const k = keyOf(d, `change.delete[${i}]`);
    if (!byKey.delete(k)) throw new PreviewError(`change.delete[${i}]`, `${k} is not a real server of the service`);
  });
  (change.setWeight ?? []).forEach((u, i) => {
    const k = keyOf(u.realServer, `change.setWeight[${i}].realServer`);
    const e = byKey.get(k);
    if (!e) throw new PreviewError(`change.setWeight[${i}].realServer`, `${k} is not a real server of the service`);
    e.weight = u.weight;
    if (e.weight !== 0) e.lastWeight = e.weight;
  });
  const kept = [...byKey.values()]; // list order of the survivors
  const added: Entry[] = [];
  (change.add ?? []).forEach((a, i) => {
    const addr = addrOf(a.address, `change.add[${i}].address`);
    const k = formatEndpoint(addr, a.port);
    if (byKey.has(k)) throw new PreviewError(`change.add[${i}]`, `${k} is already a real server of the service`);
    const e = { key: k, addr, port: a.port, weight: a.weight, lastWeight: a.weight, overloaded: false };
    byKey.set(k, e);
    added.push(e);
  });
  const after = [...added.reverse(), ...kept]; // each add goes to the head of the list

  const schedBefore = service.scheduler;
  const schedAfter = change.scheduler ?? schedBefore;
  const mhBefore = service.mhTableSize;
  const mhAfter = change.mhTableSize ?? mhBefore;
  const mBefore = model(schedBefore, flagBits(service.flags), mhBefore, before);
  const mAfter = model(schedAfter, flagBits(change.flags ?? service.flags), mhAfter, after);

  let slots: number | null = null;
  let slotsChanged: number | null = null;
  const tb = slotTable(mBefore);
  const ta = slotTable(mAfter);
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
  const lookup = mAfter.scheduler.lookupTable !== undefined;
  let flowsChanged = 0;
  flows.forEach((f, i) => {
    const current = keyOf(f.realServer, `flows[${i}].realServer`);
    if (!lookup) {
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
export function previewServices(items: { service: PreviewService; change: unknown; flows?: PreviewFlow[] }[]): DisruptionPreview[] {
  return items.map((it, i) => {
    try {
      return previewDisruption(it.service, parseChange(it.change), it.flows ?? []);
    } catch (e) {
      if (e instanceof PreviewError) throw new PreviewError(`[${i}].${e.path}`, e.reason);
      throw e;
    }
  });
}
