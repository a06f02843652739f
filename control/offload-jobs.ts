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
import { deserialize, serialize } from 'node:v8';
import * as L from '../conntrack/layout';
import { entryAddr, type ConnTable } from '../conntrack/table';
import { inAnyCidr } from '../net/addr';
import { BATCH, PREVIEW } from './api-bodies';
import { readConfigDoc, validateConfig, validateRemembering, type UvsConfig } from './config';
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
import { warmVariant } from './yaml-items';
import { sameValue, serviceKey } from './services';
import type { ServiceConfig } from './config';

/** What the file reload needs of the running configuration (kube-proxy's excludeCIDRs). */
export interface RunningConfig {
  doc: unknown;
  /** The running services in document order: key and VIP. */
  services: { key: string; address: string }[];
}

/**
 * The running configuration by version (issue 37): a job that names the version this worker
 * holds carries no document, and its answer carries only the services that changed (a patch).
 * At 10,000 services × 10 real servers the document and the configuration cloned each way cost
 * the control thread 100–150 ms each. The worker keeps the configuration of the last answer it
 * gave, under `next`; the control thread names it once it runs it. A job whose version this
 * worker does not hold (it started since, or the control thread refused the last answer) is
 * answered `stage: 'base'`, and the control thread sends it again with `doc` and `cfg`.
 */
export interface BaseRef {
  /** The version of the configuration the control thread runs. */
  version: number;
  /** The version the answer's configuration gets. */
  next: number;
  /** With the document (the job's `doc`): the configuration it runs, for a worker that lacks it. */
  cfg?: UvsConfig;
}

/**
 * An answer's configuration as what changed from the base: each service by its index in the
 * base's list, the changed ones whole. Indexes, not keys: 10,000 keys built, cloned and looked up
 * again cost the worker and the control thread ~5 ms each per change.
 */
export interface ConfigPatch {
  /** The document's top-level keys in order, and their values but `services`. */
  docKeys: string[];
  docTop: Record<string, unknown>;
  cfgTop: Omit<UvsConfig, 'services'>;
  /** Per service of the answer, in order: its index in the base's services, or -1 for the next of `changed`. */
  from: Int32Array;
  changed: { key: string; doc: unknown; cfg: ServiceConfig }[];
  /**
   * Many changed services come serialized in parts (packPatch), `changed` empty: a message of
   * 10,000 services is deserialized in one piece when it arrives, ~150 ms of the control thread;
   * parts are read in slices (unpackSteps).
   */
  packed?: { bytes: Uint8Array; ends: number[] };
}

/** Changed services per serialized part (a part is read in a few ms). */
const PACK_PART = 200;

/** The worker's side: `changed` serialized in parts, into one buffer to move (not copy) to the control thread. */
export function packPatch(p: ConfigPatch): ConfigPatch {
  if (p.changed.length <= PACK_PART) return p;
  const parts: Buffer[] = [];
  for (let i = 0; i < p.changed.length; i += PACK_PART) parts.push(serialize(p.changed.slice(i, i + PACK_PART)));
  const bytes = new Uint8Array(parts.reduce((n, b) => n + b.length, 0));
  const ends: number[] = [];
  let at = 0;
  for (const b of parts) {
    bytes.set(b, at);
    ends.push((at += b.length));
  }
  return { ...p, changed: [], packed: { bytes, ends } };
}

/** The control thread's side: the parts read back into `changed`, one part a step (control/slices.ts). */
export function* unpackSteps(p: ConfigPatch): Generator<void> {
  const k = p.packed;
  if (!k) return;
  const buf = Buffer.from(k.bytes.buffer, k.bytes.byteOffset, k.bytes.byteLength);
  let from = 0;
  for (const end of k.ends) {
    for (const c of deserialize(buf.subarray(from, end)) as ConfigPatch['changed']) p.changed.push(c);
    from = end;
    yield;
  }
  delete p.packed;
}

export type Job =
  | { kind: 'file'; file: string; running?: RunningConfig; base?: BaseRef; doc?: unknown }
  | { kind: 'edit'; doc?: unknown; ops: EditOp[]; limits: EditLimits; base?: BaseRef }
  | { kind: 'batch'; doc?: unknown; body: Uint8Array; limits: EditLimits; base?: BaseRef }
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
  | { kind: 'config'; file: string; doc?: unknown; cfg?: UvsConfig; base?: BaseRef }
  /** Take the running configuration (BaseRef) and parse the file once for the reload's cache (yaml-items.ts). */
  | { kind: 'prime'; file: string; doc?: unknown; base: BaseRef };

/** A UvsError as it crosses the thread boundary. */
export interface JobError {
  code: ErrorCode;
  detail: string;
  path?: string;
}

export type Configured = { ok: true; doc: Record<string, unknown>; cfg: UvsConfig };
export type Patched = { ok: true; version: number; patch: ConfigPatch };
export type JobResult =
  | Configured
  | Patched
  /** The job named a version this worker does not hold: send it again with the document. */
  | { ok: false; error: JobError; stage: 'base' }
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

/**
 * The configuration an edited document gives; its refusal is a rejected configuration. `remember`:
 * the document is this worker's own, its mappings never changed in place (validateRemembering).
 */
function configured(doc: Record<string, unknown>, remember = false): JobResult {
  try {
    return { ok: true, doc, cfg: remember ? validateRemembering(doc) : validateConfig(doc) };
  } catch (e) {
    return { ok: false, error: toJobError(e), stage: 'config' };
  }
}

function edited(f: () => Record<string, unknown>, remember = false): JobResult {
  let doc: Record<string, unknown>;
  try {
    doc = f();
  } catch (e) {
    return { ok: false, error: toJobError(e), stage: 'request' };
  }
  return configured(doc, remember);
}

interface Running {
  version: number;
  doc: Record<string, unknown>;
  cfg: UvsConfig;
}

/** The configuration of this worker's last answer (or the one last sent with a job): BaseRef. */
let held: Running | null = null;

const STALE = {
  ok: false,
  error: { code: 'UVS_ERR_API_INTERNAL', detail: 'the control worker does not hold the running configuration' },
  stage: 'base',
} as const satisfies JobResult;

/** The configuration a job with a BaseRef is based on, or 'stale' when this worker lacks it. */
function baseOf(job: { base?: BaseRef; doc?: unknown }): Running | 'stale' {
  const b = job.base!;
  if (job.doc !== undefined && b.cfg) return (held = { version: b.version, doc: copyDoc(job.doc), cfg: b.cfg });
  return held !== null && held.version === b.version ? held : 'stale';
}

/**
 * What changed from `from` to (doc, cfg): a service whose configuration and mapping are the very
 * objects of the base (validateRemembering keeps them) is unchanged without a look at it; others
 * are compared by key and value, whole where they differ.
 */
export function makePatch(
  from: { doc: Record<string, unknown>; cfg: UvsConfig },
  doc: Record<string, unknown>,
  cfg: UvsConfig,
): ConfigPatch {
  const fromDoc = Array.isArray(from.doc.services) ? (from.doc.services as unknown[]) : [];
  const fromSvcs = from.cfg.services;
  const at = new Map<ServiceConfig, number>();
  for (let j = 0; j < fromSvcs.length; j++) at.set(fromSvcs[j]!, j);
  let byKey: Map<string, number> | null = null;
  const docSvcs = Array.isArray(doc.services) ? (doc.services as unknown[]) : [];
  const src = new Int32Array(cfg.services.length);
  const changed: ConfigPatch['changed'] = [];
  for (let i = 0; i < cfg.services.length; i++) {
    const x = cfg.services[i]!;
    let j = at.get(x);
    if (j === undefined || fromDoc[j] !== docSvcs[i]) {
      byKey ??= new Map(fromSvcs.map((y, k) => [serviceKey(y), k]));
      j = byKey.get(serviceKey(x));
      if (j !== undefined && !(sameValue(fromSvcs[j], x) && sameValue(fromDoc[j], docSvcs[i]))) j = undefined;
    }
    if (j !== undefined) src[i] = j;
    else {
      src[i] = -1;
      changed.push({ key: serviceKey(x), doc: docSvcs[i], cfg: x });
    }
  }
  const { services: _d, ...docTop } = doc;
  const { services: _c, ...cfgTop } = cfg;
  return { docKeys: Object.keys(doc), docTop, cfgTop, from: src, changed };
}

/** The document and configuration a patch describes, from those it was made against (the control thread's side). */
export function applyPatch(
  from: { doc: Record<string, unknown>; cfg: UvsConfig },
  p: ConfigPatch,
): { doc: Record<string, unknown>; cfg: UvsConfig } {
  const fromDoc = Array.isArray(from.doc.services) ? (from.doc.services as unknown[]) : [];
  const fromSvcs = from.cfg.services;
  const docSvcs: unknown[] = new Array(p.from.length);
  const cfgSvcs: ServiceConfig[] = new Array(p.from.length);
  let c = 0;
  for (let i = 0; i < p.from.length; i++) {
    const j = p.from[i]!;
    if (j >= 0) {
      if (j >= fromSvcs.length)
        throw new UvsError('UVS_ERR_API_INTERNAL', `the control worker's answer names service ${j} of ${fromSvcs.length}`);
      docSvcs[i] = fromDoc[j];
      cfgSvcs[i] = fromSvcs[j]!;
    } else {
      const ch = p.changed[c++];
      if (!ch) throw new UvsError('UVS_ERR_API_INTERNAL', "the control worker's answer lacks a changed service");
      docSvcs[i] = ch.doc;
      cfgSvcs[i] = ch.cfg;
    }
  }
  const doc: Record<string, unknown> = {};
  for (const k of p.docKeys) doc[k] = k === 'services' ? docSvcs : p.docTop[k];
  return { doc, cfg: { ...p.cfgTop, services: cfgSvcs } as UvsConfig };
}

/** A base job's answer: the patch, and this worker now holds the result as `next`. */
function patched(from: Running, next: number, r: JobResult): JobResult {
  if (!r.ok || !('cfg' in r)) return r;
  held = { version: next, doc: r.doc, cfg: r.cfg };
  return { ok: true, version: next, patch: makePatch(from, r.doc, r.cfg) };
}

/**
 * A copy of the held document that ops may change: the services they may touch (those on a port
 * an operation names) copied deep, the rest shared — the held one must stay as it is.
 */
function cowDoc(doc: Record<string, unknown>, ops: EditOp[]): Record<string, unknown> {
  const ports = new Set<unknown>();
  for (const o of ops) {
    const x = o as { ref?: { port?: unknown }; service?: { port?: unknown } };
    ports.add(x.ref?.port);
    ports.add(x.service?.port);
  }
  const out = { ...doc };
  if (Array.isArray(doc.services))
    out.services = doc.services.map((s: unknown) =>
      s !== null && typeof s === 'object' && ports.has((s as { port?: unknown }).port) ? structuredClone(s) : s,
    );
  return out;
}

function fileJob(file: string, running: RunningConfig, remember = false): JobResult {
  try {
    const doc0 = readConfigDoc(file);
    const cfg0 = remember ? validateRemembering(doc0) : validateConfig(doc0);
    const doc = keepExcluded(doc0, cfg0, running);
    return doc === doc0
      ? { ok: true, doc: doc as Record<string, unknown>, cfg: cfg0 }
      : configured(doc as Record<string, unknown>, remember);
  } catch (e) {
    return { ok: false, error: toJobError(e), stage: 'config' };
  }
}

/** Rounds of warmUp, and the most time they may take. */
const WARM_ROUNDS = 6;
const WARM_MS = 1500;

/**
 * The edit and reload paths run a few times on the held configuration without changing it, so
 * that the first real changes find their code compiled: at 10,000 services the first edits after
 * a start took 30–50 ms in the worker against 14–20 later, the first reload 90–115 against 25–30
 * (V8 optimizes a function after some runs, not one). An edit that gives a real server what it
 * has, and a reload of the file with a comment line added (yaml-items.ts warmVariant); their
 * results are thrown away.
 */
function warmUp(h: Running): void {
  const until = performance.now() + WARM_MS;
  const svcs = Array.isArray(h.doc.services) ? (h.doc.services as Record<string, unknown>[]) : [];
  const s = svcs.find((x) => x !== null && typeof x === 'object' && Array.isArray(x.realServers) && x.realServers.length > 0);
  const r = (s?.realServers as Record<string, unknown>[] | undefined)?.[0];
  const ops: EditOp[] =
    s && r !== null && typeof r === 'object'
      ? [
          {
            op: 'editRealServer',
            ref: { protocol: String(s.protocol ?? 'tcp'), address: String(s.address), port: Number(s.port) },
            realServer: { ...r },
          },
        ]
      : [];
  const limits = { maxServices: Number.POSITIVE_INFINITY, maxRealServers: Number.POSITIVE_INFINITY };
  for (let k = 0; k < WARM_ROUNDS && performance.now() < until; k++) {
    try {
      const edited = editDocument(cowDoc(h.doc, ops), ops, limits);
      makePatch(h, edited, validateRemembering(edited));
    } catch {
      /* a configuration this cannot edit: nothing to warm */
    }
    const variant = warmVariant();
    if (variant !== null && typeof variant === 'object' && !Array.isArray(variant)) {
      try {
        const d = variant as Record<string, unknown>;
        makePatch(h, d, validateRemembering(d));
      } catch {
        /* not valid as a whole (it is not the running document): nothing more to warm */
      }
    }
  }
}

/** Runs one job; never throws (errors are results). */
export function runJob(job: Job, table: ConnTable | null): JobResult {
  switch (job.kind) {
    case 'file': {
      if (!job.base) return fileJob(job.file, job.running ?? { doc: {}, services: [] });
      const b = baseOf(job);
      if (b === 'stale') return STALE;
      const running = { doc: b.doc, services: b.cfg.services.map((x) => ({ key: serviceKey(x), address: x.address })) };
      return patched(b, job.base.next, fileJob(job.file, running, true));
    }
    case 'edit': {
      // The services an operation touches are copied: validation remembers mappings (config.ts).
      if (!job.base) return edited(() => editDocument(cowDoc(copyDoc(job.doc), job.ops), job.ops, job.limits));
      const b = baseOf(job);
      if (b === 'stale') return STALE;
      return patched(
        b,
        job.base.next,
        edited(() => editDocument(cowDoc(b.doc, job.ops), job.ops, job.limits), true),
      );
    }
    case 'batch': {
      if (!job.base)
        return edited(() => {
          const ops = batchOps(job.body, job.doc, job.limits);
          return editDocument(cowDoc(copyDoc(job.doc), ops), ops, job.limits);
        });
      const b = baseOf(job);
      if (b === 'stale') return STALE;
      return patched(
        b,
        job.base.next,
        edited(() => {
          const ops = batchOps(job.body, b.doc, job.limits);
          return editDocument(cowDoc(b.doc, ops), ops, job.limits);
        }, true),
      );
    }
    case 'preview':
      try {
        return { ok: true, preview: preview(job, table) };
      } catch (e) {
        return { ok: false, error: toJobError(e), stage: 'request' };
      }
    case 'prime': {
      const b = baseOf(job);
      if (b === 'stale') return STALE;
      // The first change should not pay for the whole parse and validation either (at 10,000
      // services × 10 servers the first edit took 270 ms, the first reload 500): the file's
      // mappings are parsed (the reload's cache), taken as the running document's where the file
      // still says what runs, and validated once — later changes find them remembered.
      let doc = b.doc;
      try {
        const parsed = readConfigDoc(job.file);
        if (sameValue(parsed, b.doc)) doc = parsed as Record<string, unknown>;
      } catch {
        /* the reload that follows reports it */
      }
      try {
        held = { version: b.version, doc, cfg: validateRemembering(doc) };
        warmUp(held);
      } catch {
        /* keeps the configuration it was sent */
      }
      return { ok: true, json: new Uint8Array(0) };
    }
    case 'config': {
      // GET /v1/config: secrets (http-guard.ts SECRET_FIELDS) never leave the daemon.
      let doc = job.doc;
      let cfg: unknown = job.cfg;
      if (job.base) {
        const b = baseOf(job);
        if (b === 'stale') return STALE;
        doc = b.doc;
        cfg = b.cfg;
      }
      return {
        ok: true,
        json: Buffer.from(JSON.stringify({ file: job.file, document: redactSecrets(doc), effective: redactSecrets(cfg) })),
      };
    }
    case 'connections':
      try {
        if (!table) throw new UvsError('UVS_ERR_API_INTERNAL', 'no connection table');
        return { ok: true, json: Buffer.from(JSON.stringify(connectionsView({ table }, job.limit, job.offset))) };
      } catch (e) {
        return { ok: false, error: toJobError(e), stage: 'request' };
      }
  }
}
