/**
 * The admin API (fastify). Listens on a unix socket that only root can use (directory 0700,
 * socket 0600); nothing listens on the network unless configured. Every error answer is
 * { code, message } with a code from errors.ts.
 */
import { chmodSync, existsSync, mkdirSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import * as L from '../conntrack/layout';
import { TCP_STATE_NAMES } from '../conntrack/state';
import { formatIPv4 } from '../lb/addr';
import type { Daemon } from './daemon';
import { ERRORS, UvsError } from './errors';

export interface ApiServer {
  close(): Promise<void>;
}

const PROTO_NAME: Record<number, string> = { 6: 'TCP', 17: 'UDP' };

export function connectionsView(d: Daemon, limit: number, offset: number) {
  const t = d.table;
  const a = t.i32;
  const now = t.now();
  const rows: {
    protocol: string;
    client: string;
    virtual: string;
    realServer: string;
    state: string;
    expiresIn: number;
    inactive: boolean;
  }[] = [];
  let total = 0;
  t.forEach((_e, o) => {
    total++;
    if (total <= offset || rows.length >= limit) return;
    const proto = a[o + L.E_PROTO]!;
    const cports = a[o + L.E_CPORTS]!;
    const dports = a[o + L.E_DPORTS]!;
    rows.push({
      protocol: PROTO_NAME[proto] ?? String(proto),
      client: `${formatIPv4(a[o + L.E_CADDR]!)}:${cports >>> 16}`,
      virtual: `${formatIPv4(a[o + L.E_VADDR]!)}:${cports & 0xffff}`,
      realServer: `${formatIPv4(a[o + L.E_DADDR]!)}:${dports >>> 16}`,
      state: proto === 6 ? TCP_STATE_NAMES[a[o + L.E_STATE]!]! : 'UDP',
      expiresIn: Math.max(0, ((a[o + L.E_EXPIRES]! - now) | 0) / 1000),
      inactive: (a[o + L.E_FLAGS]! & L.F_INACTIVE) !== 0,
    });
  });
  return { total, offset, connections: rows };
}

export function servicesView(d: Daemon) {
  return {
    tableSize: d.cfg.dataplane.tableSize,
    services: d.model.list().map((s) => ({
      name: s.cfg.name,
      protocol: s.cfg.protocol,
      address: s.cfg.address,
      port: s.cfg.port,
      scheduler: s.cfg.scheduler,
      schedFlags: s.cfg.schedFlags,
      persistence: 0,
      stats: d.stats.service(s.slot),
      realServers: s.realServers.map((r) => ({ ...r, stats: d.stats.realServer(r.slot) })),
    })),
  };
}

export function drainsView(d: Daemon) {
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

export function statsView(d: Daemon) {
  return {
    uptime: (Date.now() - d.startedAt) / 1000,
    table: { entries: d.table.count(), capacity: d.table.capacity, expired: d.expiredTotal },
    packets: d.stats.global(),
    drops: d.stats.drops(),
    workers: d.dataplane.workerInfo().map((w, i) => ({ ...w, ...d.stats.perWorker()[i] })),
    nodestExpired: d.stats.word(L.C_NODEST_EXPIRED),
    draining: d.model.drains().length,
    reloads: d.reloads,
  };
}

export function buildApi(d: Daemon, log: Logger): FastifyInstance {
  const app = Fastify({ logger: false });
  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof UvsError) return reply.status(err.status).send(err.toJSON());
    const e = err as { validation?: unknown; statusCode?: number; message: string };
    if (e.validation || (e.statusCode && e.statusCode < 500)) {
      return reply.status(e.statusCode ?? 400).send({ code: 'UVS_ERR_API_BAD_REQUEST', message: e.message });
    }
    log.error({ err: e.message }, 'API handler failed');
    return reply.status(500).send({ code: 'UVS_ERR_API_INTERNAL', message: ERRORS.UVS_ERR_API_INTERNAL.message });
  });
  app.setNotFoundHandler((req, reply) => {
    reply.status(404).send({ code: 'UVS_ERR_API_NOT_FOUND', message: `no route ${req.method} ${req.url}` });
  });

  app.get('/v1/info', async () => ({
    name: 'uvs',
    version: '0.1.0',
    device: d.cfg.dataplane.device,
    workers: d.cfg.dataplane.workers,
    tableSize: d.cfg.dataplane.tableSize,
    configFile: d.configFile,
  }));
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
  app.get('/v1/health', async () => ({ checks: d.health.states() }));
  app.get('/v1/timeouts', async () => ({
    tcp: d.cfg.timeouts.tcp.ESTABLISHED,
    tcpFin: d.cfg.timeouts.tcp.FIN_WAIT,
    udp: d.cfg.timeouts.udp,
  }));
  app.post('/v1/reload', async (_req, reply) => {
    const r = d.reload();
    if (!r.ok) return reply.status(r.error.status).send(r.error.toJSON());
    return { ok: true, version: r.version };
  });
  app.post('/v1/workers/:id/kill', async (req, reply) => {
    const id = Number((req.params as { id: string }).id);
    if (!Number.isInteger(id) || !(await d.dataplane.killWorker(id))) {
      throw new UvsError('UVS_ERR_API_NOT_FOUND', `no running worker ${(req.params as { id: string }).id}`);
    }
    return reply.status(202).send({ ok: true, worker: id });
  });
  return app;
}

export async function startApi(d: Daemon, socket: string, log: Logger): Promise<ApiServer> {
  const app = buildApi(d, log);
  const dir = dirname(socket);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (existsSync(socket)) unlinkSync(socket); // a stale socket of a dead daemon
  await app.listen({ path: socket });
  chmodSync(socket, 0o600);
  log.info({ socket }, 'API listening');
  return {
    close: async () => {
      await app.close();
      if (existsSync(socket)) unlinkSync(socket);
    },
  };
}
