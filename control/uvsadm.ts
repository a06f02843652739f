#!/usr/bin/env node
/**
 * uvsadm — ipvsadm for a running uvsd, over its API socket. The command line is ipvsadm's
 * (ipvsadm/parse.ts), the output ipvsadm's (ipvsadm/format.ts); editing commands become one
 * POST /v1/batch each (-R: the whole input as one batch, applied whole or not at all).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { canonAddr, splitHostPort } from '../net/addr';
import type {
  ApiError,
  AppliedResponse,
  ConfigResponse,
  ConnectionsResponse,
  DefenseResponse,
  DrainsResponse,
  HealthResponse,
  InfoResponse,
  KillWorkerResponse,
  MaintenanceResponse,
  ServicesResponse,
  StatsResponse,
  TimeoutsResponse,
  ZeroResponse,
} from './api-types';
import { apiCall, apiCallRaw, DEFAULT_SOCKET } from './client';
import type { EditOp, ServiceRef } from './edits';
import { classicError, daemonError, keepUvsSettings } from './ipvsadm/answers';
import type { ListFormat, ParseEnv } from './ipvsadm/command';
import { parseArgs, splitSocket } from './ipvsadm/parse';
import { parseRestore, type RestoreLine } from './ipvsadm/restore';
import { PROGRAM } from './ipvsadm/tables';
import {
  formatConnections,
  formatDrains,
  formatDefense,
  formatHealth,
  formatList,
  formatSave,
  formatTimeouts,
  formatWorkers,
  type FmtConnection,
  type FmtService,
  type Names,
} from './ipvsadm/format';
import { resolveNames } from './ipvsadm/names';

/** An answer as read: the route's type when it succeeded; on a refusal only an ApiError's fields are there. */
type Answer<T> = T & Partial<ApiError>;

const out = (s: string) => process.stdout.write(s);
const err = (s: string) => process.stderr.write(s);

// ── names, as gethostbyname / getservbyname would find them without DNS ──────────────────────
function readLines(file: string): string[] {
  try {
    return readFileSync(file, 'utf8').split('\n');
  } catch {
    return [];
  }
}
function lookupHost(name: string): string | null {
  for (const l of readLines('/etc/hosts')) {
    const [addr, ...names] = l.replace(/#.*/, '').trim().split(/\s+/);
    if (addr && /^\d+\.\d+\.\d+\.\d+$/.test(addr) && names.includes(name)) return addr;
  }
  return null;
}
function lookupService(name: string, protocol: string): number | null {
  for (const l of readLines('/etc/services')) {
    const [svc, portProto, ...aliases] = l.replace(/#.*/, '').trim().split(/\s+/);
    const m = /^(\d+)\/(\w+)$/.exec(portProto ?? '');
    if (m && m[2] === protocol && (svc === name || aliases.includes(name))) return Number(m[1]);
  }
  return null;
}
const ENV: ParseEnv = { program: PROGRAM, lookupHost, lookupService };

class Unreachable extends Error {}

async function call<T>(socket: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  try {
    // A change answers once it is applied: thousands of services on a busy machine take longer
    // than a read's 10 s (issue 37's scale test timed out beside a CPU hog).
    return await apiCall<T>(socket, method, path, body, method === 'GET' ? 10_000 : 300_000);
  } catch (e) {
    throw new Unreachable((e as Error).message);
  }
}

/** A GET that must succeed: its body, or the daemon's error printed and null. */
async function get<T>(socket: string, path: string): Promise<T | null> {
  const r = await call<Answer<T>>(socket, 'GET', path);
  if (r.status === 200) return r.body;
  err(`${PROGRAM}: ${r.body.code ?? r.status}: ${r.body.message ?? 'request failed'}\n`);
  return null;
}

/**
 * Sends editing operations as one batch. A refusal prints ipvsadm's message where it has one
 * ("Service already exists"), then the daemon's code and message, and exits 255 as ipvsadm does
 * when the kernel refuses.
 */
async function sendBatch(socket: string, ops: EditOp[], lines?: RestoreLine[]): Promise<number> {
  if (ops.length === 0) return 0;
  if (ops.some((o) => o.op === 'editService')) {
    const cfg = await get<ConfigResponse>(socket, '/v1/config');
    if (cfg === null) return 1;
    keepUvsSettings(ops, cfg.document);
  }
  const r = await call<Answer<AppliedResponse>>(socket, 'POST', '/v1/batch', { ops });
  if (r.status === 200) return 0;
  const m = /^ops\[(\d+)\]/.exec(r.body.path ?? '');
  const i = m ? Number(m[1]) : -1;
  const classic = ops[i] ? classicError(ops[i]!.op, r.body) : undefined;
  if (classic) err(`${classic}\n`);
  err(daemonError(r.body, r.status));
  if (lines) {
    const where = i >= 0 && lines[i] ? ` at line ${lines[i]!.line} (${lines[i]!.text})` : '';
    err(`${PROGRAM}: restore refused${where}; nothing was changed\n`);
  }
  return 255;
}

function sameRef(s: { protocol: string; address: string; port: number }, ref: ServiceRef): boolean {
  return s.protocol === ref.protocol && canonAddr(s.address) === canonAddr(ref.address) && s.port === ref.port;
}

/** Names for a listing without -n (undefined with -n: numbers). */
async function namesFor(numeric: boolean, addresses: Iterable<string>): Promise<Names | undefined> {
  return numeric ? undefined : resolveNames(addresses);
}
function serviceAddresses(services: FmtService[]): string[] {
  return services.flatMap((s) => [s.address, ...s.realServers.map((r) => r.address)]);
}

async function list(socket: string, what: string, format: ListFormat, service: ServiceRef | undefined): Promise<number> {
  switch (what) {
    case 'daemon': {
      // No sync daemon ever runs in uvs: nothing to print (ipvsadm prints a line per running
      // one). uvsd must still answer, as ipvsadm needs the kernel's answer.
      if (!(await get<InfoResponse>(socket, '/v1/info'))) return 1;
      return 0;
    }
    case 'timeout': {
      const t = await get<TimeoutsResponse>(socket, '/v1/timeouts');
      if (!t) return 1;
      out(formatTimeouts(t));
      return 0;
    }
    case 'drain': {
      const b = await get<DrainsResponse>(socket, '/v1/drains');
      if (!b) return 1;
      out(formatDrains(b.checkInterval, b.draining));
      return 0;
    }
    case 'defense': {
      const b = await get<DefenseResponse>(socket, '/v1/defense');
      if (!b) return 1;
      out(formatDefense(b));
      return 0;
    }
    case 'health': {
      const b = await get<HealthResponse>(socket, '/v1/health');
      if (!b) return 1;
      out(formatHealth(b.checks));
      return 0;
    }
    case 'workers': {
      const b = await get<StatsResponse>(socket, '/v1/stats');
      if (!b) return 1;
      out(formatWorkers(b.workers, b.steering));
      return 0;
    }
    case 'connections': {
      // /proc/net/ip_vs_conn has no paging; the API pages by 100000.
      const rows: FmtConnection[] = [];
      for (let offset = 0; ; ) {
        const b = await get<ConnectionsResponse>(socket, `/v1/connections?limit=100000&offset=${offset}`);
        if (!b) return 1;
        rows.push(...b.connections);
        offset += b.connections.length;
        if (b.connections.length === 0 || offset >= b.total) break;
      }
      const addrs = rows.flatMap((c) => [c.client, c.virtual, c.realServer].map((x) => splitHostPort(x)?.host ?? ''));
      out(formatConnections(rows, { persistentConn: format.persistentConn, names: await namesFor(format.numeric, addrs) }));
      return 0;
    }
    default: {
      const b = await get<ServicesResponse>(socket, '/v1/services');
      if (!b) return 1;
      if (service) {
        const one = b.services.filter((s) => sameRef(s, service));
        if (one.length === 0) {
          err('No such service\n');
          return 1;
        }
        out(formatList(b.tableSize, one, { ...format, header: false, names: await namesFor(format.numeric, serviceAddresses(one)) }));
      } else out(formatList(b.tableSize, b.services, { ...format, names: await namesFor(format.numeric, serviceAddresses(b.services)) }));
      return 0;
    }
  }
}

/**
 * -S prints the configured table (uvsd's effective configuration), not the live one: servers that
 * are only draining, and health-check weights of 0, are not configuration and must not come back
 * through -R.
 */
async function save(socket: string, numeric: boolean): Promise<number> {
  const b = await get<ConfigResponse>(socket, '/v1/config');
  if (!b) return 1;
  const zero = { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0 };
  const services: FmtService[] = b.effective.services.map((s) => ({
    protocol: s.protocol,
    address: s.address,
    port: s.port,
    scheduler: s.scheduler,
    schedFlags: s.schedFlags ?? [],
    persistence: typeof s.persistence === 'number' ? s.persistence : 0,
    ...(s.netmask ? { netmask: s.netmask } : {}),
    stats: zero,
    realServers: s.realServers.map((r) => ({ ...r, activeConns: 0, inactConns: 0, stats: zero })),
  }));
  out(formatSave(services, await namesFor(numeric, serviceAddresses(services))));
  return 0;
}

/**
 * uvsadm --capture: flow sampling (POST /v1/capture). uvs's own command, so its options are not
 * ipvsadm's popt set: usage errors exit 255 and bad values 2, as ipvsadm's own.
 */
async function capture(socket: string, args: string[]): Promise<number> {
  const body: Record<string, unknown> = {};
  let file: string | null = null;
  const num = (v: string | undefined, opt: string): number | null => {
    if (v !== undefined && /^\d+$/.test(v)) return Number(v);
    err(`${PROGRAM}: ${opt} needs a number, got ${JSON.stringify(v ?? '')}\n`);
    return null;
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const v = args[i + 1];
    i++;
    if (a === '--sample') {
      if ((body.sample = num(v, a)) === null) return 2;
    } else if (a === '--seconds') {
      if ((body.seconds = num(v, a)) === null) return 2;
    } else if (a === '--max-packets') {
      if ((body.maxPackets = num(v, a)) === null) return 2;
    } else if (a === '--format') body.format = v;
    else if (a === '-w') file = v ?? null;
    else if (a === '--flow') {
      const flow: Record<string, unknown> = {};
      for (const kv of (v ?? '').split(',').filter(Boolean)) {
        const eq = kv.indexOf('=');
        const k = kv.slice(0, eq);
        const val = kv.slice(eq + 1);
        if (eq < 0) {
          err(`${PROGRAM}: --flow takes KEY=VALUE pairs (protocol, address, port, peer, peerPort), got ${JSON.stringify(kv)}\n`);
          return 2;
        }
        flow[k] = k === 'port' || k === 'peerPort' ? (/^\d+$/.test(val) ? Number(val) : val) : val;
      }
      body.flow = flow;
    } else {
      err(
        `${PROGRAM}: --capture: unknown option ${JSON.stringify(a)}\nUsage: ${PROGRAM} --capture (--sample N | --flow K=V,...) [--seconds S] [--max-packets M] [--format pcap|jsonl] [-w FILE]\n`,
      );
      return 255;
    }
  }
  const seconds = typeof body.seconds === 'number' ? body.seconds : 10;
  const r = await apiCallRaw(socket, 'POST', '/v1/capture', body, (seconds + 10) * 1000);
  if (r.status !== 200) {
    let e: Partial<ApiError> = {};
    try {
      e = JSON.parse(r.body.toString('utf8')) as Partial<ApiError>;
    } catch {
      /* not JSON */
    }
    err(`${PROGRAM}: ${e.code ?? r.status}: ${e.message ?? r.body.toString('utf8')}\n`);
    return 2;
  }
  if (file) writeFileSync(file, r.body);
  else process.stdout.write(r.body);
  err(
    `${PROGRAM}: captured ${r.headers['x-uvs-capture-packets'] ?? '?'} packets (${r.headers['x-uvs-capture-overruns'] ?? '?'} lost to full rings)\n`,
  );
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const split = splitSocket(argv);
  if ('error' in split) {
    err(split.error);
    return 255;
  }
  const socket = split.socket ?? DEFAULT_SOCKET;
  if (split.rest[0] === '--capture') return await capture(socket, split.rest.slice(1));
  const parsed = parseArgs(split.rest, ENV);
  if (!parsed.ok) {
    err(parsed.stderr);
    return parsed.exit;
  }
  const c = parsed.command;
  try {
    switch (c.kind) {
      case 'help':
      case 'version':
        out(c.text);
        return 0;
      case 'list':
        return await list(socket, c.what, c.format, c.service);
      case 'save':
        return await save(socket, c.numeric);
      case 'edit':
        return await sendBatch(socket, c.ops);
      case 'restore': {
        const r = parseRestore(readFileSync(0, 'utf8'), ENV);
        if (!r.ok) {
          err(r.stderr);
          err(`${PROGRAM}: restore stopped at line ${r.line}; nothing was changed\n`);
          return r.exit;
        }
        return await sendBatch(socket, r.ops, r.lines);
      }
      case 'zero': {
        const r = await call<Answer<ZeroResponse>>(socket, 'POST', '/v1/zero', c.service ? { service: c.service } : {});
        if (r.status === 200) return 0;
        const classic = classicError('zero', r.body);
        if (classic) err(`${classic}\n`);
        err(daemonError(r.body, r.status));
        return 255;
      }
      case 'reload': {
        const r = await call<Answer<AppliedResponse>>(socket, 'POST', '/v1/reload');
        if (r.status !== 200) {
          err(`${PROGRAM}: reload rejected: ${r.body.code}: ${r.body.message}\n`);
          return 1;
        }
        out(`configuration reloaded (snapshot ${r.body.version})\n`);
        return 0;
      }
      case 'maintenance':
        return await maintenance(socket, c.action);
      case 'killWorker': {
        const r = await call<Answer<KillWorkerResponse>>(socket, 'POST', `/v1/workers/${encodeURIComponent(c.worker)}/kill`);
        if (r.status !== 202) {
          err(`${PROGRAM}: ${r.body.message}\n`);
          return 1;
        }
        return 0;
      }
    }
  } catch (e) {
    if (!(e instanceof Unreachable)) throw e;
    // ipvsadm: "Can't initialize ipvs: …" and exit 2.
    err(`${PROGRAM}: cannot reach uvsd at ${socket}: ${e.message}\n`);
    return 2;
  }
}

/** `--maintenance wait`: idle means no packet for this long (the router has converged, s). */
const MAINTENANCE_QUIET_S = 2;
/** … and it gives up after this long (s): exit 1, the node still carries traffic. */
const MAINTENANCE_WAIT_MAX_S = 300;

function maintenanceLine(m: MaintenanceResponse): string {
  const mode = m.maintenance ? `maintenance on since ${m.since}` : 'maintenance off';
  const ann =
    m.table === 0
      ? 'announces nothing (no dataplane.announceTable)'
      : m.announced
        ? `announced (table ${m.table})`
        : `not announced (table ${m.table})`;
  return `${mode}; ${ann}; last packet ${m.idleSeconds.toFixed(1)} s ago\n`;
}

/**
 * Node maintenance: on/off (PUT /v1/maintenance), status (exit 1 in maintenance, so a keepalived
 * track_script or a deploy script can test it), wait (until the node has been idle for
 * MAINTENANCE_QUIET_S: its flows have moved to the other nodes, so stopping it loses nothing).
 */
async function maintenance(socket: string, action: 'on' | 'off' | 'status' | 'wait'): Promise<number> {
  if (action === 'on' || action === 'off') {
    const r = await call<Answer<MaintenanceResponse>>(socket, 'PUT', '/v1/maintenance', { enabled: action === 'on' });
    if (r.status !== 200) {
      err(`${PROGRAM}: maintenance ${action} refused: ${r.body.code}: ${r.body.message}\n`);
      return 1;
    }
    out(maintenanceLine(r.body));
    return 0;
  }
  const deadline = Date.now() + MAINTENANCE_WAIT_MAX_S * 1000;
  for (;;) {
    const r = await call<Answer<MaintenanceResponse>>(socket, 'GET', '/v1/maintenance');
    if (r.status !== 200) {
      err(daemonError(r.body, r.status));
      return 1;
    }
    if (action === 'status') {
      out(maintenanceLine(r.body));
      return r.body.maintenance ? 1 : 0;
    }
    if (!r.body.maintenance) {
      err(`${PROGRAM}: not in maintenance (uvsadm --maintenance on first): ${maintenanceLine(r.body)}`);
      return 1;
    }
    if (r.body.idleSeconds >= MAINTENANCE_QUIET_S) {
      out(maintenanceLine(r.body));
      return 0;
    }
    if (Date.now() > deadline) {
      err(`${PROGRAM}: still receiving packets after ${MAINTENANCE_WAIT_MAX_S} s: ${maintenanceLine(r.body)}`);
      return 1;
    }
    await new Promise((res) => setTimeout(res, 200));
  }
}

/** Exits once stdout and stderr are flushed (a pipe such as `uvsadm -S | uvsadm -R` must get everything). */
function exit(code: number): void {
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
}

main(process.argv.slice(2)).then(exit, (e: unknown) => {
  err(`${PROGRAM}: ${(e as Error).stack ?? String(e)}\n`);
  exit(1);
});
