/**
 * Health checks, keepalived-style: per real server a TCP connect, an HTTP GET or an ICMP echo
 * (control/ping.ts, keepalived's PING_CHECK), every interval,
 * with a timeout; `fall` consecutive failures quiesce the server (weight 0: existing flows keep
 * going, new ones go elsewhere), `rise` consecutive successes restore its configured weight.
 * Servers start healthy, so a new service carries traffic at once (keepalived's default without
 * `alpha`). Checks run from uvsd's own network namespace, off the packet path.
 */
import { request } from 'node:http';
import { connect } from 'node:net';
import type { Logger } from 'pino';
import type { HealthCheckConfig, ServiceConfig } from './config';
import { closePingSockets, pingCheck } from './ping';
import { serviceKey } from './services';

export interface HealthState {
  service: string;
  realServer: string;
  healthy: boolean;
  consecutiveOk: number;
  consecutiveFail: number;
  lastError: string | null;
  lastCheck: number | null;
  checks: number;
}

interface Target {
  state: HealthState;
  cfg: HealthCheckConfig;
  address: string;
  port: number;
  timer: NodeJS.Timeout | null;
}

function tcpCheck(host: string, port: number, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    const t = setTimeout(() => {
      s.destroy();
      resolve(`connect timeout after ${timeoutMs} ms`);
    }, timeoutMs);
    s.once('connect', () => {
      clearTimeout(t);
      s.destroy();
      resolve(null);
    });
    s.once('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(t);
      resolve(e.code ?? e.message);
    });
  });
}

function httpCheck(host: string, port: number, path: string, expect: number, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (v: string | null) => {
      if (!done) {
        done = true;
        resolve(v);
      }
    };
    const req = request(
      { host, port, path, method: 'GET', agent: false, headers: { 'user-agent': 'uvs-healthcheck', connection: 'close' } },
      (res) => {
        res.resume();
        finish(res.statusCode === expect ? null : `HTTP ${res.statusCode}, expected ${expect}`);
      },
    );
    req.setTimeout(timeoutMs, () => {
      req.destroy();
      finish(`HTTP timeout after ${timeoutMs} ms`);
    });
    req.once('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
    req.end();
  });
}

export class HealthChecker {
  private targets = new Map<string, Target>();
  private readonly log: Logger;
  /** Called on a verdict change; returns nothing. */
  private readonly onChange: (service: string, realServer: string, healthy: boolean) => void;

  constructor(log: Logger, onChange: (service: string, realServer: string, healthy: boolean) => void) {
    this.log = log;
    this.onChange = onChange;
  }

  /** Starts, keeps or stops checks so that exactly the configured ones run. */
  sync(services: ServiceConfig[]): void {
    const want = new Map<string, { svc: ServiceConfig; address: string; port: number; cfg: HealthCheckConfig }>();
    for (const s of services) {
      if (!s.healthCheck) continue;
      for (const r of s.realServers) {
        want.set(`${serviceKey(s)}|${r.address}:${r.port}`, {
          svc: s,
          address: r.address,
          port: s.healthCheck.port ?? r.port,
          cfg: s.healthCheck,
        });
      }
    }
    for (const [k, t] of this.targets) {
      const w = want.get(k);
      if (!w || (w.cfg !== t.cfg && JSON.stringify(w.cfg) !== JSON.stringify(t.cfg)) || w.port !== t.port) {
        if (t.timer) clearTimeout(t.timer);
        this.targets.delete(k);
      }
    }
    for (const [k, w] of want) {
      if (this.targets.has(k)) continue;
      const [service, realServer] = k.split('|') as [string, string];
      const t: Target = {
        state: { service, realServer, healthy: true, consecutiveOk: 0, consecutiveFail: 0, lastError: null, lastCheck: null, checks: 0 },
        cfg: w.cfg,
        address: w.address,
        port: w.port,
        timer: null,
      };
      this.targets.set(k, t);
      // The first checks spread over a whole interval (and so the later ones, each an interval
      // after the last): 10,000 targets started within one second opened their sockets in
      // bursts of thousands per timer turn, 200–400 ms of the control thread each (perf/SCALE.md).
      this.schedule(k, t, Math.random() * w.cfg.interval * 1000);
    }
  }

  private schedule(k: string, t: Target, delayMs: number): void {
    t.timer = setTimeout(() => void this.run(k, t), delayMs);
    t.timer.unref();
  }

  private async run(k: string, t: Target): Promise<void> {
    if (this.targets.get(k) !== t) return;
    const c = t.cfg;
    const timeoutMs = c.timeout * 1000;
    let err: string | null;
    try {
      err =
        c.type === 'http'
          ? await httpCheck(t.address, t.port, c.path, c.expectStatus, timeoutMs)
          : c.type === 'ping'
            ? await pingCheck(t.address, timeoutMs)
            : await tcpCheck(t.address, t.port, timeoutMs);
    } catch (e) {
      // A check that cannot even be sent (http.request throws on a path it refuses) is a failed
      // check: counted, and the next one scheduled, so the server cannot stay "healthy" unchecked.
      err = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
    }
    if (this.targets.get(k) !== t) return; // removed or reconfigured meanwhile
    try {
      this.verdict(t, err);
    } finally {
      this.schedule(k, t, c.interval * 1000); // whatever the verdict's consequences did
    }
  }

  private verdict(t: Target, err: string | null): void {
    const c = t.cfg;
    const s = t.state;
    s.checks++;
    s.lastCheck = Date.now();
    s.lastError = err;
    if (err === null) {
      s.consecutiveOk++;
      s.consecutiveFail = 0;
      if (!s.healthy && s.consecutiveOk >= c.rise) {
        s.healthy = true;
        this.log.info(
          { service: s.service, realServer: s.realServer, checks: s.consecutiveOk },
          'real server healthy again: configured weight restored',
        );
        this.onChange(s.service, s.realServer, true);
      }
    } else {
      s.consecutiveFail++;
      s.consecutiveOk = 0;
      if (s.healthy && s.consecutiveFail >= c.fall) {
        s.healthy = false;
        this.log.warn(
          { service: s.service, realServer: s.realServer, error: err, failures: s.consecutiveFail },
          'real server failed its health check: quiesced (weight 0)',
        );
        this.onChange(s.service, s.realServer, false);
      }
    }
  }

  states(): HealthState[] {
    return [...this.targets.values()].map((t) => ({ ...t.state }));
  }

  stop(): void {
    for (const t of this.targets.values()) if (t.timer) clearTimeout(t.timer);
    this.targets.clear();
    closePingSockets();
  }
}
