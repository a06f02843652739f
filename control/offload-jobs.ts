/**
 * The work the control worker does for the control thread (control/offload.ts): everything whose
 * cost a request or a file chooses — parsing (JSON bodies, the YAML file), validation, edits of
 * the document, walks of the connection table — so that the control thread only applies the
 * result, in slices (control/slices.ts). Pure functions of their inputs and the shared table;
 * the API's in-process tests call runJob directly.
 *
 * GET /v1/config's copy and redaction of the document and configuration (66 ms for that
 * configuration) are done here too.
 *
 * Measured on the shared 2-core machine (docs/control-plane.md): the YAML of 1023 services and
 * 4096 real servers (300 KB) took 320–400 ms to parse and 27–42 ms to validate; a preview against
 * a full 64 k table 100–290 ms; 100 000 batch operations seconds. Here they cost the control
 * thread the result's structured clone only (≈ 4 ms for that configuration).
 */
import * as L from '../conntrack/layout';
import { entryAddr, type ConnTable } from '../conntrack/table';
import { inAnyCidr } from '../net/addr';
import { BATCH, PREVIEW } from './api-bodies';
import { readConfigDoc, validateConfig, type UvsConfig } from './config';
import { connectionsView } from './connections';
import {
  PreviewError,
  previewDisruption,
  type DisruptionPreview,
  type PreviewFlow,
  type PreviewService,
  type ProposedChange,
} from './disruption';
import { checkBatchLimits, editDocument, type EditLimits, type EditOp } from './edits';
import { UvsError, type ErrorCode } from './errors';
import { redactSecrets } from './http-guard';
import { run } from './schema';
import { serviceKey } from './services';

/** What the file reload needs of the running configuration (kube-proxy's excludeCIDRs). */
export interface RunningConfig {
  doc: unknown;
  /** The running services in document order: key and VIP. */
  services: { key: string; address: string }[];
}

export type Job =
  | { kind: 'file'; file: string; running: RunningConfig }
  | { kind: 'edit'; doc: unknown; ops: EditOp[]; limits: EditLimits }
  | { kind: 'batch'; doc: unknown; body: Uint8Array; limits: EditLimits }
  | {
      kind: 'preview';
      body: Uint8Array;
      /** null: no such service (404, once the body is found valid). */
      service: PreviewService | null;
      serviceName: string;
      svcSlot: number;
      maxRealServers: number;
    }
  | { kind: 'connections'; limit: number; offset: number }
  | { kind: 'config'; file: string; doc: unknown; cfg: UvsConfig };

/** A UvsError as it crosses the thread boundary. */
export interface JobError {
  code: ErrorCode;
  detail: string;
  path?: string;
}

export type Configured = { ok: true; doc: Record<string, unknown>; cfg: UvsConfig };
export type JobResult =
  | Configured
  | { ok: true; preview: DisruptionPreview }
  | { ok: true; json: Uint8Array }
  /**
   * `request`: the request itself was refused (its body, an operation, the limits) before any
   * configuration was built from it; `config`: the configuration it gave is invalid (a rejected
   * reload, counted in reloads.failed as before).
   */
  | { ok: false; error: JobError; stage: 'request' | 'config' };

export function toJobError(e: unknown): JobError {
  if (e instanceof UvsError) {
    const detail = e.path && e.message.startsWith(`${e.path}: `) ? e.message.slice(e.path.length + 2) : e.message;
    return e.path ? { code: e.code, detail, path: e.path } : { code: e.code, detail };
  }
  if (e instanceof RangeError) return { code: 'UVS_ERR_API_TOO_LARGE', detail: `too deeply nested or too large: ${e.message}` };
  return { code: 'UVS_ERR_API_INTERNAL', detail: (e as Error).message };
}

export function fromJobError(e: JobError): UvsError {
  return new UvsError(e.code, e.detail, e.path);
}

/** A key that changes an object's prototype when copied by assignment (fastify refuses these too). */
const PROTO_KEY =
  /"(?:_|\\u005[Ff])(?:_|\\u005[Ff])(?:p|\\u0070)(?:r|\\u0072)(?:o|\\u006[Ff])(?:t|\\u0074)(?:o|\\u006[Ff])(?:_|\\u005[Ff])(?:_|\\u005[Ff])"|"(?:c|\\u0063)(?:o|\\u006[Ff])(?:n|\\u006[Ee])(?:s|\\u0073)(?:t|\\u0074)(?:r|\\u0072)(?:u|\\u0075)(?:c|\\u0063)(?:t|\\u0074)(?:o|\\u006[Ff])(?:r|\\u0072)"/;

/**
 * A request body as JSON, refused (400) as fastify's own parser refuses it: not JSON, or an
 * object with a `__proto__` key or a `constructor.prototype` (prototype poisoning once the
 * object is copied with Object.assign). The walk runs only when the text has such a key.
 */
export function parseJsonBody(bytes: Uint8Array): unknown {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new UvsError('UVS_ERR_API_BAD_REQUEST', `the body is not valid JSON: ${(e as Error).message}`);
  }
  if (!PROTO_KEY.test(text)) return v;
  const todo: unknown[] = [v];
  for (let x = todo.pop(); x !== undefined; x = todo.pop()) {
    if (x === null || typeof x !== 'object') continue;
    if (Object.hasOwn(x, '__proto__')) throw new UvsError('UVS_ERR_API_BAD_REQUEST', 'the body has a forbidden __proto__ key');
    const c = (x as { constructor?: unknown }).constructor;
    if (Object.hasOwn(x, 'constructor') && c !== null && typeof c === 'object' && Object.hasOwn(c, 'prototype'))
      throw new UvsError('UVS_ERR_API_BAD_REQUEST', 'the body has a forbidden constructor.prototype key');
    for (const k of Object.keys(x)) todo.push((x as Record<string, unknown>)[k]);
  }
  return v;
}

/**
 * A POST /v1/batch body's operations: JSON, then the limits (before the body schema checks every
 * operation: a batch that must be refused for its size costs one pass over the operations, not
 * their validation), then each operation's own fields (BATCH).
 */
export function batchOps(bytes: Uint8Array, doc: unknown, limits: EditLimits): EditOp[] {
  const body = parseJsonBody(bytes);
  const raw = (body as { ops?: unknown } | null)?.ops;
  if (Array.isArray(raw)) checkBatchLimits(doc, raw as EditOp[], limits);
  return (run(BATCH, body, '', 'UVS_ERR_API_BAD_REQUEST') as { ops: EditOp[] }).ops;
}

/** A copy of the running document the edit may change (the worker got its own by structured clone). */
function copyDoc(doc: unknown): Record<string, unknown> {
  return (doc !== null && typeof doc === 'object' ? doc : {}) as Record<string, unknown>;
}

/**
 * kube-proxy's excludeCIDRs: services with a VIP in these ranges are never removed by a file
 * reload (they were added at runtime, by the API or uvsadm), as kube-proxy never cleans them up.
 */
function keepExcluded(doc: unknown, cfg: UvsConfig, running: RunningConfig): unknown {
  const ranges = cfg.kubeProxy?.excludeCIDRs ?? [];
  if (ranges.length === 0 || typeof doc !== 'object' || doc === null) return doc;
  const inFile = new Set(cfg.services.map(serviceKey));
  const raw = (running.doc as { services?: Record<string, unknown>[] } | null)?.services ?? [];
  const kept = raw.filter((_r, i) => {
    const s = running.services[i];
    return s !== undefined && !inFile.has(s.key) && inAnyCidr(s.address, ranges);
  });
  if (kept.length === 0) return doc;
  const d = doc as { services?: unknown[] };
  return { ...d, services: [...(d.services ?? []), ...kept] };
}

/** The service's tracked flows (templates aside), read from the shared table. */
function flowsOf(table: ConnTable, svcSlot: number): PreviewFlow[] {
  const flows: PreviewFlow[] = [];
  const a = table.i32;
  table.forEach((_e, o) => {
    if (a[o + L.E_SVC] !== svcSlot || a[o + L.E_FLAGS]! & L.F_TEMPLATE) return;
    flows.push({
      client: entryAddr(a, o, L.E_CADDR),
      clientPort: a[o + L.E_CPORTS]! >>> 16,
      realServer: `${entryAddr(a, o, L.E_DADDR)}:${a[o + L.E_DPORTS]! >>> 16}`,
    });
  });
  return flows;
}

function preview(job: Extract<Job, { kind: 'preview' }>, table: ConnTable | null): DisruptionPreview {
  const change = run(PREVIEW, parseJsonBody(job.body), 'change', 'UVS_ERR_API_BAD_REQUEST') as Record<string, unknown>;
  if (!job.service) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${job.serviceName}`);
  // A service never holds more than maxRealServers: a longer list is refused before any work.
  for (const k of ['delete', 'setWeight', 'add'] as const) {
    const v = change[k];
    if (Array.isArray(v) && v.length > job.maxRealServers) {
      throw new UvsError('UVS_ERR_API_TOO_LARGE', `${v.length} entries, more than dataplane.maxRealServers (${job.maxRealServers})`, k);
    }
  }
  try {
    return previewDisruption(job.service, change as ProposedChange, table ? flowsOf(table, job.svcSlot) : []);
  } catch (e) {
    if (e instanceof PreviewError) throw new UvsError('UVS_ERR_API_BAD_REQUEST', e.reason, e.path);
    throw e;
  }
}

/** The configuration an edited document gives; its refusal is a rejected configuration. */
function configured(doc: Record<string, unknown>): JobResult {
  try {
    return { ok: true, doc, cfg: validateConfig(doc) };
  } catch (e) {
    return { ok: false, error: toJobError(e), stage: 'config' };
  }
}

function edited(f: () => Record<string, unknown>): JobResult {
  let doc: Record<string, unknown>;
  try {
    doc = f();
  } catch (e) {
    return { ok: false, error: toJobError(e), stage: 'request' };
  }
  return configured(doc);
}

/** Runs one job; never throws (errors are results). */
export function runJob(job: Job, table: ConnTable | null): JobResult {
  switch (job.kind) {
    case 'file':
      try {
        const doc0 = readConfigDoc(job.file);
        const cfg0 = validateConfig(doc0);
        const doc = keepExcluded(doc0, cfg0, job.running);
        return doc === doc0 ? { ok: true, doc: doc as Record<string, unknown>, cfg: cfg0 } : configured(doc as Record<string, unknown>);
      } catch (e) {
        return { ok: false, error: toJobError(e), stage: 'config' };
      }
    case 'edit':
      return edited(() => editDocument(copyDoc(job.doc), job.ops, job.limits));
    case 'batch':
      return edited(() => editDocument(copyDoc(job.doc), batchOps(job.body, job.doc, job.limits), job.limits));
    case 'preview':
      try {
        return { ok: true, preview: preview(job, table) };
      } catch (e) {
        return { ok: false, error: toJobError(e), stage: 'request' };
      }
    case 'config':
      // GET /v1/config: secrets (http-guard.ts SECRET_FIELDS) never leave the daemon.
      return {
        ok: true,
        json: Buffer.from(JSON.stringify({ file: job.file, document: redactSecrets(job.doc), effective: redactSecrets(job.cfg) })),
      };
    case 'connections':
      try {
        if (!table) throw new UvsError('UVS_ERR_API_INTERNAL', 'no connection table');
        return { ok: true, json: Buffer.from(JSON.stringify(connectionsView({ table }, job.limit, job.offset))) };
      } catch (e) {
        return { ok: false, error: toJobError(e), stage: 'request' };
      }
  }
}
