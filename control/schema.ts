/**
 * The schema kit. The configuration (control/config.ts) and the admin API's request bodies
 * (control/api-bodies.ts) are each written once with these builders, and every schema gives:
 *   - its TypeScript type: `Out<typeof X>`;
 *   - its validator, `X.parse(value, path, scope)`: uvs's messages, naming the field path
 *     ("services[0].port: must be between 1 and 65535, got 0"), the first error in document order,
 *     unknown fields refused with the allowed ones listed;
 *   - its defaults, filled by the validator and shown in the JSON Schema;
 *   - its JSON Schema, `X.json` (the OpenAPI 3.0 dialect): fastify takes it as a route's body
 *     schema, so `GET /v1/openapi.json` shows every request body as uvsd checks it.
 *
 * Why not TypeBox + ajv, the pair fastify is usually given: (1) the messages are a contract
 * (docs/errors.md, the tests, uvsadm's output) and ajv's (`/services/0/port must be <= 65535`)
 * would need a translation per keyword that still loses the allowed field list and the value
 * given; (2) most fields are not plain JSON values: durations ("15m" → 900), addresses written
 * one way (RFC 5952), `persistence: true` → 360, `proxyProtocol: none` → absent, and defaults
 * that come from another field (a real server's port is its service's; the defense thresholds
 * scale with the table). TypeBox expresses those as Transform types decoded in a second pass, so
 * each such field would again be written twice. The kit is about 200 lines, has no dependency,
 * and fastify takes what it makes as it takes TypeBox's: a JSON Schema on the route and a
 * validator from the route's validatorCompiler (control/api.ts).
 *
 * A check that involves several fields (vipCidrs against the services, forwarding against
 * proxyProtocol) is the `check` of the object that holds them: one place per rule.
 */
import { UvsError, type ErrorCode } from './errors';

/** A JSON Schema object (OpenAPI 3.0 dialect: `nullable`, no type arrays). */
export type JsonSchema = { [k: string]: unknown };

/**
 * The object being built while its fields are parsed, in schema order: a default or a check may
 * read the fields before its own (`out`) and the objects around it (`up`; lists add no level).
 */
export interface Scope {
  readonly out: Record<string, unknown>;
  readonly up: Scope | null;
}

export interface Schema<T, Opt extends boolean = boolean> {
  readonly json: JsonSchema;
  /** The field may be absent from the output (parse gives undefined). */
  readonly optional: Opt;
  /** The field must be given (no default, not optional): JSON Schema `required`. */
  readonly required: boolean;
  /** Checks `v` and returns its value with the defaults filled; throws SchemaError. */
  parse(v: unknown, path: string, scope: Scope | null): T;
}

export type Out<S> = S extends Schema<infer T, boolean> ? T : never;

/** What parse throws: a field path and the reason; run() turns it into a UvsError with a code. */
export class SchemaError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(path ? `${path}: ${reason}` : reason);
  }
}

export function fail(path: string, reason: string): never {
  throw new SchemaError(path, reason);
}

/** Parses `v` at `path`; a schema error becomes a UvsError with `code` (other errors pass through). */
export function run<T>(s: Schema<T>, v: unknown, path = '', code: ErrorCode = 'UVS_ERR_CONFIG_INVALID', scope: Scope | null = null): T {
  try {
    return s.parse(v, path, scope);
  } catch (e) {
    if (e instanceof SchemaError) throw new UvsError(code, e.reason, e.path || undefined);
    throw e;
  }
}

export function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export const at = (path: string, key: string): string => (path ? `${path}.${key}` : key);

// ── leaves ───────────────────────────────────────────────────────────────────────────────────
/** A default: a value, or a function of the object being built (`scope`, null at the top). */
export type Default<T> = T | ((scope: Scope | null) => T);

export interface LeafOpts<T> {
  doc?: string;
  default?: Default<T>;
  /** A rule beyond the type (power of two, at least 0.1 s…): fail(path, reason) to refuse. */
  check?: (v: T, path: string, scope: Scope | null) => void;
}

/**
 * A leaf: `take` turns a given value into T or fails; absent → the default, or "is required".
 * `check` sees defaults too: a rule may involve another field (a health check's default timeout
 * of 1 s must still fit an interval of 0.5 s).
 */
export function leaf<T>(
  json: JsonSchema,
  take: (v: unknown, path: string, scope: Scope | null) => T,
  o: LeafOpts<T> = {},
): Schema<T, false> {
  const def = o.default;
  const out: JsonSchema = { ...json };
  if (o.doc) out.description = o.doc;
  if (def !== undefined && typeof def !== 'function') out.default = def;
  return {
    json: out,
    optional: false,
    required: def === undefined,
    parse(v, path, scope) {
      let x: T;
      if (v !== undefined) x = take(v, path, scope);
      else if (def === undefined) fail(path, 'is required');
      else x = typeof def === 'function' ? (def as (s: Scope | null) => T)(scope) : def;
      o.check?.(x, path, scope);
      return x;
    },
  };
}

/** A bound that may depend on other fields (defense thresholds are at most the table size). */
export type Bound = number | ((scope: Scope | null) => number);

export function int(o: LeafOpts<number> & { min: number; max: Bound }): Schema<number, false> {
  const json: JsonSchema = { type: 'integer', minimum: o.min, ...(typeof o.max === 'number' ? { maximum: o.max } : {}) };
  return leaf(
    json,
    (v, path, scope) => {
      if (typeof v !== 'number' || !Number.isInteger(v)) fail(path, `must be an integer, got ${JSON.stringify(v)}`);
      const max = typeof o.max === 'number' ? o.max : o.max(scope);
      if (v < o.min || v > max) fail(path, `must be between ${o.min} and ${max}, got ${v}`);
      return v;
    },
    o,
  );
}

export function bool(o: LeafOpts<boolean> = {}): Schema<boolean, false> {
  return leaf({ type: 'boolean' }, (v, path) => (typeof v === 'boolean' ? v : fail(path, 'must be true or false')), o);
}

/** A non-empty string; with `empty`, '' too (an "off" value: `metrics.address: ''`). */
export function str(o: LeafOpts<string> & { empty?: boolean; minLength?: number; pattern?: string } = {}): Schema<string, false> {
  const json: JsonSchema = {
    type: 'string',
    ...(o.empty ? {} : { minLength: o.minLength ?? 1 }),
    ...(o.pattern ? { pattern: o.pattern } : {}),
  };
  return leaf(json, (v, path) => takeStr(v, path, o.empty === true), o);
}

export function takeStr(v: unknown, path: string, empty = false): string {
  if (typeof v !== 'string' || (v.length === 0 && !empty)) fail(path, 'must be a non-empty string');
  return v;
}

/**
 * One of `values`. `strict`: anything else (a number too) gets `msg`; otherwise a non-string is
 * first refused as "must be a non-empty string", as a name field's value.
 */
export function oneOf<const V extends string>(
  values: readonly V[],
  o: LeafOpts<V> & { msg: (got: unknown) => string; strict?: boolean },
): Schema<V, false> {
  return leaf(
    { type: 'string', enum: [...values] },
    (v, path) => {
      if (!o.strict) takeStr(v, path);
      if (!(values as readonly unknown[]).includes(v)) fail(path, o.msg(v));
      return v as V;
    },
    o,
  );
}

/** Any value, checked elsewhere (documented here by `json`): a batch operation's service body. */
export function any<T = unknown>(json: JsonSchema, o: LeafOpts<T> = {}): Schema<T, false> {
  return leaf(json, (v) => v as T, o);
}

// ── combinators ──────────────────────────────────────────────────────────────────────────────
/** The field may be absent: parse gives undefined and the key is left out. */
export function opt<T>(s: Schema<T>): Schema<T | undefined, true> {
  return {
    json: s.json,
    optional: true,
    required: false,
    parse: (v, path, scope) => (v === undefined ? undefined : s.parse(v, path, scope)),
  };
}

/** null (or absent) → null: a section that is off (`redis: null`). */
export function nullable<T>(s: Schema<T>): Schema<T | null, false> {
  return {
    json: { ...s.json, nullable: true },
    optional: false,
    required: false,
    parse: (v, path, scope) => (v === undefined || v === null ? null : s.parse(v, path, scope)),
  };
}

/** A different output from the same input: `f` reshapes what `s` parsed (durations → a map). */
export function map<T, U, O extends boolean>(s: Schema<T, O>, f: (v: T, path: string, scope: Scope | null) => U): Schema<U, O> {
  return { ...s, parse: (v, path, scope) => f(s.parse(v, path, scope), path, scope) };
}

export function list<T>(
  item: Schema<T>,
  o: {
    doc?: string;
    msg?: string;
    /** At least one entry; absent gets `msg` too. */
    nonEmpty?: boolean;
    /** Absent is refused ("is required"); otherwise absent is `default`, or an empty list. */
    required?: boolean;
    default?: Default<T[]>;
    max?: number;
    check?: (v: T[], path: string, scope: Scope | null) => void;
  } = {},
): Schema<T[], false> {
  const msg = o.msg ?? 'must be a list';
  const json: JsonSchema = {
    type: 'array',
    items: item.json,
    ...(o.nonEmpty ? { minItems: 1 } : {}),
    ...(o.max !== undefined ? { maxItems: o.max } : {}),
  };
  if (o.doc) json.description = o.doc;
  const def: Default<T[]> | undefined = o.nonEmpty || o.required ? undefined : (o.default ?? (() => []));
  if (def !== undefined && typeof def !== 'function') json.default = def;
  return {
    json,
    optional: false,
    required: def === undefined,
    parse(v, path, scope) {
      if (v === undefined && def !== undefined) return typeof def === 'function' ? def(scope) : [...def];
      // A missing non-empty list gets the list's own message ("must be a non-empty list of …").
      if (v === undefined && !o.nonEmpty) fail(path, 'is required');
      if (!Array.isArray(v) || (o.nonEmpty && v.length === 0)) fail(path, msg);
      if (o.max !== undefined && v.length > o.max) fail(path, `must have at most ${o.max} entries, got ${v.length}`);
      const out = v.map((x, i) => item.parse(x, `${path}[${i}]`, scope));
      o.check?.(out, path, scope);
      return out;
    },
  };
}

type Fields = Record<string, Schema<unknown>>;
type Flat<T> = { [K in keyof T]: T[K] } & {};
/** The parsed object: optional fields become optional keys. */
export type ObjOut<F extends Fields> = Flat<
  { [K in keyof F as F[K]['optional'] extends true ? never : K]: Out<F[K]> } & {
    [K in keyof F as F[K]['optional'] extends true ? K : never]?: Out<F[K]>;
  }
>;

export interface ObjOpts<F extends Fields> {
  doc?: string;
  /**
   * Whole-object rules, after the fields: `raw` is the mapping as given (to tell an absent
   * field from its default). `scope` is the object's own (`scope.up`: the one around it).
   */
  check?: (v: ObjOut<F>, path: string, scope: Scope, raw: Record<string, unknown>) => void;
  /** Must be given as a mapping (a list entry); otherwise absent or null is an empty mapping (a section left out). */
  mapping?: boolean;
  /** Fields a former release had: refused with this message (what replaced them), not "unknown". */
  retired?: Record<string, string>;
}

/** A mapping with exactly these fields, parsed in this order; any other field is refused. */
export function obj<F extends Fields>(fields: F, o: ObjOpts<F> = {}): Schema<ObjOut<F>, false> {
  const keys = Object.keys(fields);
  const required = keys.filter((k) => fields[k]!.required);
  const json: JsonSchema = {
    type: 'object',
    additionalProperties: false,
    properties: Object.fromEntries(keys.map((k) => [k, fields[k]!.json])),
    ...(required.length ? { required } : {}),
  };
  if (o.doc) json.description = o.doc;
  const allowed = keys.length ? keys.join(', ') : 'none';
  return {
    json,
    optional: false,
    required: o.mapping === true || required.length > 0,
    parse(v, path, up) {
      if ((v === undefined || v === null) && !o.mapping) v = {};
      if (!isObj(v)) fail(path, 'must be a mapping');
      for (const k of Object.keys(v)) {
        if (Object.hasOwn(fields, k)) continue;
        const gone = o.retired && Object.hasOwn(o.retired, k) ? o.retired[k] : undefined;
        fail(at(path, k), gone ?? `unknown field (allowed: ${allowed})`);
      }
      const out: Record<string, unknown> = {};
      const scope: Scope = { out, up };
      for (const k of keys) {
        const x = fields[k]!.parse(v[k], at(path, k), scope);
        if (x !== undefined) out[k] = x;
      }
      o.check?.(out as ObjOut<F>, path, scope, v);
      return out as ObjOut<F>;
    },
  };
}
