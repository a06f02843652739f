/**
 * The OpenAPI 3.0 document of the admin API, built from the routes as fastify registers them
 * (so it cannot drift from what the daemon serves): path, method, the JSON schemas given at
 * registration (query, body: control/api-bodies.ts, the configuration's schema for services and
 * real servers), and the error shape every route shares.
 */
import type { RouteOptions } from 'fastify';

const SUMMARY: Record<string, string> = {
  'GET /v1/info': 'Daemon, device and table facts',
  'GET /v1/services': 'Virtual services with their real servers, counts, stats and rates (kernel list order)',
  'POST /v1/services': 'Add a virtual service (ipvsadm -A)',
  'DELETE /v1/services': 'Remove every virtual service (ipvsadm -C)',
  'PUT /v1/services/{protocol}/{address}/{port}': 'Edit a virtual service (ipvsadm -E)',
  'DELETE /v1/services/{protocol}/{address}/{port}': 'Remove a virtual service (ipvsadm -D; TCP servers drain first)',
  'POST /v1/services/{protocol}/{address}/{port}/realservers': 'Add a real server (ipvsadm -a)',
  'PUT /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}': 'Edit a real server (ipvsadm -e)',
  'DELETE /v1/services/{protocol}/{address}/{port}/realservers/{raddr}/{rport}':
    'Remove a real server (ipvsadm -d; drains TCP servers with connections)',
  'POST /v1/services/{protocol}/{address}/{port}/preview': 'Disruption preview: share of table slots and tracked flows a change would move',
  'POST /v1/batch': 'Apply several edit operations atomically (uvsadm -R)',
  'GET /v1/connections': 'Connection entries, paged (ipvsadm -Lnc)',
  'GET /v1/stats': 'Dataplane counters, drops by reason, workers, Redis sync',
  'GET /v1/drains': 'Real servers being drained (graceful termination)',
  'GET /v1/health': 'Health-check verdicts',
  'GET /v1/defense': 'Overload defenses: levels, trigger, what they refused (uvsadm -L --defense)',
  'GET /v1/maintenance': "This node's announcement: maintenance on or off since when, announced or not, idle time",
  'PUT /v1/maintenance': "Withdraw this node's announcement (keep forwarding), or announce again",
  'POST /v1/capture': 'Flow sampling: a pcap file or JSON lines of the packets sampled (uvsadm --capture)',
  'GET /v1/timeouts': 'tcp, tcpfin, udp timeouts (ipvsadm --timeout) and the SCTP per-state timeouts',
  'PUT /v1/timeouts': 'Set timeouts; 0 keeps a value (ipvsadm --set)',
  'POST /v1/zero': 'Zero packet, byte and connection counters (ipvsadm -Z)',
  'GET /v1/config': 'The running configuration document and its effective form',
  'POST /v1/reload': 'Re-read the configuration file (like SIGHUP)',
  'POST /v1/workers/{id}/kill': 'Terminate a dataplane worker (it is restarted; for testing)',
  'GET /v1/openapi.json': 'This document',
};

const ERROR = {
  type: 'object',
  required: ['code', 'message'],
  properties: {
    code: { type: 'string', description: 'UVS_ERR_* (docs/errors.md)' },
    message: { type: 'string' },
    path: { type: 'string' },
  },
};

export class OpenApiCollector {
  private readonly routes: { method: string; url: string; schema?: RouteOptions['schema'] }[] = [];

  onRoute = (r: RouteOptions): void => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    for (const m of methods) if (m !== 'HEAD') this.routes.push({ method: m, url: r.url, ...(r.schema ? { schema: r.schema } : {}) });
  };

  document(): Record<string, unknown> {
    const paths: Record<string, Record<string, unknown>> = {};
    for (const r of this.routes) {
      const path = r.url.replace(/:([A-Za-z]+)/g, '{$1}');
      const params = [...r.url.matchAll(/:([A-Za-z]+)/g)].map((m) => ({
        name: m[1],
        in: 'path',
        required: true,
        schema: { type: 'string' },
      }));
      const s = (r.schema ?? {}) as { querystring?: { properties?: Record<string, unknown> }; body?: { required?: string[] } };
      const query = Object.entries(s.querystring?.properties ?? {}).map(([name, schema]) => ({
        name,
        in: 'query',
        required: false,
        schema,
      }));
      const op: Record<string, unknown> = {
        summary: SUMMARY[`${r.method} ${path}`] ?? `${r.method} ${path}`,
        operationId: `${r.method.toLowerCase()}${path.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
        ...(params.length + query.length ? { parameters: [...params, ...query] } : {}),
        ...(s.body || ['POST', 'PUT'].includes(r.method)
          ? {
              requestBody: {
                required: (s.body?.required?.length ?? 0) > 0,
                content: { 'application/json': { schema: s.body ?? { type: 'object' } } },
              },
            }
          : {}),
        responses: {
          '200': { description: 'OK', content: { 'application/json': { schema: { type: 'object' } } } },
          '4XX': { description: 'Bad request, not found, conflict or unauthorized', content: { 'application/json': { schema: ERROR } } },
          '500': { description: 'Internal error (the daemon keeps running)', content: { 'application/json': { schema: ERROR } } },
        },
      };
      (paths[path] ??= {})[r.method.toLowerCase()] = op;
    }
    return {
      openapi: '3.0.3',
      info: {
        title: 'uvs admin API',
        version: '0.1.0',
        description: 'Administration of uvsd. Unix socket (root only) by default; the optional TCP listener needs a bearer token.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      paths,
    };
  }
}
