/**
 * The admin API (fastify). Listens on a unix socket that only root can use (directory 0700,
 * socket 0600); nothing listens on the network unless configured. Every error answer is
 * { code, message } with a code from errors.ts.
 */
import { chmodSync, existsSync, mkdirSync, statSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import * as L from '../conntrack/layout';
import { canonAddr, splitHostPort } from '../net/addr';
import type {
  AppliedResponse,
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
import type { Applied, Daemon } from './daemon';
import { OpenApiCollector } from './openapi';
import { listenOrWait, tokenOk, type ListenerStatus } from './listen';
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
import type { EditOp, ServiceRef } from './edits';
import { CAPTURE, type CaptureRequest } from './capture';
import { memoryView } from './memory';
import { healthzView } from './metrics';
import { ERRORS, UvsError, type ErrorCode } from './errors';
import { badHostMessage, hostGuard } from './http-guard';
import { serviceKey, type ListedService } from './services';
import { RATE_PERIOD_MS } from './stats';
import { run, type JsonSchema, type Schema } from './schema';
import { controlThreadView, runSliced, Slicer } from './slices';

export interface ApiServer {
  close(): Promise<void>;
  /** The TCP listener's state (api.listen), if one is configured. */
  listeners(): ListenerStatus[];
}

/** One service of GET /v1/services, with its counters and rates. */
function serviceView(d: Daemon, s: ListedService): ServicesResponse['services'][number] {
  return {
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
  };
}

/**
 * GET /v1/services (ServicesResponse) as JSON text, built one service at a time in slices
 * (control/slices.ts): 1023 services and 4096 real servers are 2 MB of JSON, which took 160 ms of
 * the control thread in one piece.
 */
export async function servicesJson(d: Daemon): Promise<string> {
  const parts: string[] = [];
  const sl = new Slicer('services');
  for (const s of d.model.eachService()) {
    parts.push(JSON.stringify(serviceView(d, s)));
    if (sl.due()) await sl.pause();
  }
  const text = `{"tableSize":${d.cfg.dataplane.tableSize},"services":[${parts.join(',')}]}`;
  sl.end();
  return text;
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
    node: { replies: d.dataplane.replies(), repairs: { ...d.dataplane.repairs() } },
    nodestExpired: d.stats.word(L.C_NODEST_EXPIRED),
    shadows: d.table.shadows(),
    adopted: d.stats.word(L.C_ADOPTED),
    proxyProtocolHeaders: d.stats.word(L.C_PP_HEADERS),
    proxyProtocolSynData: d.stats.word(L.C_PP_SYN_DATA),
    sloppyConnections: d.stats.word(L.C_SLOPPY),
    parked: d.stats.word(L.C_PARKED),
    parkFull: d.stats.word(L.C_PARK_FULL),
    synProxyHeld: d.stats.word(L.C_SP_HELD),
    syncRingFull: d.stats.word(L.C_SYNC_RING_FULL),
    redis: d.sync ? { ...d.sync.stats, nodes: d.sync.remoteNodes, heldNodes: d.sync.heldNodes } : null,
    draining: d.model.drains().length,
    reloads: d.reloads,
    stateFileSkipped: d.stateSkipped,
    defense: defenseView(d),
    announce: d.announcer.status(),
    listeners: d.listenerStatus(),
    controlThread: controlThreadView(),
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
  app.get('/v1/services', async (_req, reply) => reply.type('application/json; charset=utf-8').send(await servicesJson(d)));
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
    // The walk and the rows are the control worker's (a full table: tens of ms and more).
    async (req, reply) => {
      const q = req.query as { limit?: number; offset?: number };
      return reply.type('application/json; charset=utf-8').send(bytes(await d.connectionsJson(q.limit ?? 1000, q.offset ?? 0)));
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
  // Secrets (tokens, the Redis password: http-guard.ts SECRET_FIELDS) never leave the daemon.
  // The copy, its redaction and its JSON are the control worker's (ConfigResponse).
  app.get('/v1/config', async (_req, reply) => reply.type('application/json; charset=utf-8').send(bytes(await d.configJson())));

  const applied = (r: Applied, reply: FastifyReply) =>
    r.ok ? reply.send({ ok: true, version: r.version } satisfies AppliedResponse) : reply.status(r.error.status).send(r.error.toJSON());
  // The operations, their limits, each one's service or real server and the whole result are
  // checked by the control worker (control/offload-jobs.ts), in that order.
  const runEdits = async (ops: EditOp[], reply: FastifyReply) => applied(await d.edit(ops), reply);
  const refFrom = (p: { protocol: string; address: string; port: string }): ServiceRef => ({
    protocol: p.protocol,
    address: canonAddr(p.address) as string,
    port: Number(p.port),
  });
  // Bodies whose size the caller chooses reach the control worker as bytes: parsing 64 MB of
  // JSON here would hold this thread for seconds. fastify still limits their size, takes only
  // application/json, and shows their schema in the OpenAPI document.
  app.register(async (raw) => {
    raw.removeContentTypeParser('application/json');
    raw.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, b, done) => done(null, b));
    const asBytes = (json: JsonSchema) => ({ schema: { body: json }, validatorCompiler: () => () => true });
    raw.post(
      '/v1/batch',
      { bodyLimit: 64 << 20, ...asBytes(BATCH.json) }, // a large uvsadm -R (≈ 130 bytes an operation)
      async (req, reply) => applied(await d.batch(req.body as Buffer), reply),
    );
    // Disruption preview: what share of table slots and tracked flows a change would move.
    raw.post(
      '/v1/services/:protocol/:address/:port/preview',
      asBytes(PREVIEW.json),
      async (req): Promise<PreviewResponse> =>
        d.preview(refFrom(req.params as { protocol: string; address: string; port: string }), req.body as Buffer),
    );
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
    const list = d.model.counterSlots(ref && serviceKey(ref));
    if (ref && list.length === 0) throw new UvsError('UVS_ERR_API_NOT_FOUND', `no service ${serviceKey(ref)}`, 'service');
    for (const s of list) {
      d.stats.zeroService(s.slot);
      for (const r of s.realServers) d.stats.zeroRealServer(r);
    }
    return { ok: true, zeroed: list.length };
  });

  app.post('/v1/reload', body(NO_BODY, '', 'UVS_ERR_API_BAD_REQUEST'), async (_req, reply) => applied(await d.reload(), reply));
  // Flow sampling: answers when the capture ends (seconds or maxPackets), with the pcap file or
  // the JSON lines as the body.
  app.post('/v1/capture', body(CAPTURE, 'capture', 'UVS_ERR_API_BAD_REQUEST'), async (req, reply) => {
    const r = await d.capture.run(req.body as CaptureRequest);
    reply.header('content-type', r.format === 'pcap' ? 'application/vnd.tcpdump.pcap' : 'application/x-ndjson');
    reply.header('x-uvs-capture-packets', String(r.packets));
    reply.header('x-uvs-capture-overruns', String(r.overruns));
    reply.header('content-length', String(r.bytes));
    // Streamed chunk by chunk: one Buffer.concat of ~165 MB would hold this thread ~50 ms.
    return reply.send(Readable.from(r.body, { objectMode: false }));
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

/** A Buffer over the control worker's answer, without a copy. */
function bytes(u: Uint8Array): Buffer {
  return Buffer.from(u.buffer, u.byteOffset, u.byteLength);
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
 * The counter blocks whose rates the estimator follows (ipvsadm --rate): every listed service and
 * real server, read as the estimator goes (110,000 bases built first took ~40 ms in one piece).
 */
function* rateBlocks(d: Daemon): Generator<number> {
  for (const s of d.model.eachCounterSlots()) {
    yield d.stats.serviceBase(s.slot);
    for (const x of s.dests) yield d.stats.realServerBase(x.rs);
  }
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
  // In slices: 110,000 blocks at 10,000 services × 10 servers (stats.ts estimateSteps).
  let estimating = false;
  const estimator = setInterval(() => {
    if (estimating) return;
    estimating = true;
    void runSliced('estimate', d.stats.estimateSteps(rateBlocks(d))).finally(() => (estimating = false));
  }, RATE_PERIOD_MS);
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
