/**
 * What every TCP listener of uvsd (admin API, metrics, healthz) checks before anything else, and
 * what GET /v1/config hides.
 *
 * DNS rebinding: a web page in a browser on the node can point its own name at 127.0.0.1 and
 * then send requests to a loopback listener; the browser still sends its own name in `Host`. So a
 * request whose Host names something other than the listener is refused (403). Accepted: the
 * listener's own address (any IP literal for a wildcard listener: an attacker's page cannot have
 * an IP literal rebind), `localhost` for loopback and wildcard listeners, the name the listener
 * was configured with, and this node's hostname for wildcard listeners. A request without Host
 * (HTTP/1.0) is accepted: browsers always send one. The unix socket is not checked (root only).
 *
 * Content type: fastify parses text/plain by default, and a browser sends a cross-origin POST
 * with text/plain without asking first (a CORS "simple request"). The API takes bodies only as
 * application/json, which a browser cannot send cross-origin without a preflight uvsd never
 * answers (see api.ts).
 */
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { canonAddr } from '../net/addr';

const WILDCARD = new Set(['0.0.0.0', '::', '']);

function loopbackAddr(h: string): boolean {
  return h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** The host part of a Host header, lower-case, without port, brackets or a final dot. */
export function hostOfHeader(v: string): string {
  const s = v.trim().toLowerCase();
  const m = /^\[([^\]]*)\](?::\d*)?$/.exec(s);
  const h = m ? m[1]! : s.replace(/:\d*$/, '');
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

/** A predicate over Host headers for a listener bound to `listenHost` (as configured, brackets removed). */
export function hostGuard(listenHost: string): (host: string | undefined) => boolean {
  const bound = listenHost.toLowerCase();
  const boundIp = isIP(bound) ? (canonAddr(bound) as string) : null;
  const wildcard = WILDCARD.has(bound);
  const loop = boundIp !== null ? loopbackAddr(boundIp) : bound === 'localhost';
  const names = new Set<string>();
  if (boundIp === null && !wildcard) names.add(bound);
  if (loop || wildcard) names.add('localhost');
  if (wildcard) names.add(hostname().toLowerCase());
  return (header) => {
    if (header === undefined) return true;
    const h = hostOfHeader(header);
    if (isIP(h)) {
      if (wildcard) return true;
      const c = canonAddr(h) as string;
      return c === boundIp || (loop && loopbackAddr(c));
    }
    return names.has(h);
  };
}

/** Message of a refused Host (code UVS_ERR_API_HOST). */
export function badHostMessage(header: string): string {
  return `Host ${JSON.stringify(header)} does not name this listener (DNS rebinding protection): use its address`;
}

/**
 * Fields that hold secrets, as paths in the configuration document and in the effective
 * configuration alike. GET /v1/config replaces their values; add every new secret here.
 */
export const SECRET_FIELDS = ['api.token', 'metrics.token', 'healthz.token', 'redis.password', 'redis.recordKey', 'defense.synProxyKey'];

export const REDACTED = '<redacted>';

/** A copy of a configuration (document or effective) with every secret replaced; a password in a redis URL too. */
export function redactSecrets<T>(v: T): T {
  if (typeof v !== 'object' || v === null) return v;
  const out = structuredClone(v) as Record<string, unknown>;
  for (const path of SECRET_FIELDS) {
    const parts = path.split('.');
    let o: unknown = out;
    for (const p of parts.slice(0, -1)) o = typeof o === 'object' && o !== null ? (o as Record<string, unknown>)[p] : undefined;
    const last = parts[parts.length - 1]!;
    if (typeof o === 'object' && o !== null && (o as Record<string, unknown>)[last] !== undefined)
      (o as Record<string, unknown>)[last] = REDACTED;
  }
  const redis = out.redis as Record<string, unknown> | undefined | null;
  if (redis && typeof redis.url === 'string') redis.url = redis.url.replace(/^(rediss?:\/\/)[^@/]*@/, `$1${REDACTED}@`);
  return out as T;
}
