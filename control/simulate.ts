/**
 * uvs simulate: runs a scenario through the dataplane's scheduler code and prints, for each
 * `connect`, the real server the kernel would pick. Reads the scenario (JSON) on stdin (or from a
 * file argument), writes one JSON line per connect or preview event; a bad scenario prints nothing
 * on stdout, one error naming the field on stderr, and exits 2.
 *
 * Imports only the schedulers and small pure modules (no daemon, fastify, pino, yaml or ioredis):
 * it must start in well under half a second.
 *
 * Scenario:
 *   {"scheduler":"mh","flags":["mh-port"],"protocol":"tcp",
 *    "service":{"address":"10.96.0.10","port":80},
 *    "persistence":0,"netmask":"255.255.255.255","mhTableSize":4093,"seed":1,
 *    "expireQuiescentTemplate":false,
 *    "realServers":[{"address":"10.0.0.1","port":80,"weight":1,"upper":0,"lower":0}],
 *    "events":[{"connect":{"client":"192.168.1.100","clientPort":40000}}, {"finish":0},
 *      {"expire":0}, {"add":{"address":"10.0.0.2","port":80,"weight":2}},
 *      {"setWeight":{"realServer":"10.0.0.1:80","weight":0}}, {"delete":"10.0.0.2:80"},
 *      {"setThresholds":{"realServer":"10.0.0.1:80","upper":2,"lower":1}}, {"advance":30},
 *      {"preview":{"delete":["10.0.0.1:80"],"add":[{"address":"10.0.0.3","port":80,"weight":1}],
 *                  "setWeight":[{"realServer":"10.0.0.2:80","weight":3}],
 *                  "scheduler":"mh","flags":[],"mhTableSize":8191}}]}
 * Defaults: scheduler wlc, protocol tcp, persistence 0 (seconds; none), netmask all ones (IPv6: a
 * prefix length, 128), mhTableSize 4093, seed 0, real-server port = service port, weight 1,
 * thresholds 0. IPv6 works throughout (same family everywhere); endpoints print as "[addr]:port".
 *
 * Output: {"event":N,"realServer":"10.0.0.1:80"|null,"connect":K} per connect (N = index in
 * events, K = connect number); {"event":N,"scheduler":…,"slots":…,"slotsChanged":…,
 * "slotsMoved":share|null,"flows":…,"flowsChanged":…,"flowsMoved":share} per preview
 * (control/disruption.ts; the change is not applied).
 *
 * Semantics (the kernel's, as the contract in issue 3 states them):
 *  - The service starts empty at t = 0; realServers are added one at a time in array order, as
 *    -a commands (each at the head of the list), so scheduler state evolves through those adds.
 *  - TCP connect = handshake at that instant: ActiveConn + 1, expires 900 s later; UDP = one
 *    datagram: InActConn + 1, expires 300 s later. Timers are never refreshed (no other packets).
 *  - finish K (TCP): full close, TIME_WAIT, Active − 1, InAct + 1, expires 120 s after; no-op for
 *    UDP, a null connect, a gone or an already finished connection. expire K: the timer fires now.
 *    K counts every connect from 0; K beyond the connects so far is an error.
 *  - Persistence: one template per masked client address; a template whose server is deleted (or
 *    has weight 0 with expireQuiescentTemplate) is invalidated when next looked up and never
 *    matched again, but keeps counting until its timer; otherwise its server is used even at
 *    weight 0 or OVERLOAD. Each connection through a template re-arms it to now + its timeout; a
 *    template whose timer fires while it controls a connection is re-armed for 60 s, and 60 s
 *    stays its timeout (ip_vs_conn_expire).
 *  - advance S: timers due at or before the new time fire in time order; at the same instant
 *    connections first, then templates, then the lblc/lblcr collector (every 60 s from t = 0).
 *  - add of a deleted address:port revives the same server (the trash) with its counters,
 *    connections and flags; setWeight / setThresholds are -e keeping the other settings.
 */
import { readFileSync } from 'node:fs';
import * as L from '../conntrack/layout';
import { TCP_DEFAULT_TIMEOUTS, TCP_ESTABLISHED, TCP_TIME_WAIT, UDP_DEFAULT_TIMEOUT } from '../conntrack/state';
import { MH_PRIMES } from '../schedulers/mh';
import { DEFAULT_SCHEDULER, flagScheduler, getScheduler, SCHED_FLAG_NAMES, schedulerNames } from '../schedulers/registry';
import { flagBits, PreviewError, previewDisruption, type PreviewFlow, type ProposedChange } from './disruption';
import { fold, formatEndpoint, formatInet, maskPrefix, maskV4, parseEndpoint, parseInet, type Inet } from '../net/addr';
import { SchedModel, type ModelServer } from './sched-model';

export class ScenarioError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path}: ${reason}`);
  }
}

type Obj = Record<string, unknown>;

function fail(path: string, reason: string): never {
  throw new ScenarioError(path, reason);
}

function obj(v: unknown, path: string, allowed: string[]): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(path, 'must be an object');
  for (const k of Object.keys(v))
    if (!allowed.includes(k)) fail(path ? `${path}.${k}` : k, `unknown field (allowed: ${allowed.join(', ')})`);
  return v as Obj;
}

function int(v: unknown, path: string, min: number, max: number, def?: number): number {
  if (v === undefined && def !== undefined) return def;
  if (v === undefined) fail(path, 'is required');
  if (typeof v !== 'number' || !Number.isInteger(v)) fail(path, `must be an integer, got ${JSON.stringify(v)}`);
  if (v < min || v > max) fail(path, `must be between ${min} and ${max}, got ${v}`);
  return v;
}

function str(v: unknown, path: string): string {
  if (typeof v !== 'string' || v.length === 0) fail(path, `must be a non-empty string, got ${JSON.stringify(v)}`);
  return v;
}

function flagList(v: unknown, path: string, scheduler: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) fail(path, 'must be a list');
  return v.map((f, i) => {
    if (typeof f !== 'string' || !SCHED_FLAG_NAMES.includes(f))
      fail(`${path}[${i}]`, `must be one of ${SCHED_FLAG_NAMES.join(', ')}, got ${JSON.stringify(f)}`);
    const needs = flagScheduler(f);
    if (needs !== null && scheduler !== needs) fail(`${path}[${i}]`, `${f} needs scheduler ${needs} (the scheduler is ${scheduler})`);
    return f;
  });
}

function schedulerName(v: unknown, path: string): string {
  const s = str(v, path);
  if (!getScheduler(s)) fail(path, `unknown scheduler ${JSON.stringify(s)} (available: ${schedulerNames().join(', ')})`);
  return s;
}

function mhSize(v: unknown, path: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !MH_PRIMES.includes(v))
    fail(path, `must be one of ${MH_PRIMES.join(', ')} (the kernel's mh table sizes), got ${JSON.stringify(v)}`);
  return v;
}

const EVENT_TYPES = ['connect', 'finish', 'expire', 'add', 'setWeight', 'delete', 'setThresholds', 'advance', 'preview'];

const TCP_EST_MS = TCP_DEFAULT_TIMEOUTS[TCP_ESTABLISHED]! * 1000;
const TCP_TW_MS = TCP_DEFAULT_TIMEOUTS[TCP_TIME_WAIT]! * 1000;
const UDP_MS = UDP_DEFAULT_TIMEOUT * 1000;
/** ip_vs_conn_expire: a template still controlling connections is looked at again 60 s later. */
const TEMPLATE_RECHECK_MS = 60_000;

interface Conn {
  index: number;
  key: string;
  server: ModelServer;
  /** Counted in ActiveConn (TCP before finish), else InActConn. */
  active: boolean;
  finished: boolean;
  gone: boolean;
  gen: number;
  template: Template | null;
}

interface Template {
  key: string;
  server: ModelServer;
  timeoutMs: number;
  nControl: number;
  gone: boolean;
  gen: number;
}

const K_CONN = 0;
const K_TEMPLATE = 1;
const K_COLLECTOR = 2;

interface Timer {
  at: number;
  kind: number;
  seq: number;
  gen: number;
  ref: Conn | Template | null;
}

/** Min-heap of timers by (time, kind, arming order). */
class Timers {
  private h: Timer[] = [];
  private seq = 0;

  private static less(a: Timer, b: Timer): boolean {
    return a.at !== b.at ? a.at < b.at : a.kind !== b.kind ? a.kind < b.kind : a.seq < b.seq;
  }

  push(at: number, kind: number, ref: Conn | Template | null, gen: number): void {
    const h = this.h;
    const t: Timer = { at, kind, seq: this.seq++, gen, ref };
    let i = h.length;
    h.push(t);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!Timers.less(t, h[p]!)) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = t;
  }

  peek(): Timer | undefined {
    return this.h[0];
  }

  pop(): Timer {
    const h = this.h;
    const top = h[0]!;
    const last = h.pop()!;
    const n = h.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const c = l + 1 < n && Timers.less(h[l + 1]!, h[l]!) ? l + 1 : l;
        if (!Timers.less(h[c]!, last)) break;
        h[i] = h[c]!;
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}

class Simulation {
  private t = 0;
  readonly out: string[] = [];
  private readonly model: SchedModel;
  private readonly conns: (Conn | null)[] = [];
  /** Live connections by client endpoint. */
  private readonly tracked = new Map<string, Conn>();
  /** Matchable templates by masked client address (invalidated ones live on, unreachable, until their timer). */
  private readonly templates = new Map<string, Template>();
  private readonly timers = new Timers();

  constructor(
    readonly scheduler: string,
    readonly flags: string[],
    readonly mhTableSize: number | undefined,
    readonly tcp: boolean,
    readonly service: Inet,
    readonly port: number,
    readonly persistenceMs: number,
    readonly mask: (a: Inet) => Inet,
    readonly expireQuiescentTemplate: boolean,
    seed: number,
  ) {
    this.model = new SchedModel(scheduler, flagBits(flags), mhTableSize);
    this.model.scheduler.seed?.(this.model.state, this.model.base, seed);
    const every = this.model.scheduler.tickInterval;
    if (every !== undefined) this.timers.push(every, K_COLLECTOR, null, 0);
  }

  private listedServer(text: unknown, path: string): ModelServer {
    const e = parseEndpoint(str(text, path));
    if (!e) fail(path, `must be "address:port" ("[v6]:port" for IPv6), got ${JSON.stringify(text)}`);
    const s = this.model.servers.get(formatEndpoint(e.addr, e.port));
    if (!s?.listed) fail(path, `${formatEndpoint(e.addr, e.port)} is not in the real-server list`);
    return s;
  }

  address(v: unknown, path: string): Inet {
    const a = parseInet(str(v, path));
    if (!a) fail(path, `must be an IPv4 or IPv6 address, got ${JSON.stringify(v)}`);
    if (a.family !== this.service.family)
      fail(path, `must be an IPv${this.service.family} address like the service's, got ${JSON.stringify(v)}`);
    return a;
  }

  add(v: unknown, path: string): void {
    const r = obj(v, path, ['address', 'port', 'weight', 'upper', 'lower']);
    const addr = this.address(r.address, `${path}.address`);
    const port = int(r.port, `${path}.port`, 0, 65535, this.port);
    const weight = int(r.weight, `${path}.weight`, 0, 65535, 1);
    const upper = int(r.upper, `${path}.upper`, 0, 0x7fffffff, 0);
    const lower = int(r.lower, `${path}.lower`, 0, 0x7fffffff, 0);
    if (lower > upper) fail(`${path}.lower`, `must not exceed upper (${upper}), as in the kernel`);
    const key = formatEndpoint(addr, port);
    if (this.model.servers.get(key)?.listed) fail(path, `${key} is already in the real-server list`);
    this.model.add(addr, port, weight, upper, lower);
  }

  private arm(c: Conn, at: number): void {
    this.timers.push(at, K_CONN, c, ++c.gen);
  }

  private armTemplate(tp: Template, at: number): void {
    this.timers.push(at, K_TEMPLATE, tp, ++tp.gen);
  }

  connect(v: unknown, path: string, event: number): void {
    const c = obj(v, path, ['client', 'clientPort']);
    const client = this.address(c.client, `${path}.client`);
    const cport = int(c.clientPort, `${path}.clientPort`, 0, 65535);
    const key = formatEndpoint(client, cport);
    const prior = this.tracked.get(key);
    if (prior) fail(`${path}.clientPort`, `${key} already has a tracked connection (connect ${prior.index})`);
    const index = this.conns.length;
    const input = { caddr: fold(client), cport, vaddr: fold(this.service), vport: this.port, now: this.t | 0 };
    let server: ModelServer | null;
    let template: Template | null = null;
    if (this.persistenceMs > 0) {
      const tkey = formatInet(this.mask(client));
      template = this.templates.get(tkey) ?? null;
      if (template && !(template.server.listed && !(this.expireQuiescentTemplate && template.server.weight === 0))) {
        // ip_vs_check_template: invalidated for good (no longer matchable); it dies at its timer.
        this.templates.delete(tkey);
        template = null;
      }
      if (template) server = template.server;
      else {
        server = this.model.schedule(input);
        if (server) {
          template = { key: tkey, server, timeoutMs: this.persistenceMs, nControl: 0, gone: false, gen: 0 };
          this.templates.set(tkey, template);
          this.model.bind(server, L.RS_PERSIST);
        }
      }
    } else {
      server = this.model.schedule(input);
    }
    if (server === null) {
      this.conns.push(null);
    } else {
      const conn: Conn = { index, key, server, active: this.tcp, finished: false, gone: false, gen: 0, template };
      this.conns.push(conn);
      this.tracked.set(key, conn);
      this.model.bind(server, this.tcp ? L.RS_ACTIVE : L.RS_INACTIVE);
      this.arm(conn, this.t + (this.tcp ? TCP_EST_MS : UDP_MS));
      if (template) {
        template.nControl++;
        this.armTemplate(template, this.t + template.timeoutMs);
      }
    }
    this.out.push(JSON.stringify({ event, realServer: server ? server.key : null, connect: index }));
  }

  private connArg(v: unknown, path: string): Conn | null {
    const k = int(v, path, 0, Number.MAX_SAFE_INTEGER);
    if (k >= this.conns.length) fail(path, `connection ${k} does not exist: ${this.conns.length} connect event(s) so far`);
    const c = this.conns[k]!;
    return c && !c.gone ? c : null;
  }

  finish(v: unknown, path: string): void {
    const c = this.connArg(v, path);
    if (!c || !this.tcp || c.finished) return;
    c.finished = true;
    c.active = false;
    this.model.move(c.server, L.RS_ACTIVE, L.RS_INACTIVE);
    this.arm(c, this.t + TCP_TW_MS);
  }

  private expireConn(c: Conn): void {
    c.gone = true;
    this.tracked.delete(c.key);
    this.model.unbind(c.server, c.active ? L.RS_ACTIVE : L.RS_INACTIVE);
    if (c.template) c.template.nControl--;
  }

  expire(v: unknown, path: string): void {
    const c = this.connArg(v, path);
    if (c) this.expireConn(c);
  }

  private fireTemplate(tp: Template): void {
    if (tp.nControl > 0) {
      tp.timeoutMs = TEMPLATE_RECHECK_MS;
      this.armTemplate(tp, this.t + TEMPLATE_RECHECK_MS);
      return;
    }
    tp.gone = true;
    if (this.templates.get(tp.key) === tp) this.templates.delete(tp.key);
    this.model.unbind(tp.server, L.RS_PERSIST);
  }

  advance(v: unknown, path: string): void {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) fail(path, `must be a number of seconds ≥ 0, got ${JSON.stringify(v)}`);
    const target = this.t + Math.round(v * 1000);
    for (let top = this.timers.peek(); top !== undefined && top.at <= target; top = this.timers.peek()) {
      const e = this.timers.pop();
      this.t = e.at;
      if (e.kind === K_COLLECTOR) {
        const m = this.model;
        m.scheduler.tick!(m.svc, m.state, m.base, m.rs, this.t | 0);
        this.timers.push(this.t + m.scheduler.tickInterval!, K_COLLECTOR, null, 0);
        continue;
      }
      const ref = e.ref!;
      if (ref.gone || ref.gen !== e.gen) continue; // re-armed since, or already gone
      if (e.kind === K_CONN) this.expireConn(ref as Conn);
      else this.fireTemplate(ref as Template);
    }
    this.t = target;
  }

  setWeight(v: unknown, path: string): void {
    const u = obj(v, path, ['realServer', 'weight']);
    const s = this.listedServer(u.realServer, `${path}.realServer`);
    const weight = int(u.weight, `${path}.weight`, 0, 65535);
    this.model.edit(s, weight, s.upper, s.lower);
  }

  setThresholds(v: unknown, path: string): void {
    const u = obj(v, path, ['realServer', 'upper', 'lower']);
    const s = this.listedServer(u.realServer, `${path}.realServer`);
    const upper = int(u.upper, `${path}.upper`, 0, 0x7fffffff);
    const lower = int(u.lower, `${path}.lower`, 0, 0x7fffffff);
    if (lower > upper) fail(`${path}.lower`, `must not exceed upper (${upper}), as in the kernel`);
    this.model.edit(s, s.weight, upper, lower);
  }

  delete(v: unknown, path: string): void {
    this.model.del(this.listedServer(v, path));
  }

  preview(v: unknown, path: string, event: number): void {
    const p = obj(v, path, ['add', 'delete', 'setWeight', 'scheduler', 'flags', 'mhTableSize']);
    const change: ProposedChange = {};
    if (p.scheduler !== undefined) change.scheduler = schedulerName(p.scheduler, `${path}.scheduler`);
    const scheduler = change.scheduler ?? this.scheduler;
    if (p.flags !== undefined) change.flags = flagList(p.flags, `${path}.flags`, scheduler);
    else flagList(this.flags, `${path}.flags`, scheduler); // the service's flags must suit the new scheduler
    const size = mhSize(p.mhTableSize, `${path}.mhTableSize`);
    if (size !== undefined) change.mhTableSize = size;
    const list = (x: unknown, name: string): unknown[] => {
      if (x === undefined) return [];
      if (!Array.isArray(x)) fail(`${path}.${name}`, 'must be a list');
      return x;
    };
    change.delete = list(p.delete, 'delete').map((d, i) => str(d, `${path}.delete[${i}]`));
    change.setWeight = list(p.setWeight, 'setWeight').map((x, i) => {
      const u = obj(x, `${path}.setWeight[${i}]`, ['realServer', 'weight']);
      return {
        realServer: str(u.realServer, `${path}.setWeight[${i}].realServer`),
        weight: int(u.weight, `${path}.setWeight[${i}].weight`, 0, 65535),
      };
    });
    change.add = list(p.add, 'add').map((x, i) => {
      const q = `${path}.add[${i}]`;
      const a = obj(x, q, ['address', 'port', 'weight']);
      const addr = this.address(a.address, `${q}.address`);
      return {
        address: formatInet(addr),
        port: int(a.port, `${q}.port`, 0, 65535, this.port),
        weight: int(a.weight, `${q}.weight`, 0, 65535, 1),
      };
    });
    const m = this.model;
    const flows: PreviewFlow[] = [];
    for (const c of this.tracked.values()) {
      const e = parseEndpoint(c.key)!;
      flows.push({ client: formatInet(e.addr), clientPort: e.port, realServer: c.server.key });
    }
    const service = {
      address: formatInet(this.service),
      port: this.port,
      scheduler: this.scheduler,
      flags: this.flags,
      ...(this.mhTableSize === undefined ? {} : { mhTableSize: this.mhTableSize }),
      realServers: m.listed().map((s) => ({
        address: formatInet(s.addr),
        port: s.port,
        weight: s.weight,
        lastWeight: s.lastWeight,
        overloaded: m.overloaded(s),
      })),
    };
    try {
      const r = previewDisruption(service, change, flows);
      this.out.push(JSON.stringify({ event, ...r }));
    } catch (e) {
      if (e instanceof PreviewError) fail(e.path.replace(/^change\./, `${path}.`), e.reason);
      throw e;
    }
  }
}

/** Runs a parsed scenario; returns the output lines. Throws ScenarioError on a bad scenario. */
export function runScenario(doc: unknown): string[] {
  const root = obj(doc, '', [
    'scheduler',
    'flags',
    'protocol',
    'service',
    'persistence',
    'netmask',
    'mhTableSize',
    'seed',
    'expireQuiescentTemplate',
    'realServers',
    'events',
  ]);
  const scheduler = root.scheduler === undefined ? DEFAULT_SCHEDULER : schedulerName(root.scheduler, 'scheduler');
  const flags = flagList(root.flags, 'flags', scheduler);
  const protocol = root.protocol === undefined ? 'tcp' : root.protocol;
  if (protocol !== 'tcp' && protocol !== 'udp') fail('protocol', `must be "tcp" or "udp", got ${JSON.stringify(protocol)}`);
  const sv = obj(root.service, 'service', ['address', 'port']);
  const service = parseInet(str(sv.address, 'service.address'));
  if (!service) fail('service.address', `must be an IPv4 or IPv6 address, got ${JSON.stringify(sv.address)}`);
  const port = int(sv.port, 'service.port', 1, 65535);
  const persistence = int(root.persistence, 'persistence', 0, 2678400, 0);
  let mask: (a: Inet) => Inet;
  if (service.family === 4) {
    let word = 0xffffffff;
    if (root.netmask !== undefined) {
      const m = parseInet(str(root.netmask, 'netmask'));
      if (m === null || m.family !== 4) fail('netmask', `must be an IPv4 netmask like 255.255.255.0, got ${JSON.stringify(root.netmask)}`);
      word = m.words[0]!;
    }
    mask = (a) => maskV4(a, word);
  } else {
    const bits =
      root.netmask === undefined
        ? 128
        : typeof root.netmask === 'string' && /^\/?\d+$/.test(root.netmask)
          ? Number(root.netmask.replace('/', ''))
          : root.netmask;
    const b = int(bits, 'netmask', 1, 128);
    mask = (a) => maskPrefix(a, b);
  }
  const mhTableSize = mhSize(root.mhTableSize, 'mhTableSize');
  const seed = int(root.seed, 'seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, 0);
  if (root.expireQuiescentTemplate !== undefined && typeof root.expireQuiescentTemplate !== 'boolean')
    fail('expireQuiescentTemplate', 'must be true or false');
  const sim = new Simulation(
    scheduler,
    flags,
    mhTableSize,
    protocol === 'tcp',
    service,
    port,
    persistence * 1000,
    mask,
    root.expireQuiescentTemplate === true,
    seed,
  );

  if (root.realServers !== undefined && !Array.isArray(root.realServers)) fail('realServers', 'must be a list');
  ((root.realServers as unknown[] | undefined) ?? []).forEach((r, i) => sim.add(r, `realServers[${i}]`));

  if (!Array.isArray(root.events)) fail('events', 'must be a list of events');
  root.events.forEach((ev, i) => {
    const path = `events[${i}]`;
    if (typeof ev !== 'object' || ev === null || Array.isArray(ev)) fail(path, `must be an object with one of ${EVENT_TYPES.join(', ')}`);
    const keys = Object.keys(ev);
    if (keys.length !== 1)
      fail(
        path,
        `must have exactly one event type (one of ${EVENT_TYPES.join(', ')}), got ${keys.length === 0 ? 'none' : keys.join(', ')}`,
      );
    const type = keys[0]!;
    const arg = (ev as Obj)[type];
    const p = `${path}.${type}`;
    switch (type) {
      case 'connect':
        return sim.connect(arg, p, i);
      case 'finish':
        return sim.finish(arg, p);
      case 'expire':
        return sim.expire(arg, p);
      case 'add':
        return sim.add(arg, p);
      case 'setWeight':
        return sim.setWeight(arg, p);
      case 'delete':
        return sim.delete(arg, p);
      case 'setThresholds':
        return sim.setThresholds(arg, p);
      case 'advance':
        return sim.advance(arg, p);
      case 'preview':
        return sim.preview(arg, p, i);
      default:
        fail(path, `unknown event type ${JSON.stringify(type)} (expected one of ${EVENT_TYPES.join(', ')})`);
    }
  });
  return sim.out;
}

const USAGE = `Usage: uvs simulate [scenario.json]   (default: the scenario on stdin)
Prints one JSON line per connect (the real server chosen) and per preview event.`;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function simulateCommand(args: string[]): Promise<number> {
  if (args.includes('-h') || args.includes('--help')) {
    console.log(USAGE);
    return 0;
  }
  if (args.length > 1) {
    console.error(`uvs simulate: too many arguments\n${USAGE}`);
    return 2;
  }
  let text: string;
  try {
    text = args[0] === undefined || args[0] === '-' ? await readStdin() : readFileSync(args[0], 'utf8');
  } catch (e) {
    console.error(`uvs simulate: ${(e as Error).message}`);
    return 2;
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    console.error(`uvs simulate: the scenario is not valid JSON: ${(e as Error).message}`);
    return 2;
  }
  let lines: string[];
  try {
    lines = runScenario(doc);
  } catch (e) {
    if (e instanceof ScenarioError) {
      console.error(`uvs simulate: ${e.message}`);
      return 2;
    }
    throw e;
  }
  if (lines.length > 0) await new Promise<void>((resolve) => process.stdout.write(`${lines.join('\n')}\n`, () => resolve()));
  return 0;
}
