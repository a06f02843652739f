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
import { splitHostPort } from '../net/addr';
import { badHostMessage, hostGuard } from './http-guard';

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
