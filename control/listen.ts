/**
 * uvsd's TCP listeners, the parts they share: the bearer-token check, and a plain HTTP listener
 * that refuses a request naming another host before its handler runs (Host check:
 * http-guard.ts; `host:port` read by net/addr.ts's splitHostPort). The admin API (api.ts,
 * fastify) and the metrics and healthz endpoints (metrics.ts) use them; this module depends on
 * neither, nor on the daemon.
 *
 * Which listener needs a token where (docs/control-plane.md, "Admin API and the other TCP
 * listeners"): the API's always; metrics and healthz beyond loopback only (config.ts refuses a
 * configuration without one).
 */
import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { splitHostPort } from '../net/addr';
import { badHostMessage, hostGuard } from './http-guard';
import { describeHolders } from './port-holder';

/** Constant-time bearer-token check; true when no token is required. */
export function tokenOk(req: IncomingMessage, token: string | undefined): boolean {
  if (!token) return true;
  const h = req.headers.authorization ?? '';
  const given = Buffer.from(h.startsWith('Bearer ') ? h.slice(7) : '');
  const want = Buffer.from(token);
  // Compare equal-length buffers only; a length mismatch still costs one comparison.
  const same = given.length === want.length && timingSafeEqual(given, want);
  if (given.length !== want.length) timingSafeEqual(want, want);
  return same;
}

/** A listener the daemon closes when it stops. */
export interface HttpEndpoint {
  server: Server;
  close(): Promise<void>;
}

/**
 * An HTTP server on `address` (host:port, validated by config.ts) whose handler sees only
 * requests with an acceptable Host header; the others get 403 UVS_ERR_API_HOST.
 */
export function listenHttp(address: string, handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<HttpEndpoint> {
  const hp = splitHostPort(address)!;
  const hostOk = hostGuard(hp.host);
  const server = createServer((req, res) => {
    if (!hostOk(req.headers.host)) {
      res
        .writeHead(403, { 'content-type': 'application/json' })
        .end(JSON.stringify({ code: 'UVS_ERR_API_HOST', message: badHostMessage(req.headers.host ?? '') }));
      return;
    }
    handler(req, res);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(hp.port, hp.host, () => {
      server.off('error', reject);
      resolve({ server, close: () => new Promise((r) => server.close(() => r())) });
    });
  });
}

/** A TCP listener's state (GET /v1/stats `listeners`, metric uvs_listener_up). */
export interface ListenerStatus {
  /** api (api.listen), metrics or healthz. */
  name: string;
  address: string;
  listening: boolean;
  /** While another process holds the port: who (pid, command, uid), as /proc shows it. */
  heldBy: string | null;
}

/** How often a port another process holds is tried again. */
export const LISTEN_RETRY_MS = 2000;

/**
 * Opens a TCP listener that an unprivileged process may be holding already. Ports above 1023 can
 * be bound by any user, so failing the start on EADDRINUSE would let any local user keep the load
 * balancer down by binding 10249 or 10256 first; uvsd starts without the listener instead, logs
 * who holds the port (control/port-holder.ts: pid, command line, uid) and tries again every
 * LISTEN_RETRY_MS until it gets it. Any other error (an address not on this host, a privileged
 * port) is a configuration error and is thrown, failing the start as before.
 */
export async function listenOrWait(
  name: string,
  address: string,
  open: () => Promise<{ close(): Promise<void> }>,
  log: Logger,
): Promise<{ close(): Promise<void>; listeners(): ListenerStatus[] }> {
  const hp = splitHostPort(address)!;
  let server: { close(): Promise<void> } | null = null;
  let heldBy: string | null = null;
  let lastInode = -1;
  let timer: NodeJS.Timeout | null = null;
  let closed = false;
  const attempt = async (first: boolean): Promise<void> => {
    try {
      const s = await open();
      if (closed) return void (await s.close()); // uvsd stopped while this attempt ran
      server = s;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw e;
      const h = describeHolders(hp.host, hp.port, lastInode);
      if (!h.same) {
        heldBy = h.text;
        lastInode = h.inode;
        log.error(
          { listener: name, address, heldBy },
          `${name} listener: ${address} is held by another process (${heldBy}); uvsd runs without it and tries again every ${LISTEN_RETRY_MS / 1000} s`,
        );
      }
      const retry = () =>
        attempt(false).catch((err: Error) => log.error({ listener: name, address, err: err.message }, `${name} listener failed`));
      if (!closed) timer = setTimeout(() => void retry(), LISTEN_RETRY_MS);
      return;
    }
    if (!first) log.warn({ listener: name, address }, `${name} listener: ${address} is free again; listening`);
    heldBy = null;
    lastInode = -1;
  };
  await attempt(true);
  return {
    close: async () => {
      closed = true;
      if (timer) clearTimeout(timer);
      await (server as { close(): Promise<void> } | null)?.close();
    },
    listeners: () => [{ name, address, listening: server !== null, heldBy: server === null ? heldBy : null }],
  };
}
