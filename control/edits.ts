/**
 * Runtime edits of the configuration document: the operations behind ipvsadm's commands and the
 * API's service/real-server routes. Each works on the raw document (YAML-shaped), so the result
 * is validated by the same schema as the file. Errors name the operation's field and use the
 * catalogue (not found 404, already exists 409).
 */
import { canonAddr } from '../net/addr';
import { DEFAULT_PROTOCOL, validateRealServer, validateService } from './config';
import { UvsError } from './errors';
import { int, obj, str, type Out } from './schema';

/** A service by its key: the path parameters of the service routes, a batch operation's `ref`. */
export const SERVICE_REF = obj(
  {
    protocol: str({ doc: 'tcp, udp or sctp' }),
    address: str({ doc: 'The VIP (any spelling of an IPv6 address)' }),
    port: int({ min: 0, max: 65535 }),
  },
  { mapping: true },
);
export type ServiceRef = Out<typeof SERVICE_REF>;

/**
 * One operation. Written by hand, not Out<typeof EDIT_OP> (control/api-bodies.ts): the kit has no
 * tagged union, so the schema is one mapping with every operation's fields optional and a check
 * that the operation has its own; derived, this type would lose which fields each one has.
 * api-bodies.ts OP_FIELDS is typed against `EditOp['op']`, so the two name the same operations.
 */
export type EditOp =
  | { op: 'addService'; service: Record<string, unknown> }
  | { op: 'editService'; service: Record<string, unknown> }
  | { op: 'deleteService'; ref: ServiceRef }
  | { op: 'clear' }
  | { op: 'addRealServer'; ref: ServiceRef; realServer: Record<string, unknown> }
  | { op: 'editRealServer'; ref: ServiceRef; realServer: Record<string, unknown> }
  | { op: 'deleteRealServer'; ref: ServiceRef; address: string; port: number }
  | { op: 'setTimeouts'; tcp: number; tcpFin: number; udp: number };

type Doc = Record<string, unknown>;

/** The service settings an ipvsadm -E sets whole; the rest of a service entry is uvs's own. */
const IPVSADM_SERVICE_FIELDS = ['scheduler', 'schedFlags', 'persistence', 'netmask'];
type Svc = Record<string, unknown> & { realServers?: Record<string, unknown>[] };

function services(doc: Doc): Svc[] {
  if (doc.services === undefined || doc.services === null) doc.services = [];
  if (!Array.isArray(doc.services)) throw new UvsError('UVS_ERR_CONFIG_INVALID', 'must be a list', 'services');
  return doc.services as Svc[];
}

function refOf(s: Record<string, unknown>): ServiceRef {
  return { protocol: String(s.protocol ?? DEFAULT_PROTOCOL), address: String(s.address), port: Number(s.port) };
}

export function refName(r: ServiceRef): string {
  return `${r.protocol} ${r.address}:${r.port}`;
}

function rsPort(svc: Svc, r: Record<string, unknown>): number {
  return Number(r.port ?? svc.port);
}

/** One spelling per service reference (IPv6 canonical), the key of the index below. */
function keyOf(r: ServiceRef): string {
  return `${r.protocol} ${String(canonAddr(r.address))}:${r.port}`;
}

/**
 * A service mapping's key, computed once per mapping: the control worker's document keeps its
 * unchanged mappings from change to change (control/offload-jobs.ts), and 10,000 keys with their
 * addresses parsed again cost ~4 ms an edit. An edit never changes a mapping's key fields (an
 * editService finds the mapping by them), so the key stays true for the mapping's life.
 */
const mappingKeys = new WeakMap<object, string>();

function mappingKey(s: Svc): string {
  let k = mappingKeys.get(s);
  if (k === undefined) mappingKeys.set(s, (k = keyOf(refOf(s))));
  return k;
}

function rsKey(svc: Svc, r: Record<string, unknown>): string {
  return `${String(canonAddr(r.address))}:${rsPort(svc, r)}`;
}

/**
 * The document's services and real servers indexed by key, so a batch of n operations costs
 * O(n), not O(n²) (20 000 additions took 15 s of list scans). Deleted entries are only marked
 * while the batch runs and filtered out once at the end, keeping everyone else's order.
 */
class DocIndex {
  private svcs = new Map<string, Svc>();
  private rs = new Map<Svc, Map<string, Record<string, unknown>>>();
  readonly gone = new Set<object>();

  constructor(private readonly doc: Doc) {
    for (const s of services(doc)) {
      const k = mappingKey(s);
      if (!this.svcs.has(k)) this.svcs.set(k, s);
    }
  }

  find(ref: ServiceRef): Svc | undefined {
    return this.svcs.get(keyOf(ref));
  }

  add(s: Svc): void {
    services(this.doc).push(s);
    this.svcs.set(keyOf(refOf(s)), s);
  }

  remove(s: Svc): void {
    this.svcs.delete(keyOf(refOf(s)));
    this.gone.add(s);
  }

  clear(): void {
    this.doc.services = [];
    this.svcs.clear();
    this.rs.clear();
  }

  forget(s: Svc): void {
    this.rs.delete(s);
  }

  realServers(s: Svc): Map<string, Record<string, unknown>> {
    let m = this.rs.get(s);
    if (!m) {
      m = new Map();
      for (const r of s.realServers ?? []) if (!m.has(rsKey(s, r))) m.set(rsKey(s, r), r);
      this.rs.set(s, m);
    }
    return m;
  }

  /** Drops the marked entries (once, at the end of the batch). */
  compact(): void {
    if (this.gone.size === 0) return;
    const list = services(this.doc);
    this.doc.services = list.filter((s) => !this.gone.has(s));
    for (const s of list) if (s.realServers?.some((r) => this.gone.has(r))) s.realServers = s.realServers.filter((r) => !this.gone.has(r));
  }
}

/** Applies the operations in order to `doc` (mutated). */
export function applyEdits(doc: Doc, ops: EditOp[]): void {
  const ix = new DocIndex(doc);
  const find = (ref: ServiceRef, path: string): Svc => {
    const s = ix.find(ref);
    if (!s) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${refName(ref)}`, path);
    return s;
  };
  ops.forEach((o, i) => {
    const p = `ops[${i}]`;
    switch (o.op) {
      case 'addService': {
        const ref = refOf(o.service);
        if (ix.find(ref)) throw new UvsError('UVS_ERR_API_CONFLICT', `service ${refName(ref)} already exists`, `${p}.service`);
        ix.add({ ...o.service });
        break;
      }
      case 'editService': {
        // ipvsadm -E: the settings ipvsadm controls are replaced (scheduler, flags, persistence,
        // netmask: an edit without -p removes persistence); uvs's own settings (name, health
        // check, drain time, forwarding, real servers) stay unless the edit gives them.
        const ref = refOf(o.service);
        const s = find(ref, `${p}.service`);
        const before = s.realServers;
        const schedulerChanged = o.service.scheduler !== undefined && o.service.scheduler !== s.scheduler;
        for (const k of IPVSADM_SERVICE_FIELDS) delete s[k];
        if (schedulerChanged && o.service.mhTableSize === undefined) delete s.mhTableSize;
        Object.assign(s, o.service);
        if (s.realServers !== before) ix.forget(s); // a new real-server list: index it afresh
        break;
      }
      case 'deleteService': {
        const s = ix.find(o.ref);
        if (!s) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${refName(o.ref)}`, `${p}.ref`);
        ix.remove(s);
        break;
      }
      case 'clear':
        ix.clear();
        break;
      case 'addRealServer': {
        const s = find(o.ref, `${p}.ref`);
        const m = ix.realServers(s);
        const k = rsKey(s, o.realServer);
        if (m.has(k)) {
          throw new UvsError(
            'UVS_ERR_API_CONFLICT',
            `real server ${String(o.realServer.address)}:${rsPort(s, o.realServer)} already exists in ${refName(o.ref)}`,
            `${p}.realServer`,
          );
        }
        const r = { ...o.realServer };
        (s.realServers ??= []).push(r);
        m.set(k, r);
        break;
      }
      case 'editRealServer': {
        const s = find(o.ref, `${p}.ref`);
        const r = ix.realServers(s).get(rsKey(s, o.realServer));
        if (!r)
          throw new UvsError(
            'UVS_ERR_API_NOT_FOUND',
            `no real server ${String(o.realServer.address)}:${rsPort(s, o.realServer)} in ${refName(o.ref)}`,
            `${p}.realServer`,
          );
        Object.assign(r, o.realServer);
        break;
      }
      case 'deleteRealServer': {
        const s = find(o.ref, `${p}.ref`);
        const m = ix.realServers(s);
        const k = `${String(canonAddr(o.address))}:${o.port}`;
        const r = m.get(k);
        if (!r) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no real server ${o.address}:${o.port} in ${refName(o.ref)}`, `${p}`);
        m.delete(k);
        ix.gone.add(r);
        break;
      }
      case 'setTimeouts': {
        // ipvsadm --set tcp tcpfin udp: 0 leaves a value unchanged.
        // A copy: the section may be the running document's own (control/offload-jobs.ts cowDoc
        // copies only services), which a refused edit must leave as it was.
        const t = { ...((doc.timeouts ?? {}) as Record<string, unknown>) };
        if (o.tcp) t.tcp = o.tcp;
        if (o.tcpFin) t.tcpFin = o.tcpFin;
        if (o.udp) t.udp = o.udp;
        doc.timeouts = t;
        break;
      }
      default:
        throw new UvsError('UVS_ERR_API_BAD_REQUEST', `unknown operation ${JSON.stringify((o as { op: unknown }).op)}`, `${p}.op`);
    }
  });
  ix.compact();
}

/** The limits a batch is counted against (dataplane.maxServices, maxRealServers). */
export interface EditLimits {
  maxServices: number;
  maxRealServers: number;
}

/**
 * Refuses (413) a batch whose result must exceed dataplane.maxServices or maxRealServers, from
 * the counts alone: services and real servers the running document has, plus those the batch
 * adds, minus those it deletes. Draining servers take slots too, so this only ever refuses what
 * the full check would also refuse; it just refuses it first.
 */
export function checkBatchLimits(doc: unknown, ops: EditOp[], limits: EditLimits): void {
  // Edits of a real server and timeouts change no count: nothing to check (and no walk of 10,000
  // services). An editService may bring another real-server list: it is counted.
  if (ops.every((o) => o !== null && typeof o === 'object' && (o.op === 'editRealServer' || o.op === 'setTimeouts'))) return;
  const rsCount = (list: unknown) => (Array.isArray(list) ? list.length : 0);
  const key = (r: unknown) => (r !== null && typeof r === 'object' ? keyOf(refOf(r as Record<string, unknown>)) : '');
  const count = new Map<string, number>(); // service → real servers
  const svcs = (doc as { services?: unknown } | null)?.services;
  if (Array.isArray(svcs)) for (const s of svcs as Svc[]) if (s && typeof s === 'object') count.set(mappingKey(s), rsCount(s.realServers));
  for (const o of ops) {
    if (o === null || typeof o !== 'object') continue; // not an operation: the body schema refuses it
    const k = o.op === 'addService' || o.op === 'editService' ? key(o.service) : 'ref' in o ? key(o.ref) : '';
    if (o.op === 'clear') count.clear();
    else if (o.op === 'addService') count.set(k, rsCount(o.service?.realServers));
    else if (o.op === 'deleteService') count.delete(k);
    else if (o.op === 'addRealServer' && count.has(k)) count.set(k, count.get(k)! + 1);
    else if (o.op === 'deleteRealServer' && count.has(k)) count.set(k, Math.max(0, count.get(k)! - 1));
  }
  if (count.size > limits.maxServices)
    throw new UvsError(
      'UVS_ERR_API_TOO_LARGE',
      `the batch would leave ${count.size} services, more than dataplane.maxServices (${limits.maxServices})`,
      'ops',
    );
  let rs = 0;
  for (const n of count.values()) rs += n;
  if (rs > limits.maxRealServers)
    throw new UvsError(
      'UVS_ERR_API_TOO_LARGE',
      `the batch would leave ${rs} real servers, more than dataplane.maxRealServers (${limits.maxRealServers})`,
      'ops',
    );
}

/**
 * An edit of the running document, up to (not including) the validation of the whole result:
 * the limits first (a batch that must fail on them costs O(ops), not a validation of everything
 * it would have built: 100 000 additions over maxServices used to be refused last), then each
 * operation's service or real server by the configuration's schema (so errors name it:
 * ops[3].realServer.weight), then the operations in order. `doc` is changed in place.
 */
export function editDocument(doc: Doc, ops: EditOp[], limits: EditLimits): Doc {
  checkBatchLimits(doc, ops, limits);
  ops.forEach((o, i) => {
    if (o.op === 'addService' || o.op === 'editService') validateService(o.service, `ops[${i}].service`);
    if (o.op === 'addRealServer' || o.op === 'editRealServer') validateRealServer(o.realServer, `ops[${i}].realServer`, o.ref.port, 'masq');
  });
  applyEdits(doc, ops);
  return doc;
}
