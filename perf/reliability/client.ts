/**
 * The reliability run's clients, started inside a lab namespace (`ip netns exec NS node
 * dist/perf/reliability/client.js CMD …`). Each is bounded by its SECONDS and also stops cleanly
 * at SIGTERM/SIGINT, printing what it saw; nothing here knows about uvs.
 *
 *   connect-probe HOST PORT SECONDS INTERVAL_MS TIMEOUT_MS
 *       a new TCP connection every interval (not waiting for the previous one) with one HTTP GET /;
 *       prints one JSON line per attempt as it ends: {"t":start,"c":connect ms,"d":answer ms,"e":error}
 *       (c/d null when it did not get that far) — streamed, so the harness can watch recovery live
 *   echo HOST PORT SECONDS INTERVAL_MS [LOCAL_PORT [rst]]
 *       one TCP connection to a line-echo service (from LOCAL_PORT if given and not 0; ended with a
 *       RST instead of a FIN with `rst`: no TIME_WAIT holds the port); a numbered line every interval, each echo checked;
 *       at the end {"server","port","sent","echoed","bad","error","maxGapMs","endGapMs"}: a lost
 *       stream shows as an error (reset, timeout) or missing echoes; port = its local port (to find
 *       it in a capture), maxGapMs = the longest wait between two echoes, endGapMs = from the last
 *       echo (or the connect) to the end, which maxGapMs does not see when the stream stalled
 *   api-probe SOCKET SECONDS INTERVAL_MS
 *       GET /v1/info over uvsd's unix socket, one at a time, every interval: one JSON line per probe
 *       {"t":sent at,"ms":latency or null,"e":error} — how long the control thread took to answer
 *   download HOST PORT BYTES SEED BYTES_PER_S MAX_SECONDS
 *       GET /blob?bytes=…&seed=… of lab/servers.ts, read no faster than BYTES_PER_S (the reader
 *       pauses; TCP's window holds the server back), the body checked against lab/blob.ts's
 *       sha256: {"ok","bytes","error","ms"} — a stream that stays open for BYTES / BYTES_PER_S
 *       seconds. (curl's --limit-rate let 5 MB through in under a second here.)
 *   redis URL FILE [REPEAT_SECONDS INTERVAL_MS]
 *       sends the commands of FILE (JSON [[cmd, ...args], …]) pipelined over ioredis; with a repeat,
 *       again every interval for that long (a forged node's heartbeat); prints {"ok","errors","last"}
 */
import { request } from 'node:http';
import { connect } from 'node:net';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Redis from 'ioredis';
import { blobSha256 } from '../../lab/blob';

function out(o: unknown): void {
  process.stdout.write(JSON.stringify(o) + '\n');
}

/** Resolves at SIGTERM/SIGINT or after ms, whichever comes first. */
function stopSignal(ms: number): Promise<void> {
  return new Promise((r) => {
    const t = setTimeout(r, ms);
    const f = () => {
      clearTimeout(t);
      r();
    };
    process.once('SIGTERM', f);
    process.once('SIGINT', f);
  });
}

function connectProbe(host: string, port: number, seconds: number, intervalMs: number, timeoutMs: number): Promise<number> {
  let stopped = false;
  let inFlight = 0;
  const one = () => {
    const t = Date.now();
    let c: number | null = null;
    let done = false;
    inFlight++;
    const sock = connect({ host, port });
    const finish = (d: number | null, e: string | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      inFlight--;
      out({ t, c, d, e });
    };
    const timer = setTimeout(() => finish(null, 'timeout'), timeoutMs);
    let got = '';
    sock.on('connect', () => {
      c = Date.now() - t;
      sock.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    });
    sock.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      if (got.includes('\r\n\r\n')) finish(Date.now() - t, /^HTTP\/1\.[01] 200/.test(got) ? null : 'status');
    });
    sock.on('error', (e: NodeJS.ErrnoException) => finish(null, e.code ?? e.message));
    sock.on('close', () => finish(null, 'closed'));
  };
  return new Promise((resolve) => {
    const timer = setInterval(() => !stopped && one(), intervalMs);
    void stopSignal(seconds * 1000).then(() => {
      stopped = true;
      clearInterval(timer);
      const wait = setInterval(() => {
        if (inFlight === 0) {
          clearInterval(wait);
          resolve(0);
        }
      }, 20);
    });
  });
}

function echo(host: string, port: number, seconds: number, intervalMs: number, bindPort: number, rst: boolean): Promise<number> {
  return new Promise((resolve) => {
    const sock = connect({ host, port, ...(bindPort > 0 ? { localPort: bindPort } : {}) });
    let server = '';
    let buffered = '';
    let sent = 0;
    let echoed = 0;
    let bad = 0;
    let last = Date.now();
    let maxGapMs = 0;
    let error: string | null = null;
    let timer: NodeJS.Timeout | null = null;
    let finished = false;
    let localPort: number | null = null;
    const finish = () => {
      if (finished) return;
      finished = true;
      if (timer) clearInterval(timer);
      if (rst && !sock.destroyed) sock.resetAndDestroy();
      else sock.destroy();
      if (!error && echoed !== sent) error = 'missing echoes';
      out({ server, port: localPort, sent, echoed, bad, error, maxGapMs, endGapMs: Date.now() - last });
      resolve(error === null && bad === 0 ? 0 : 1);
    };
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => {
      buffered += d.toString('utf8');
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (!server) server = line;
        else if (line === `line ${echoed}`) {
          echoed++;
          const now = Date.now();
          maxGapMs = Math.max(maxGapMs, now - last);
          last = now;
        } else bad++;
      }
    });
    sock.on('error', (e: NodeJS.ErrnoException) => {
      error = e.code ?? e.message;
      finish();
    });
    sock.on('close', () => {
      if (!finished) {
        error ??= 'closed by peer';
        finish();
      }
    });
    sock.on('connect', () => {
      last = Date.now();
      localPort = sock.localPort ?? null;
      timer = setInterval(() => sock.write(`line ${sent++}\n`), intervalMs);
      void stopSignal(seconds * 1000).then(() => {
        if (timer) clearInterval(timer);
        timer = null;
        // The last echoes: up to 60 s. After heavy loss (a flood filling the device's queue for
        // tens of seconds) TCP's retransmission timer has backed off to tens of seconds; a stream
        // is broken when TCP gives up or loses data, not while it waits for its next retransmission
        // (the wait shows in maxGapMs and endGapMs).
        const deadline = Date.now() + 60000;
        const w = setInterval(() => {
          if (echoed === sent || Date.now() > deadline || finished) {
            clearInterval(w);
            finish();
          }
        }, 20);
      });
    });
  });
}

function apiGet(socket: string, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    const req = request({ socketPath: socket, method: 'GET', path: '/v1/info' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode === 200 ? null : `HTTP ${res.statusCode}`));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    req.end();
  });
}

async function apiProbe(socket: string, seconds: number, intervalMs: number): Promise<number> {
  let stopped = false;
  void stopSignal(seconds * 1000).then(() => (stopped = true));
  while (!stopped) {
    const t = Date.now();
    const e = await apiGet(socket, 15000);
    const ms = Date.now() - t;
    out({ t, ms: e === null ? ms : null, e, took: ms });
    const wait = intervalMs - (Date.now() - t);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  return 0;
}

function download(host: string, port: number, bytes: number, seed: number, bytesPerS: number, maxSeconds: number): Promise<number> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const h = createHash('sha256');
    let got = 0;
    let done = false;
    const finish = (error: string | null) => {
      if (done) return;
      done = true;
      clearTimeout(hard);
      const ok = error === null && got === bytes && h.digest('hex') === blobSha256(seed, bytes);
      out({ ok, bytes: got, error: error ?? (ok ? null : 'content differs'), ms: Date.now() - t0 });
      resolve(ok ? 0 : 1);
    };
    const host6 = host.includes(':') ? `[${host}]` : host;
    const req = request({ host, port, path: `/blob?bytes=${bytes}&seed=${seed}`, headers: { host: host6 } }, (res) => {
      if (res.statusCode !== 200) return finish(`HTTP ${res.statusCode}`);
      res.on('data', (d: Buffer) => {
        h.update(d);
        got += d.length;
        const ahead = (got / bytesPerS) * 1000 - (Date.now() - t0);
        if (ahead > 20) {
          res.pause();
          setTimeout(() => res.resume(), ahead);
        }
      });
      res.on('end', () => finish(null));
      res.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
      res.on('aborted', () => finish('aborted'));
    });
    const hard = setTimeout(() => {
      req.destroy();
      finish('timeout');
    }, maxSeconds * 1000);
    req.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
    req.end();
  });
}

async function redis(url: string, file: string, repeatSeconds: number, intervalMs: number): Promise<number> {
  const cmds = JSON.parse(readFileSync(file, 'utf8')) as (string | number)[][];
  const c = new Redis(url, { maxRetriesPerRequest: 1, enableAutoPipelining: true });
  c.on('error', () => undefined);
  let ok = 0;
  let errors = 0;
  let last: string | null = null;
  const until = Date.now() + repeatSeconds * 1000;
  do {
    // Substitutes "$now" / "$now+N" in arguments (heartbeats at send time).
    const now = Date.now();
    const arg = (a: string | number) => (typeof a === 'string' && a.startsWith('$now') ? String(now + Number(a.slice(4) || 0)) : String(a));
    for (let i = 0; i < cmds.length; i += 1000) {
      const r = await Promise.allSettled(cmds.slice(i, i + 1000).map(([cmd, ...args]) => c.call(String(cmd), ...args.map(arg))));
      for (const x of r) {
        if (x.status === 'fulfilled') ok++;
        else {
          errors++;
          last = (x.reason as Error).message;
        }
      }
    }
    if (Date.now() < until) await new Promise((r) => setTimeout(r, intervalMs));
  } while (Date.now() < until);
  c.disconnect();
  out({ ok, errors, last });
  return errors ? 1 : 0;
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...a] = argv;
  switch (cmd) {
    case 'connect-probe':
      return connectProbe(a[0]!, Number(a[1]), Number(a[2]), Number(a[3] ?? 50), Number(a[4] ?? 5000));
    case 'echo':
      return echo(a[0]!, Number(a[1]), Number(a[2]), Number(a[3] ?? 200), Number(a[4] ?? 0), a[5] === 'rst');
    case 'api-probe':
      return apiProbe(a[0]!, Number(a[1]), Number(a[2] ?? 20));
    case 'download':
      return download(a[0]!, Number(a[1]), Number(a[2]), Number(a[3]), Number(a[4]), Number(a[5] ?? 120));
    case 'redis':
      return redis(a[0]!, a[1]!, Number(a[2] ?? 0), Number(a[3] ?? 300));
    default:
      console.error('usage: client connect-probe|echo|api-probe|download|redis …');
      return 2;
  }
}

main(process.argv.slice(2)).then((c) => process.stdout.write('', () => process.exit(c)));
