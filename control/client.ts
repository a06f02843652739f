/**
 * A tiny HTTP client for the admin API over its unix socket (uvsadm, tests, the demo). One
 * connection per request (`agent: false`): Node 20's global agent keeps sockets alive, and a
 * caller that blocks its event loop longer than fastify's keep-alive timeout would then write to a
 * socket the server already closed (EPIPE).
 */
import { request } from 'node:http';
import { DEFAULT_API_SOCKET } from './config';

export const DEFAULT_SOCKET = process.env.UVS_SOCKET ?? DEFAULT_API_SOCKET;

/** A request whose answer body is kept as bytes (a pcap file); `timeoutMs` for long requests. */
export function apiCallRaw(
  socket: string,
  method: string,
  path: string,
  body: unknown,
  timeoutMs: number,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = request(
      {
        socketPath: socket,
        agent: false,
        method,
        path,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      },
    );
    req.on('error', reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`API ${method} ${path} timed out`)));
    req.end(data);
  });
}

/** A JSON request; `T` is the route's answer (api-types.ts), or ApiError's fields when it is refused. */
/** `timeoutMs`: how long the answer may be silent (a change waits its turn and is applied whole before it answers). */
export function apiCall<T = unknown>(
  socket: string,
  method: string,
  path: string,
  body?: unknown,
  timeoutMs = 10000,
): Promise<{ status: number; body: T }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        socketPath: socket,
        agent: false,
        method,
        path,
        headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = text ? JSON.parse(text) : null;
          } catch {
            /* not JSON: keep the text */
          }
          resolve({ status: res.statusCode ?? 0, body: parsed as T });
        });
      },
    );
    req.on('error', reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`API ${method} ${path} timed out`)));
    if (data) req.write(data);
    req.end();
  });
}
