/**
 * After uvsd answers: what -E keeps of a service's uvs-only settings, and a refusal printed as
 * ipvsadm prints the kernel's (ipvs_strerror()) followed by the daemon's own words.
 */
import { DEFAULT_PROTOCOL } from '../config';
import type { EditOp } from '../edits';
import { PROGRAM } from './tables';

/** Service settings ipvsadm controls; -E replaces them and keeps every other (uvs's own) setting. */
const IPVSADM_SERVICE_KEYS = new Set([
  'protocol',
  'address',
  'port',
  'scheduler',
  'schedFlags',
  'persistence',
  'netmask',
  'realServers',
  'mhTableSize',
]);

/**
 * The API's editService replaces a service's whole entry; uvsadm -E must only replace what ipvsadm
 * sets. So the uvs-only settings of the running document (name, healthCheck, maxDrainTime, …) are
 * carried into each -E operation; mhTableSize only while the scheduler stays mh.
 */
export function keepUvsSettings(ops: EditOp[], doc: unknown): void {
  const list = (doc as { services?: unknown } | null)?.services;
  if (!Array.isArray(list)) return;
  for (const o of ops) {
    if (o.op !== 'editService') continue;
    const cur = list.find(
      (s: Record<string, unknown>) =>
        (s?.protocol ?? DEFAULT_PROTOCOL) === o.service.protocol && s?.address === o.service.address && Number(s?.port) === o.service.port,
    ) as Record<string, unknown> | undefined;
    if (!cur) continue;
    for (const [k, v] of Object.entries(cur)) if (!IPVSADM_SERVICE_KEYS.has(k) && o.service[k] === undefined) o.service[k] = v;
    if (cur.mhTableSize !== undefined && o.service.scheduler === 'mh') o.service.mhTableSize = cur.mhTableSize;
  }
}

/**
 * ipvs_strerror()'s message for a refused operation (what ipvsadm prints), from the daemon's
 * error; undefined when ipvsadm would have nothing better than the daemon's own words.
 */
export function classicError(op: EditOp['op'] | 'zero', err: { code?: string; message?: string; path?: string }): string | undefined {
  const msg = err.message ?? '';
  const noService = /no service /.test(msg);
  if (err.code === 'UVS_ERR_API_CONFLICT')
    return op === 'addService' ? 'Service already exists' : op === 'addRealServer' ? 'Destination already exists' : undefined;
  if (err.code === 'UVS_ERR_API_NOT_FOUND') {
    if (op === 'editService' || op === 'deleteService' || op === 'zero') return 'No such service';
    if (op === 'addRealServer' || op === 'editRealServer' || op === 'deleteRealServer')
      return noService ? 'Service not defined' : 'No such destination';
  }
  if (err.code === 'UVS_ERR_CONFIG_INVALID' && /\.scheduler$/.test(err.path ?? '') && /unknown scheduler/.test(msg))
    return 'Scheduler or persistence engine not found';
  return undefined;
}

/**
 * The daemon's refusal as uvsadm prints it after ipvsadm's own line: "uvsadm: CODE: reason". The
 * batch's "ops[3]." or "ops[3]: " prefix goes (the operation is the command itself), so
 * "ops[0].realServer.weight: …" reads "realServer.weight: …" and "ops[0]: no real server …"
 * reads "no real server …" (not ": no real server").
 */
export function daemonError(err: { code?: string; message?: string; path?: string }, status: number): string {
  return `${PROGRAM}: ${err.code ?? status}: ${(err.message ?? 'request failed').replace(/^ops\[\d+\](?:\.|: )/, '')}\n`;
}
