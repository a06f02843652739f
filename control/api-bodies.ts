/**
 * The admin API's request bodies, written with the schema kit (control/schema.ts). fastify gets
 * each one's JSON Schema (so `GET /v1/openapi.json` shows it) and the kit's validator in place of
 * ajv's (control/api.ts `body`): unknown fields are refused on every POST and PUT route, with the
 * field path and the reason.
 *
 * A service or real server is the configuration's own schema (control/config.ts). It is checked
 * where the edit runs (api.ts runEdits), with the operation's path: a single route and a batch
 * name a field alike (`ops[0].service.port`), and a PUT's path parameters join its body first.
 */
import { REAL_SERVER, SERVICE, timeout } from './config';
import { PROPOSED_CHANGE } from './disruption';
import { type EditOp, SERVICE_REF } from './edits';
import { any, bool, fail, int, isObj, list, obj, oneOf, opt, str, type JsonSchema } from './schema';

/** The JSON Schema of `s` without the fields a route's path gives (PUT: the service or server is named there). */
function withoutPathFields(s: JsonSchema, fields: string[], why: string): JsonSchema {
  const props = { ...(s.properties as Record<string, unknown>) };
  for (const f of fields) delete props[f];
  const required = ((s.required as string[] | undefined) ?? []).filter((f) => !fields.includes(f));
  const { required: _r, ...rest } = s;
  return { ...rest, properties: props, ...(required.length ? { required } : {}), description: why };
}

export const SERVICE_BODY = SERVICE.json;
export const SERVICE_EDIT_BODY = withoutPathFields(
  SERVICE.json,
  ['protocol', 'address', 'port'],
  'The settings to change (ipvsadm -E replaces scheduler, schedFlags, persistence and netmask); the path names the service',
);
export const REAL_SERVER_BODY = REAL_SERVER.json;
export const REAL_SERVER_EDIT_BODY = withoutPathFields(
  REAL_SERVER.json,
  ['address', 'port'],
  'The settings to change; the path names the real server',
);

/** ipvsadm --set: 0 (or absent) keeps a value. Its fields are the configuration's `timeouts`. */
export const SET_TIMEOUTS = obj({
  tcp: timeout({ default: 0, doc: 'ESTABLISHED; 0 keeps it' }),
  tcpFin: timeout({ default: 0, doc: 'FIN_WAIT; 0 keeps it' }),
  udp: timeout({ default: 0, doc: '0 keeps it' }),
});

/** The operations of a batch (control/edits.ts EditOp), with the fields each one needs. */
const OP_FIELDS = {
  addService: [['service', 'object']],
  editService: [['service', 'object']],
  deleteService: [['ref', 'object']],
  clear: [],
  addRealServer: [
    ['ref', 'object'],
    ['realServer', 'object'],
  ],
  editRealServer: [
    ['ref', 'object'],
    ['realServer', 'object'],
  ],
  deleteRealServer: [
    ['ref', 'object'],
    ['address', 'string'],
    ['port', 'number'],
  ],
  setTimeouts: [],
} satisfies Record<EditOp['op'], [string, 'object' | 'string' | 'number'][]>;
const OPS = Object.keys(OP_FIELDS) as EditOp['op'][];

const EDIT_OP = obj(
  {
    op: oneOf(OPS, { strict: true, msg: (v) => `must be one of ${OPS.join(', ')}, got ${JSON.stringify(v)}` }),
    service: opt(any<Record<string, unknown>>(SERVICE.json)),
    realServer: opt(any<Record<string, unknown>>(REAL_SERVER.json)),
    ref: opt(SERVICE_REF),
    address: opt(str({ doc: 'deleteRealServer: the real server' })),
    port: opt(int({ min: 0, max: 65535, doc: 'deleteRealServer: the real server' })),
    tcp: opt(timeout({ doc: 'setTimeouts; 0 keeps it' })),
    tcpFin: opt(timeout({ doc: 'setTimeouts; 0 keeps it' })),
    udp: opt(timeout({ doc: 'setTimeouts; 0 keeps it' })),
  },
  {
    mapping: true,
    check: (o, path, _s, raw) => {
      for (const [k, type] of OP_FIELDS[o.op]!) {
        const v = raw[k];
        const ok = type === 'object' ? isObj(v) : typeof v === type;
        if (!ok) fail(`${path}.${k}`, `is required for ${o.op} (${type === 'object' ? 'a mapping' : `a ${type}`})`);
      }
    },
  },
);

export const BATCH = obj({ ops: list(EDIT_OP, { required: true, max: 100000, doc: 'Applied in order, all or none (uvsadm -R)' }) });

/** ipvsadm -Z: all services, or one. */
export const ZERO = obj({ service: opt(SERVICE_REF) });

export const MAINTENANCE = obj({
  enabled: bool({ doc: "true: withdraw this node's announcement (keep forwarding); false: announce again" }),
});

/** A route that takes no body: any field is unknown. */
export const NO_BODY = obj({});

/** The disruption preview's proposed change: its schema is control/disruption.ts's, which the preview relies on. */
export const PREVIEW = PROPOSED_CHANGE;
