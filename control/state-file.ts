/**
 * The state file (`stateFile`): what uvsd keeps across a restart, today the drain list. It is read
 * before anything else at start-up, so it is untrusted input like the configuration: a file of the
 * wrong shape used to stop uvsd from starting at all (and every restart read it again), and an
 * entry's service was added without the configuration's checks — even outside vipCidrs.
 *
 * Each entry is checked here as a configuration entry is (validateService, validateRealServer, the
 * VIP ranges, the forwarding prerequisites) and must agree with its own keys; a bad entry is
 * skipped with its index and reason, the others are restored.
 */
import { inAnyCidr } from '../net/addr';
import { isProtocol } from '../net/proto';
import { validateRealServer, validateService, type UvsConfig } from './config';
import { serviceKey, type PersistedDrain } from './services';

export interface SkippedEntry {
  /** "draining[3]" or "draining" (the list itself). */
  path: string;
  reason: string;
}

function reasonOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function entry(v: unknown, path: string, cfg: UvsConfig): PersistedDrain {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('must be a mapping');
  const e = v as Record<string, unknown>;
  if (typeof e.service !== 'string' || typeof e.realServer !== 'string') throw new Error('service and realServer must be strings');
  if (typeof e.protocol !== 'string' || !isProtocol(e.protocol))
    throw new Error(`protocol must be tcp, udp or sctp, got ${JSON.stringify(e.protocol)}`);
  if (typeof e.since !== 'number' || !Number.isFinite(e.since)) throw new Error('since must be a time in ms');
  if (e.deadline !== null && (typeof e.deadline !== 'number' || !Number.isFinite(e.deadline)))
    throw new Error('deadline must be a time in ms or null');
  const svc = validateService(e.serviceConfig, `${path}.serviceConfig`);
  if (serviceKey(svc) !== e.service || svc.protocol !== e.protocol)
    throw new Error(`serviceConfig is ${serviceKey(svc)}, not ${e.service}`);
  const vips = cfg.dataplane.vipCidrs;
  if (!inAnyCidr(svc.address, vips)) throw new Error(`${svc.address} is not inside dataplane.vipCidrs (${vips.join(', ')})`);
  const rs = validateRealServer(e.realServerConfig, `${path}.realServerConfig`, svc.port, svc.forwarding);
  if (`${rs.address}:${rs.port}` !== e.realServer) throw new Error(`realServerConfig is ${rs.address}:${rs.port}, not ${e.realServer}`);
  const v6 = svc.address.includes(':');
  if (rs.address.includes(':') !== v6) throw new Error(`${rs.address} is not of the service's address family`);
  if (rs.forwarding === 'tunnel' && !(v6 ? cfg.dataplane.tunnelSource6 : cfg.dataplane.tunnelSource))
    throw new Error('tunnel forwarding without dataplane.tunnelSource');
  if (rs.forwarding === 'fullnat' && !cfg.dataplane.fullnat.addresses.some((a) => a.includes(':') === v6))
    throw new Error('fullnat forwarding without a dataplane.fullnat address of its family');
  return {
    service: e.service,
    realServer: e.realServer,
    protocol: e.protocol,
    since: e.since,
    deadline: e.deadline as number | null,
    serviceConfig: svc,
    realServerConfig: rs,
  };
}

/** The drain entries of a parsed state file that can be restored, and those skipped (with why). */
export function validateStateDrains(doc: unknown, cfg: UvsConfig): { drains: PersistedDrain[]; skipped: SkippedEntry[] } {
  const skipped: SkippedEntry[] = [];
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    return { drains: [], skipped: [{ path: '', reason: 'the state file must be a JSON object' }] };
  const list = (doc as { draining?: unknown }).draining;
  if (list === undefined) return { drains: [], skipped };
  if (!Array.isArray(list)) return { drains: [], skipped: [{ path: 'draining', reason: 'must be a list' }] };
  const drains: PersistedDrain[] = [];
  const seen = new Set<string>();
  list.forEach((v, i) => {
    const path = `draining[${i}]`;
    try {
      const d = entry(v, path, cfg);
      const k = `${d.service}|${d.realServer}`;
      if (seen.has(k)) throw new Error(`${k} is listed twice`);
      seen.add(k);
      drains.push(d);
    } catch (e) {
      skipped.push({ path, reason: reasonOf(e) });
    }
  });
  return { drains, skipped };
}
