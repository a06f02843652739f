/**
 * Runtime edits of the configuration document: the operations behind ipvsadm's commands and the
 * API's service/real-server routes. Each works on the raw document (YAML-shaped), so the result
 * is validated by the same schema as the file. Errors name the operation's field and use the
 * catalogue (not found 404, already exists 409).
 */
import { canonAddr } from '../lb/addr';
import { UvsError } from './errors';

export interface ServiceRef {
  protocol: string;
  address: string;
  port: number;
}

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
  return { protocol: String(s.protocol ?? 'tcp'), address: String(s.address), port: Number(s.port) };
}

function same(a: ServiceRef, b: ServiceRef): boolean {
  return a.protocol === b.protocol && canonAddr(a.address) === canonAddr(b.address) && a.port === b.port;
}

export function refName(r: ServiceRef): string {
  return `${r.protocol} ${r.address}:${r.port}`;
}

function find(doc: Doc, ref: ServiceRef, path: string): Svc {
  const s = services(doc).find((x) => same(refOf(x), ref));
  if (!s) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${refName(ref)}`, path);
  return s;
}

function rsPort(svc: Svc, r: Record<string, unknown>): number {
  return Number(r.port ?? svc.port);
}

/** Applies the operations in order to `doc` (mutated). */
export function applyEdits(doc: Doc, ops: EditOp[]): void {
  ops.forEach((o, i) => {
    const p = `ops[${i}]`;
    switch (o.op) {
      case 'addService': {
        const ref = refOf(o.service);
        if (services(doc).some((x) => same(refOf(x), ref))) throw new UvsError('UVS_ERR_API_CONFLICT', `service ${refName(ref)} already exists`, `${p}.service`);
        services(doc).push({ ...o.service });
        break;
      }
      case 'editService': {
        // ipvsadm -E: the settings ipvsadm controls are replaced (scheduler, flags, persistence,
        // netmask: an edit without -p removes persistence); uvs's own settings (name, health
        // check, drain time, forwarding, real servers) stay unless the edit gives them.
        const ref = refOf(o.service);
        const s = find(doc, ref, `${p}.service`);
        const schedulerChanged = o.service.scheduler !== undefined && o.service.scheduler !== s.scheduler;
        for (const k of IPVSADM_SERVICE_FIELDS) delete s[k];
        if (schedulerChanged && o.service.mhTableSize === undefined) delete s.mhTableSize;
        Object.assign(s, o.service);
        break;
      }
      case 'deleteService': {
        const list = services(doc);
        const idx = list.findIndex((x) => same(refOf(x), o.ref));
        if (idx < 0) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${refName(o.ref)}`, `${p}.ref`);
        list.splice(idx, 1);
        break;
      }
      case 'clear':
        doc.services = [];
        break;
      case 'addRealServer': {
        const s = find(doc, o.ref, `${p}.ref`);
        s.realServers ??= [];
        const port = rsPort(s, o.realServer);
        if (s.realServers.some((r) => canonAddr(r.address) === canonAddr(o.realServer.address) && rsPort(s, r) === port)) {
          throw new UvsError('UVS_ERR_API_CONFLICT', `real server ${String(o.realServer.address)}:${port} already exists in ${refName(o.ref)}`, `${p}.realServer`);
        }
        s.realServers.push({ ...o.realServer });
        break;
      }
      case 'editRealServer': {
        const s = find(doc, o.ref, `${p}.ref`);
        const port = rsPort(s, o.realServer);
        const r = (s.realServers ?? []).find((x) => canonAddr(x.address) === canonAddr(o.realServer.address) && rsPort(s, x) === port);
        if (!r) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no real server ${String(o.realServer.address)}:${port} in ${refName(o.ref)}`, `${p}.realServer`);
        Object.assign(r, o.realServer);
        break;
      }
      case 'deleteRealServer': {
        const s = find(doc, o.ref, `${p}.ref`);
        const list = s.realServers ?? [];
        const idx = list.findIndex((x) => canonAddr(x.address) === canonAddr(o.address) && rsPort(s, x) === o.port);
        if (idx < 0) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no real server ${o.address}:${o.port} in ${refName(o.ref)}`, `${p}`);
        list.splice(idx, 1);
        break;
      }
      case 'setTimeouts': {
        // ipvsadm --set tcp tcpfin udp: 0 leaves a value unchanged.
        const t = (doc.timeouts ??= {}) as Record<string, unknown>;
        if (o.tcp) t.tcp = o.tcp;
        if (o.tcpFin) t.tcpFin = o.tcpFin;
        if (o.udp) t.udp = o.udp;
        break;
      }
      default:
        throw new UvsError('UVS_ERR_API_BAD_REQUEST', `unknown operation ${JSON.stringify((o as { op: unknown }).op)}`, `${p}.op`);
    }
  });
}
