/**
 * The admin API (fastify). Listens on a unix socket that only root can use (directory 0700,
 * socket 0600); nothing listens on the network unless configured. Every error answer is
 * { code, message } with a code from errors.ts.
 */
import { chmodSync, existsSync, mkdirSync, statSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import * as L from '../conntrack/layout';
import { SCTP_STATE_NAMES } from '../conntrack/sctp-state';
import { TCP_STATE_NAMES } from '../conntrack/state';
import { canonAddr, hostPort, splitHostPort } from '../net/addr';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../net/packet';
import { protoLabel } from '../net/proto';
import { entryAddr } from '../conntrack/table';
import type {
  AppliedResponse,
  ConfigResponse,
  ConnectionsResponse,
  ConnectionStatus,
  DefenseResponse,
  DrainsResponse,
  HealthResponse,
  HealthzResponse,
  InfoResponse,
  KillWorkerResponse,
  MaintenanceResponse,
  PreviewResponse,
  ServicesResponse,
  StatsResponse,
  TimeoutsResponse,
  ZeroResponse,
} from './api-types';
import type { Daemon } from './daemon';
import { OpenApiCollector } from './openapi';
import { listenOrWait, tokenOk, type ListenerStatus } from './listen';
import { DEFAULT_PROTOCOL, validateRealServer, validateService } from './config';
import {
  BATCH,
  MAINTENANCE,
  NO_BODY,
  PREVIEW,
  REAL_SERVER_BODY,
  REAL_SERVER_EDIT_BODY,
  SERVICE_BODY,
  SERVICE_EDIT_BODY,
  SET_TIMEOUTS,
  ZERO,
} from './api-bodies';
import { applyEdits, type EditOp, type ServiceRef } from './edits';
import { PreviewError, previewDisruption, type PreviewFlow, type ProposedChange } from './disruption';
import { CAPTURE, type CaptureRequest } from './capture';
import { memoryView } from './memory';
import { healthzView } from './metrics';
import { ERRORS, UvsError, type ErrorCode } from './errors';
import { badHostMessage, hostGuard, redactSecrets } from './http-guard';
import { serviceKey } from './services';
import { RATE_PERIOD_MS } from './stats';
import { run, type JsonSchema, type Schema } from './schema';

export interface ApiServer {
  close(): Promise<void>;
  /** The TCP listener's state (api.listen), if one is configured. */
  listeners(): ListenerStatus[];
}

export function connectionsView(d: Daemon, limit: number, offset: number): ConnectionsResponse {
  const t = d.table;
  const a = t.i32;
  const now = t.now();
  const rows: ConnectionStatus[] = [];
  let total = 0;
  t.forEach((_e, o) => {
    total++;
    if (total <= offset || rows.length >= limit) return;
    const proto = a[o + L.E_PROTO]! & 0xff;
    const cports = a[o + L.E_CPORTS]!;
    const dports = a[o + L.E_DPORTS]!;
    rows.push({
      protocol: protoLabel(proto),
      client: hostPort(entryAddr(a, o, L.E_CADDR), cports >>> 16),
      virtual: hostPort(entryAddr(a, o, L.E_VADDR), cports & 0xffff),
      realServer: hostPort(entryAddr(a, o, L.E_DADDR), dports >>> 16),
      // Templates: ip_vs_state_name()'s template names (ip_vs_proto.c), not the protocol's.
      state:
        a[o + L.E_FLAGS]! & L.F_TEMPLATE
          ? a[o + L.E_STATE]! & L.CTPL_ASSURED
            ? 'ASSURED'
            : 'NONE'
          : proto === IPPROTO_TCP
            ? TCP_STATE_NAMES[a[o + L.E_STATE]!]!
            : proto === IPPROTO_SCTP
              ? SCTP_STATE_NAMES[a[o + L.E_STATE]!]!
              : 'UDP',
      expiresIn: Math.max(0, ((a[o + L.E_EXPIRES]! - now) | 0) / 1000),
      inactive: (a[o + L.E_FLAGS]! & L.F_INACTIVE) !== 0,
      shadow: (a[o + L.E_FLAGS]! & L.F_SHADOW) !== 0,
    });
  });
  return { total, offset, connections: rows };
}

export function servicesView(d: Daemon): ServicesResponse {
  return {
    tableSize: d.cfg.dataplane.tableSize,
    services: d.model.list().map((s) => ({
      name: s.cfg.name,
      protocol: s.cfg.protocol,
      address: s.cfg.address,
      port: s.cfg.port,
      scheduler: s.cfg.scheduler,
      schedFlags: s.cfg.schedFlags,
      persistence: s.cfg.persistence,
      netmask: s.cfg.netmask,
      stats: d.stats.service(s.slot),
      rates: d.stats.rates(d.stats.serviceBase(s.slot)),
      realServers: s.realServers.map((r) => ({
        ...r,
        stats: d.stats.realServer(r.slot),
        rates: d.stats.rates(d.stats.realServerBase(r.slot)),
      })),
    })),
  };
}

export function drainsView(d: Daemon): DrainsResponse {
  const now = Date.now();
  return {
    checkInterval: d.cfg.gracefulTermination.checkInterval,
    draining: d.model.drains().map((x) => ({
      service: x.service,
      realServer: x.realServer,
      since: new Date(x.since).toISOString(),
      drainingFor: (now - x.since) / 1000,
      deadline: x.deadline === null ? null : new Date(x.deadline).toISOString(),
      activeConns: x.activeConns,
      inactConns: x.inactConns,
    })),
  };
}

export function statsView(d: Daemon): StatsResponse {
  return {
    uptime: (Date.now() - d.startedAt) / 1000,
    memory: memoryView(),
    table: { entries: d.table.count(), capacity: d.table.capacity, expired: d.expiredTotal },
    packets: d.stats.global(),
    drops: d.stats.drops(),
    generated: d.stats.generated(),
    chains: { max: d.stats.maxWord(L.C_CHAIN_MAX), long: d.stats.word(L.C_LONG_CHAINS) },
    workers: d.dataplane.workerInfo().map((w, i) => ({ ...w, ...d.stats.perWorker()[i]! })), // one counter region per worker
    steering: d.dataplane.steering(),
    nodestExpired: d.stats.word(L.C_NODEST_EXPIRED),
    shadows: d.table.shadows(),
    adopted: d.stats.word(L.C_ADOPTED),
    proxyProtocolHeaders: d.stats.word(L.C_PP_HEADERS),
    proxyProtocolSynData: d.stats.word(L.C_PP_SYN_DATA),
    parked: d.stats.word(L.C_PARKED),
    parkFull: d.stats.word(L.C_PARK_FULL),
    synProxyHeld: d.stats.word(L.C_SP_HELD),
    syncRingFull: d.stats.word(L.C_SYNC_RING_FULL),
    redis: d.sync ? { ...d.sync.stats, nodes: d.sync.remoteNodes } : null,
    draining: d.model.drains().length,
    reloads: d.reloads,
    stateFileSkipped: d.stateSkipped,
    defense: defenseView(d),
    announce: d.announcer.status(),
    listeners: d.listenerStatus(),
  };
}

/** Overload defenses (GET /v1/defense, uvsadm -L --defense): levels, trigger, what they did. */
export function defenseView(d: Daemon): DefenseResponse {
  const drops = d.stats.drops();
  return {
    ...d.defense.view(),
    refused: {
      dropPacket: drops.defense_drop_packet ?? 0,
      halfOpenPerSource: drops.half_open_per_source ?? 0,
      tableFull: drops.table_full ?? 0,
      fullnatPortsExhausted: drops.fullnat_ports_exhausted ?? 0,
    },
    synProxyCounts: {
      cookies: d.stats.word(L.C_GEN_BASE + L.GEN_SYN_ACK * L.GEN_RESULTS + L.GEN_SENT),
      accepted: d.stats.word(L.C_SP_ACCEPTED),
      badCookies: drops.bad_cookie ?? 0,
      held: d.stats.word(L.C_SP_HELD),
      heldRefused: d.stats.word(L.C_SP_HELD_REFUSED),
      serverFailures: d.stats.word(L.C_SP_SERVER_FAIL),
    },
  };
}

/** `tcp`: the TCP listener's bound host (Host header check, http-guard.ts) and its bearer token; absent for the unix socket. */
export function buildApi(d: Daemon, log: Logger, tcp?: { host: string; token: string }): FastifyInstance {
  const app = Fastify({ logger: false });
  const openapi = new OpenApiCollector();
  app.addHook('onRoute', openapi.onRoute);
  app.get('/v1/openapi.json', async () => openapi.document());
  // Bodies only as JSON: fastify's default text/plain parser would let a browser page post
  // cross-origin without a preflight (http-guard.ts).
  app.removeContentTypeParser('text/plain');
  if (tcp !== undefined) {
    const hostOk = hostGuard(tcp.host);
    const token = tcp.token;
    app.addHook('onRequest', async (req, reply) => {
      if (!hostOk(req.headers.host)) {
        return reply
          .status(ERRORS.UVS_ERR_API_HOST.status)
          .send({ code: 'UVS_ERR_API_HOST', message: badHostMessage(req.headers.host ?? '') });
      }
      if (!tokenOk(req.raw, token)) {
        return reply.status(401).send({ code: 'UVS_ERR_API_UNAUTHORIZED', message: ERRORS.UVS_ERR_API_UNAUTHORIZED.message });
      }
    });
  }
  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof UvsError) return reply.status(err.status).send(err.toJSON());
    const e = err as { validation?: unknown; statusCode?: number; message: string; code?: string };
    if (e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      return reply.status(ERRORS.UVS_ERR_API_CONTENT_TYPE.status).send({
        code: 'UVS_ERR_API_CONTENT_TYPE',
        message: `${ERRORS.UVS_ERR_API_CONTENT_TYPE.message}, got ${JSON.stringify(_req.headers['content-type'] ?? 'none')}`,
      });
    }
    if (e.validation || (e.statusCode && e.statusCode < 500)) {
      return reply.status(e.statusCode ?? 400).send({ code: 'UVS_ERR_API_BAD_REQUEST', message: e.message });
    }
    log.error({ err: e.message }, 'API handler failed');
    return reply.status(500).send({ code: 'UVS_ERR_API_INTERNAL', message: ERRORS.UVS_ERR_API_INTERNAL.message });
  });
  app.setNotFoundHandler((req, reply) => {
    reply.status(404).send({ code: 'UVS_ERR_API_NOT_FOUND', message: `no route ${req.method} ${req.url}` });
  });

  app.get(
    '/v1/info',
    async (): Promise<InfoResponse> => ({
      name: 'uvs',
      version: '0.1.0',
      device: d.cfg.dataplane.device,
      workers: d.cfg.dataplane.workers,
      tableSize: d.cfg.dataplane.tableSize,
      configFile: d.configFile,
    }),
  );
  // Health on the root-only socket: only uvsd can answer here (keepalived's track script asks
  // this, not the healthz TCP port, which any local user may hold while uvsd is down).
  for (const path of ['/healthz', '/livez']) {
    app.get(path, async (_req, reply): Promise<HealthzResponse> => {
      const h = healthzView(d);
      return reply.status(h.status).send(h.body);
    });
  }
  app.get('/v1/services', async () => servicesView(d));
  app.get(
    '/v1/connections',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { limit: { type: 'integer', minimum: 1, maximum: 100000 }, offset: { type: 'integer', minimum: 0 } },
        },
      },
    },
    async (req) => {
      const q = req.query as { limit?: number; offset?: number };
      return connectionsView(d, q.limit ?? 1000, q.offset ?? 0);
    },
  );
  app.get('/v1/stats', async () => statsView(d));
  app.get('/v1/drains', async () => drainsView(d));
  app.get('/v1/defense', async () => defenseView(d));
  app.get('/v1/health', async (): Promise<HealthResponse> => ({ checks: d.health.states() }));
  app.get(
    '/v1/timeouts',
    async (): Promise<TimeoutsResponse> => ({
      tcp: d.cfg.timeouts.tcp.ESTABLISHED!, // every TCP state has a timeout (the schema's defaults)
      tcpFin: d.cfg.timeouts.tcp.FIN_WAIT!,
      udp: d.cfg.timeouts.udp,
      sctp: d.cfg.timeouts.sctp, // uvs: seconds per SCTP state (ipvsadm --timeout prints the first three)
    }),
  );
  // Disruption preview: what share of table slots and tracked flows a change would move.
  app.post(
    '/v1/services/:protocol/:address/:port/preview',
    body(PREVIEW, 'change', 'UVS_ERR_API_BAD_REQUEST'),
    async (req): Promise<PreviewResponse> => {
      const p = req.params as { protocol: string; address: string; port: string };
      const svc = d.model
        .list()
        .find((s) => s.key === serviceKey({ protocol: p.protocol, address: canonAddr(p.address) as string, port: Number(p.port) }));
      if (!svc) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${p.protocol} ${p.address}:${p.port}`);
      const change = req.body as Record<string, unknown>;
      // A service never holds more than maxRealServers: a longer list is refused before any work.
      for (const k of ['delete', 'setWeight', 'add'] as const) {
        const v = change[k];
        if (Array.isArray(v) && v.length > d.cfg.dataplane.maxRealServers) {
          throw new UvsError(
            'UVS_ERR_API_TOO_LARGE',
            `${v.length} entries, more than dataplane.maxRealServers (${d.cfg.dataplane.maxRealServers})`,
            k,
          );
        }
      }
      const flows: PreviewFlow[] = [];
      const t = d.table;
      const a = t.i32;
      t.forEach((_e, o) => {
        if (a[o + L.E_SVC] !== svc.slot || a[o + L.E_FLAGS]! & L.F_TEMPLATE) return;
        flows.push({
          client: entryAddr(a, o, L.E_CADDR),
          clientPort: a[o + L.E_CPORTS]! >>> 16,
          realServer: `${entryAddr(a, o, L.E_DADDR)}:${a[o + L.E_DPORTS]! >>> 16}`,
        });
      });
      try {
        return previewDisruption(
          {
            address: svc.cfg.address,
            port: svc.cfg.port,
            scheduler: svc.cfg.scheduler,
            flags: svc.cfg.schedFlags,
            ...(svc.cfg.mhTableSize !== undefined ? { mhTableSize: svc.cfg.mhTableSize } : {}),
            realServers: svc.realServers.map((r) => ({
              address: r.address,
              port: r.port,
              weight: r.weight,
              lastWeight: r.lastWeight,
              overloaded: r.overloaded,
            })),
          },
          change as ProposedChange,
          flows,
        );
      } catch (e) {
        if (e instanceof PreviewError) throw new UvsError('UVS_ERR_API_BAD_REQUEST', e.reason, e.path);
        throw e;
      }
    },
  );

  // Secrets (tokens, the Redis password: http-guard.ts SECRET_FIELDS) never leave the daemon.
  app.get(
    '/v1/config',
    async (): Promise<ConfigResponse> => ({ file: d.configFile, document: redactSecrets(d.doc), effective: redactSecrets(d.cfg) }),
  );

  const runEdits = (ops: EditOp[], reply: import('fastify').FastifyReply) => {
    // Limits before any work: a batch that must fail on them costs O(ops), not a validation of
    // everything it would have built (100 000 additions over maxServices used to be refused last).
    checkBatchLimits(d, ops);
    // Each operation's body is checked by the configuration schema first, so errors name it (the
    // operations' own shape is the route's body schema: BATCH, or the route's own operation).
    ops.forEach((o, i) => {
      if (o.op === 'addService' || o.op === 'editService') validateService(o.service, `ops[${i}].service`);
      if (o.op === 'addRealServer' || o.op === 'editRealServer')
        validateRealServer(o.realServer, `ops[${i}].realServer`, o.ref.port, 'masq');
    });
    const r = d.edit((doc) => applyEdits(doc, ops));
    if (!r.ok) return reply.status(r.error.status).send(r.error.toJSON());
    return reply.send({ ok: true, version: r.version } satisfies AppliedResponse);
  };
  app.post(
    '/v1/batch',
    {
      bodyLimit: 64 << 20, // a large uvsadm -R (≈ 130 bytes an operation)
      // The limits first, before the body schema checks every operation: a batch that must be
      // refused for its size costs one pass over the operations, not their validation.
      preValidation: async (req) => {
        const ops = (req.body as { ops?: unknown } | null)?.ops;
        if (Array.isArray(ops)) checkBatchLimits(d, ops as EditOp[]);
      },
      ...body(BATCH, '', 'UVS_ERR_API_BAD_REQUEST'),
    },
    async (req, reply) => runEdits((req.body as { ops: EditOp[] }).ops, reply),
  );
  const refFrom = (p: { protocol: string; address: string; port: string }): ServiceRef => ({
    protocol: p.protocol,
    address: canonAddr(p.address) as string,
    port: Number(p.port),
  });
  app.post('/v1/services', editBody(SERVICE_BODY), async (req, reply) =>
    runEdits([{ op: 'addService', service: req.body as Record<string, unknown> }], reply),
  );
  app.delete('/v1/services', async (_req, reply) => runEdits([{ op: 'clear' }], reply));
  app.put('/v1/services/:protocol/:address/:port', editBody(SERVICE_EDIT_BODY), async (req, reply) => {
    const ref = refFrom(req.params as { protocol: string; address: string; port: string });
    return runEdits(
      [
        {
          op: 'editService',
          service: { ...(req.body as Record<string, unknown>), protocol: ref.protocol, address: ref.address, port: ref.port },
        },
      ],
      reply,
    );
  });
  app.delete('/v1/services/:protocol/:address/:port', async (req, reply) =>
    runEdits([{ op: 'deleteService', ref: refFrom(req.params as { protocol: string; address: string; port: string }) }], reply),
  );
  app.post('/v1/services/:protocol/:address/:port/realservers', editBody(REAL_SERVER_BODY), async (req, reply) =>
    runEdits(
      [
        {
          op: 'addRealServer',
          ref: refFrom(req.params as { protocol: string; address: string; port: string }),
          realServer: req.body as Record<string, unknown>,
        },
      ],
      reply,
    ),
  );
  app.put('/v1/services/:protocol/:address/:port/realservers/:raddr/:rport', editBody(REAL_SERVER_EDIT_BODY), async (req, reply) => {
    const p = req.params as { protocol: string; address: string; port: string; raddr: string; rport: string };
    return runEdits(
      [
        {
          op: 'editRealServer',
          ref: refFrom(p),
          realServer: { ...(req.body as Record<string, unknown>), address: p.raddr, port: Number(p.rport) },
        },
      ],
      reply,
    );
  });
  app.delete('/v1/services/:protocol/:address/:port/realservers/:raddr/:rport', async (req, reply) => {
    const p = req.params as { protocol: string; address: string; port: string; raddr: string; rport: string };
    return runEdits([{ op: 'deleteRealServer', ref: refFrom(p), address: p.raddr, port: Number(p.rport) }], reply);
  });
  app.put('/v1/timeouts', body(SET_TIMEOUTS, 'timeouts', 'UVS_ERR_CONFIG_INVALID'), async (req, reply) => {
    const b = req.body as { tcp: number; tcpFin: number; udp: number };
    return runEdits([{ op: 'setTimeouts', tcp: b.tcp, tcpFin: b.tcpFin, udp: b.udp }], reply);
  });
  app.post('/v1/zero', body(ZERO, '', 'UVS_ERR_API_BAD_REQUEST'), async (req): Promise<ZeroResponse> => {
    // ipvsadm -Z: packet, byte and connection counters start again from zero (all services, or one).
    const b = req.body as { service?: ServiceRef };
    // Any spelling of an IPv6 address finds the service, as every other lookup (refFrom) does.
    const ref = b.service ? { ...b.service, address: canonAddr(b.service.address) as string } : undefined;
    const list = d.model.list().filter((s) => !ref || s.key === serviceKey(ref));
    if (ref && list.length === 0) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${serviceKey(ref)}`, 'service');
    for (const s of list) {
      d.stats.zeroService(s.slot);
      for (const r of s.realServers) d.stats.zeroRealServer(r.slot);
    }
    return { ok: true, zeroed: list.length };
  });

  app.post('/v1/reload', body(NO_BODY, '', 'UVS_ERR_API_BAD_REQUEST'), async (_req, reply) => {
    const r = d.reload();
    if (!r.ok) return reply.status(r.error.status).send(r.error.toJSON());
    return { ok: true, version: r.version } satisfies AppliedResponse;
  });
  // Flow sampling: answers when the capture ends (seconds or maxPackets), with the pcap file or
  // the JSON lines as the body.
  app.post('/v1/capture', body(CAPTURE, 'capture', 'UVS_ERR_API_BAD_REQUEST'), async (req, reply) => {
    const r = await d.capture.run(req.body as CaptureRequest);
    reply.header('content-type', r.format === 'pcap' ? 'application/vnd.tcpdump.pcap' : 'application/x-ndjson');
    reply.header('x-uvs-capture-packets', String(r.packets));
    reply.header('x-uvs-capture-overruns', String(r.overruns));
    return reply.send(r.body);
  });
  // Node maintenance (control/announce.ts): withdraw this node's announcement, keep forwarding.
  app.get('/v1/maintenance', async (): Promise<MaintenanceResponse> => d.announcer.status());
  app.put('/v1/maintenance', body(MAINTENANCE, '', 'UVS_ERR_API_BAD_REQUEST'), async (req) =>
    d.setMaintenance((req.body as { enabled: boolean }).enabled),
  );
  app.post('/v1/workers/:id/kill', body(NO_BODY, '', 'UVS_ERR_API_BAD_REQUEST'), async (req, reply) => {
    const id = Number((req.params as { id: string }).id);
    if (!Number.isInteger(id) || !(await d.dataplane.killWorker(id))) {
      throw new UvsError('UVS_ERR_API_NOT_FOUND', `no running worker ${(req.params as { id: string }).id}`);
    }
    return reply.status(202).send({ ok: true, worker: id } satisfies KillWorkerResponse);
  });
  return app;
}

/**
 * A route's request body: fastify gets its JSON Schema (the route's OpenAPI body) and, in place of
 * ajv's, a validator from the schema kit that answers with uvs's messages (`at` prefixes the
 * field paths, `code` is the error's). The handler gets the parsed body, defaults filled.
 */
function body(s: Schema<unknown>, at: string, code: ErrorCode) {
  return {
    schema: { body: s.json },
    validatorCompiler: () => (data: unknown) => {
      try {
        return { value: run(s, data, at, code) };
      } catch (e) {
        return { error: e as Error };
      }
    },
  };
}

/**
 * A service or real-server body: the configuration's schema, shown as the route's body and
 * checked by runEdits (validateService, validateRealServer) once the path parameters have joined
 * it, with the operation's path (ops[0].service.port), as a batch's operation is.
 */
function editBody(json: JsonSchema) {
  return { schema: { body: json }, validatorCompiler: () => () => true };
}

/**
 * Refuses (413) a batch whose result must exceed dataplane.maxServices or maxRealServers, from
 * the counts alone: services and real servers the running document has, plus those the batch
 * adds, minus those it deletes. Draining servers take slots too, so this only ever refuses what
 * the full check would also refuse; it just refuses it first.
 */
function checkBatchLimits(d: Daemon, ops: EditOp[]): void {
  const rsCount = (list: unknown) => (Array.isArray(list) ? list.length : 0);
  const key = (r: { protocol?: unknown; address?: unknown; port?: unknown } | undefined) =>
    `${String(r?.protocol ?? DEFAULT_PROTOCOL)} ${String(canonAddr(r?.address))}:${String(r?.port)}`;
  const count = new Map<string, number>(); // service → real servers
  const svcs = (d.doc as { services?: unknown } | null)?.services;
  if (Array.isArray(svcs))
    for (const s of svcs as Record<string, unknown>[]) if (s && typeof s === 'object') count.set(key(s), rsCount(s.realServers));
  for (const o of ops) {
    if (o === null || typeof o !== 'object') continue; // not an operation: the body schema refuses it
    const k = o.op === 'addService' || o.op === 'editService' ? key(o.service) : 'ref' in o ? key(o.ref) : '';
    if (o.op === 'clear') count.clear();
    else if (o.op === 'addService') count.set(k, rsCount(o.service?.realServers));
    else if (o.op === 'deleteService') count.delete(k);
    else if (o.op === 'addRealServer' && count.has(k)) count.set(k, count.get(k)! + 1);
    else if (o.op === 'deleteRealServer' && count.has(k)) count.set(k, Math.max(0, count.get(k)! - 1));
  }
  const dp = d.cfg.dataplane;
  if (count.size > dp.maxServices)
    throw new UvsError(
      'UVS_ERR_API_TOO_LARGE',
      `the batch would leave ${count.size} services, more than dataplane.maxServices (${dp.maxServices})`,
      'ops',
    );
  let rs = 0;
  for (const n of count.values()) rs += n;
  if (rs > dp.maxRealServers)
    throw new UvsError(
      'UVS_ERR_API_TOO_LARGE',
      `the batch would leave ${rs} real servers, more than dataplane.maxRealServers (${dp.maxRealServers})`,
      'ops',
    );
}

/** The counter blocks whose rates the estimator follows (ipvsadm --rate): every listed service and real server. */
function rateBlocks(d: Daemon): number[] {
  return d.model.list().flatMap((s) => [d.stats.serviceBase(s.slot), ...s.realServers.map((r) => d.stats.realServerBase(r.slot))]);
}

export async function startApi(d: Daemon, socket: string, log: Logger, tcp?: { listen: string; token?: string }): Promise<ApiServer> {
  const app = buildApi(d, log);
  let tcpListener: Awaited<ReturnType<typeof listenOrWait>> | null = null;
  if (tcp?.listen) {
    const hp = splitHostPort(tcp.listen)!;
    const host = hp.host.replace(/^\[|\]$/g, '');
    // Loopback too: any local user (or a browser page) reaches a loopback port; root-only is the socket.
    if (!tcp.token) throw new UvsError('UVS_ERR_CONFIG_INVALID', `refusing to serve the API on ${tcp.listen} without a token`, 'api.token');
    const token = tcp.token;
    tcpListener = await listenOrWait(
      'api',
      tcp.listen,
      async () => {
        const tcpApp = buildApi(d, log, { host, token });
        try {
          await tcpApp.listen({ host, port: hp.port });
        } catch (e) {
          await tcpApp.close();
          throw e;
        }
        log.info({ listen: tcp.listen, token: 'required' }, 'API listening on TCP');
        return { close: () => tcpApp.close() };
      },
      log,
    );
  }
  const dir = dirname(socket);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // keepalived's track script trusts a /healthz answer on this socket because only uvsd's user
  // can create it (docs/failover.md): not so in a directory someone else owns or may write.
  const ds = statSync(dir);
  if (ds.uid !== process.getuid?.() || (ds.mode & 0o022) !== 0)
    log.warn(
      { dir, uid: ds.uid, mode: (ds.mode & 0o777).toString(8) },
      'the API socket directory is not ours alone: another user could listen in uvsd’s place while it is down (answers there prove nothing)',
    );
  if (existsSync(socket)) unlinkSync(socket); // a stale socket of a dead daemon
  await app.listen({ path: socket });
  chmodSync(socket, 0o600);
  log.info({ socket }, 'API listening');
  const estimator = setInterval(() => d.stats.estimate(rateBlocks(d)), RATE_PERIOD_MS);
  estimator.unref();
  return {
    close: async () => {
      clearInterval(estimator);
      await tcpListener?.close();
      await app.close();
      if (existsSync(socket)) unlinkSync(socket);
    },
    listeners: () => tcpListener?.listeners() ?? [],
  };
}
