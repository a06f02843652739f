/**
 * Small real clients the tests and the demo run inside the client namespace. Each prints one JSON
 * line with what it saw.
 *
 *   hold-echo HOST PORT SECONDS [INTERVAL_MS]  one TCP connection to the lab's echo service; sends a
 *                                              numbered line every interval, checks every echo
 *   echo-probe HOST PORT SECONDS [INTERVAL_MS] the same, and also prints when each echo arrived
 *                                              (`times`, epoch ms): gaps show a blackout
 *   udp-ask HOST PORT TEXT [TIMEOUT_MS [SPORT]] one datagram from a connected socket (from SPORT,
 *                                              else an ephemeral port); prints the answer or the
 *                                              error (ECONNREFUSED = ICMP unreachable)
 *   tcp-connect HOST PORT [TIMEOUT_MS]         connect only; prints ok or the error code
 *   load HOST PORT SECONDS CONCURRENCY HOLD_EVERY HOLD_MS
 *                                              HTTP load: CONCURRENCY loops of one-connection
 *                                              requests (GET /, every HOLD_EVERY-th a HOLD_MS-long
 *                                              /hold); prints every request: start, end, server, error,
 *                                              its source port and when it was connected and
 *                                              answered (null: it did not get that far)
 *   udp-session HOST PORT COUNT INTERVAL_MS    COUNT datagrams from one source port; prints the
 *                                              server that answered each (null = no answer)
 *   udp-probe HOST PORT SECONDS INTERVAL_MS    a datagram every interval from one source port to
 *                                              the lab's UDP echo; prints each probe as [sent at,
 *                                              answered at or null, server or null] (epoch ms)
 *   streams HOST PORT COUNT SECONDS INTERVAL_MS CHUNK [PAUSE_FROM PAUSE_FOR]
 *                                              COUNT TCP connections to the lab's echo service, each
 *                                              sending CHUNK deterministic bytes (blob seed 1000+i)
 *                                              every interval for SECONDS (idle, sending nothing,
 *                                              for PAUSE_FOR s from PAUSE_FROM s on) and checking every echoed
 *                                              byte; prints {"ready",ports,servers} once all are
 *                                              connected, then one line per stream: sent, echoed,
 *                                              bad bytes, error, longest silence (maxGapMs, gapAt),
 *                                              every silence > 1.5 intervals (gaps: [began at, ms])
 *   idle-echo HOST PORT COUNT MAX_SECONDS [TIMEOUT_MS]
 *                                              COUNT TCP connections to the lab's echo service that
 *                                              go idle: each exchanges one line, then stays silent
 *                                              (no keepalive) until SIGUSR1 or MAX_SECONDS, when each
 *                                              sends one more line and must get it back within
 *                                              TIMEOUT_MS (default 10000); prints {"ready",ports,
 *                                              servers} once every first echo is back (or 10 s
 *                                              passed), then {"idle":[{port,server,ok,error,ms}]}
 *   inject IFNAME COUNT SEED                   writes COUNT random and malformed packets into a
 *                                              device through an AF_PACKET socket (via python3)
 *   syn-flood IFNAME VIP PORT RATE SECONDS COUNT SEED
 *                                              spoofed TCP SYNs (sources random in 10.77.0.0/16,
 *                                              random ports) into a device at RATE per second, at
 *                                              most COUNT of them and for at most SECONDS (python3)
 */
import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { blobChunk } from './blob';

function out(o: unknown): void {
  process.stdout.write(JSON.stringify(o) + '\n');
}

function holdEcho(host: string, port: number, seconds: number, intervalMs: number, timeline = false): Promise<number> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    let server = '';
    let buffered = '';
    let sent = 0;
    let echoed = 0;
    let bad = 0;
    const times: number[] = [];
    let timer: NodeJS.Timeout | null = null;
    const started = Date.now();
    const finish = (error: string | null) => {
      if (timer) clearInterval(timer);
      sock.destroy();
      out(
        timeline
          ? { server, sent, echoed, bad, error, ms: Date.now() - started, started, times }
          : { server, sent, echoed, bad, error, ms: Date.now() - started },
      );
      resolve(error === null && bad === 0 && echoed === sent ? 0 : 1);
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
          if (timeline) times.push(Date.now());
        } else bad++;
      }
    });
    sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
    sock.on('connect', () => {
      timer = setInterval(() => {
        if (Date.now() - started >= seconds * 1000) {
          // Give the last echo a moment, then close cleanly.
          if (timer) clearInterval(timer);
          timer = null;
          setTimeout(() => finish(echoed === sent ? null : 'missing echoes'), 500);
          return;
        }
        sock.write(`line ${sent++}\n`);
      }, intervalMs);
    });
  });
}

function udpAsk(host: string, port: number, text: string, timeoutMs: number, sport = 0): Promise<number> {
  return new Promise((resolve) => {
    const s = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    const t = setTimeout(() => {
      out({ answer: null, error: 'timeout' });
      s.close();
      resolve(1);
    }, timeoutMs);
    s.on('message', (m) => {
      clearTimeout(t);
      out({ answer: m.toString('utf8'), error: null });
      s.close();
      resolve(0);
    });
    s.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(t);
      out({ answer: null, error: e.code ?? e.message });
      s.close();
      resolve(1);
    });
    const go = () => s.connect(port, host, () => s.send(text));
    if (sport > 0) s.bind(sport, go);
    else go();
  });
}

function tcpConnect(host: string, port: number, timeoutMs: number): Promise<number> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    const t = setTimeout(() => {
      sock.destroy();
      out({ connected: false, error: 'timeout' });
      resolve(1);
    }, timeoutMs);
    sock.on('connect', () => {
      clearTimeout(t);
      sock.destroy();
      out({ connected: true, error: null });
      resolve(0);
    });
    sock.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(t);
      out({ connected: false, error: e.code ?? e.message });
      resolve(1);
    });
  });
}

interface LoadRecord {
  start: number;
  end: number;
  server: string | null;
  error: string | null;
  hold: boolean;
  /** The connection's source port (null: none was bound). */
  port: number | null;
  /** When the connection was established and when the answer's headers came (epoch ms), or null. */
  connected: number | null;
  answered: number | null;
}

interface OneResult {
  server: string | null;
  error: string | null;
  port: number | null;
  connected: number | null;
  answered: number | null;
}

function one(host: string, port: number, path: string, timeoutMs: number): Promise<OneResult> {
  return new Promise((resolve) => {
    let done = false;
    let localPort: number | null = null;
    let connected: number | null = null;
    let answered: number | null = null;
    const finish = (server: string | null, error: string | null) => {
      if (done) return;
      done = true;
      localPort ??= req.socket?.localPort ?? null;
      resolve({ server, error, port: localPort, connected, answered });
    };
    const req = request({ host, port, path, agent: false, headers: { connection: 'close' } }, (res) => {
      answered = Date.now();
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => finish(body.split('\n')[0] || null, res.statusCode === 200 ? null : `HTTP ${res.statusCode}`));
      res.on('error', (e: NodeJS.ErrnoException) => finish(body.split('\n')[0] || null, e.code ?? e.message));
      res.on('aborted', () => finish(body.split('\n')[0] || null, 'aborted'));
    });
    req.on('socket', (sock: Socket) =>
      sock.once('connect', () => {
        connected = Date.now();
        localPort = sock.localPort ?? null;
      }),
    );
    req.setTimeout(timeoutMs, () => {
      // Before the socket is destroyed: a connection still in SYN_SENT has its port bound already.
      localPort ??= req.socket?.localPort ?? null;
      req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => finish(null, e.code ?? e.message));
    req.end();
  });
}

async function load(host: string, port: number, seconds: number, concurrency: number, holdEvery: number, holdMs: number): Promise<number> {
  const until = Date.now() + seconds * 1000;
  const records: LoadRecord[] = [];
  let n = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < until) {
        const hold = holdEvery > 0 && ++n % holdEvery === 0;
        const start = Date.now();
        const r = await one(host, port, hold ? `/hold?ms=${holdMs}` : '/', holdMs + 10000);
        records.push({ start, end: Date.now(), hold, ...r });
      }
    }),
  );
  out({ requests: records.length, errors: records.filter((r) => r.error).length, records });
  return 0;
}

function udpSession(host: string, port: number, count: number, intervalMs: number): Promise<number> {
  return new Promise((resolve) => {
    const s = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    const answers: (string | null)[] = [];
    let i = 0;
    let pending: NodeJS.Timeout | null = null;
    const next = () => {
      if (i >= count) {
        s.close();
        out({ answers });
        resolve(0);
        return;
      }
      const k = i++;
      answers[k] = null;
      s.send(`d${k}`);
      pending = setTimeout(next, intervalMs);
    };
    s.on('message', (m) => {
      const [server, payload] = m.toString('utf8').split(' ');
      const k = Number(payload!.slice(1));
      answers[k] = server!;
    });
    s.on('error', () => {
      /* ICMP errors: the datagram stays unanswered */
    });
    s.connect(port, host, next);
    void pending;
  });
}

function udpProbe(host: string, port: number, seconds: number, intervalMs: number): Promise<number> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const probes: [number, number | null, string | null][] = [];
    s.on('message', (m) => {
      const [server, payload] = m.toString('utf8').split(' ');
      const p = probes[Number(payload?.slice(1))];
      if (p && p[1] === null) {
        p[1] = Date.now();
        p[2] = server ?? null;
      }
    });
    s.on('error', () => {
      /* ICMP errors: the probe stays unanswered */
    });
    s.connect(port, host, () => {
      const started = Date.now();
      const timer = setInterval(() => {
        if (Date.now() - started < seconds * 1000) {
          probes.push([Date.now(), null, null]);
          s.send(`p${probes.length - 1}`);
          return;
        }
        clearInterval(timer);
        setTimeout(() => {
          s.close();
          out({ sent: probes.length, answered: probes.filter((p) => p[1] !== null).length, probes });
          resolve(0);
        }, 500); // the last answers
      }, intervalMs);
    });
  });
}

interface StreamState {
  sock: Socket;
  seed: number;
  port: number;
  server: string;
  banner: string;
  sent: number;
  echoed: number;
  bad: number;
  error: string | null;
  closed: boolean;
  firstAt: number;
  lastAt: number;
  maxGapMs: number;
  gapAt: number;
  /** Silences of GAP_MS or more: [began at, ms] (the first MAX_GAPS). */
  gaps: [number, number][];
}

/**
 * Many long echo streams from one process (one timer for all: 100 streams cost one node process,
 * not 100 curls). Every byte a stream sends must come back in order and equal to what was sent;
 * the longest silence between two arrivals is that stream's blackout. Bounded: SECONDS of sending,
 * then at most DRAIN_MS for the last echoes.
 */
function streams(
  host: string,
  port: number,
  count: number,
  seconds: number,
  intervalMs: number,
  chunk: number,
  pauseFrom = 0,
  pauseFor = 0,
): Promise<number> {
  const DRAIN_MS = 10000;
  const GAP_MS = Math.round(intervalMs * 1.5); // a silence longer than the sending rhythm
  const MAX_GAPS = 20;
  return new Promise((resolve) => {
    const ss: StreamState[] = [];
    let readyPrinted = false;
    const started = Date.now();
    const printReady = () => {
      if (readyPrinted) return;
      readyPrinted = true;
      out({ ready: ss.filter((s) => s.server !== '').length, ports: ss.map((s) => s.port), servers: ss.map((s) => s.server) });
    };
    const arrived = (s: StreamState) => {
      const now = Date.now();
      if (s.lastAt > 0 && now - s.lastAt > s.maxGapMs) {
        s.maxGapMs = now - s.lastAt;
        s.gapAt = s.lastAt;
      }
      if (s.lastAt > 0 && now - s.lastAt >= GAP_MS && s.gaps.length < MAX_GAPS) s.gaps.push([s.lastAt, now - s.lastAt]);
      if (s.firstAt === 0) s.firstAt = now;
      s.lastAt = now;
    };
    for (let i = 0; i < count; i++) {
      const sock = connect({ host, port });
      const s: StreamState = {
        sock,
        seed: 1000 + i,
        port: 0,
        server: '',
        banner: '',
        sent: 0,
        echoed: 0,
        bad: 0,
        error: null,
        closed: false,
        firstAt: 0,
        lastAt: 0,
        maxGapMs: 0,
        gapAt: 0,
        gaps: [],
      };
      ss.push(s);
      sock.setNoDelay(true);
      sock.on('connect', () => (s.port = sock.localPort ?? 0));
      sock.on('data', (d: Buffer) => {
        arrived(s);
        let off = 0;
        if (s.server === '') {
          const nl = d.indexOf(10);
          if (nl < 0) {
            s.banner += d.toString('utf8');
            return;
          }
          s.server = s.banner + d.subarray(0, nl).toString('utf8');
          off = nl + 1;
          if (!readyPrinted && ss.length === count && ss.every((x) => x.server !== '')) printReady();
        }
        const rest = d.subarray(off);
        if (rest.length === 0) return;
        const want = blobChunk(s.seed, s.echoed, rest.length);
        if (s.echoed + rest.length > s.sent || !want.equals(rest)) s.bad += rest.length;
        s.echoed += rest.length;
      });
      sock.on('error', (e: NodeJS.ErrnoException) => (s.error ??= e.code ?? e.message));
      sock.on('close', () => (s.closed = true));
    }
    setTimeout(printReady, 10000).unref(); // some never connected: say so, the run goes on
    const tick = setInterval(() => {
      const elapsed = Date.now() - started;
      const sending = elapsed < seconds * 1000;
      if (sending && elapsed >= pauseFrom * 1000 && elapsed < (pauseFrom + pauseFor) * 1000) return; // idle: nothing sent
      if (sending) {
        for (const s of ss) {
          if (s.closed || s.server === '') continue;
          s.sock.write(blobChunk(s.seed, s.sent, chunk));
          s.sent += chunk;
        }
        return;
      }
      const allBack = ss.every((s) => s.closed || s.echoed >= s.sent);
      if (!allBack && Date.now() - started < seconds * 1000 + DRAIN_MS) return;
      clearInterval(tick);
      printReady();
      const result = ss.map((s) => {
        if (s.error === null && s.server === '') s.error = 'no banner';
        if (s.error === null && s.echoed < s.sent) s.error = 'missing echoes';
        s.sock.destroy();
        return {
          port: s.port,
          server: s.server,
          sent: s.sent,
          echoed: s.echoed,
          bad: s.bad,
          error: s.error,
          maxGapMs: s.maxGapMs,
          gapAt: s.gapAt,
          gaps: s.gaps,
          firstAt: s.firstAt,
          lastAt: s.lastAt,
        };
      });
      out({ streams: result });
      resolve(result.every((r) => r.error === null && r.bad === 0) ? 0 : 1);
    }, intervalMs);
  });
}

interface IdleConn {
  sock: Socket;
  port: number;
  server: string;
  buf: string;
  /** Lines echoed so far: 1 after the first exchange, 2 after the check. */
  echoed: number;
  error: string | null;
  /** When the check's line went out (epoch ms), and how long its echo took. */
  checkAt: number;
  ms: number | null;
}

/**
 * Connections that sit idle (a SYN flood's drop_entry must not take them, docs/defense.md): one
 * exchange each, silence, then one more exchange on SIGUSR1 (or at MAX_SECONDS). A connection
 * whose entry was dropped gets no echo (its data has no entry at uvs) or a reset.
 */
function idleEcho(host: string, port: number, count: number, maxSeconds: number, timeoutMs: number): Promise<number> {
  return new Promise((resolve) => {
    const cs: IdleConn[] = [];
    let readyPrinted = false;
    let checking = false;
    let done = false;
    const printReady = () => {
      if (readyPrinted) return;
      readyPrinted = true;
      out({ ready: cs.filter((c) => c.echoed >= 1).length, ports: cs.map((c) => c.port), servers: cs.map((c) => c.server) });
    };
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(maxTimer);
      clearTimeout(checkTimer);
      printReady();
      const idle = cs.map((c) => {
        c.sock.destroy();
        const ok = c.error === null && c.echoed === 2;
        return { port: c.port, server: c.server, ok, error: ok ? null : (c.error ?? 'timeout'), ms: c.ms };
      });
      out({ idle });
      resolve(idle.every((c) => c.ok) ? 0 : 1);
    };
    let checkTimer: NodeJS.Timeout | undefined;
    const check = () => {
      if (checking) return;
      checking = true;
      for (const [i, c] of cs.entries()) {
        if (c.error !== null) continue;
        c.checkAt = Date.now();
        c.sock.write(`again ${i}\n`);
      }
      checkTimer = setTimeout(finish, timeoutMs);
      if (cs.every((c) => c.error !== null)) finish();
    };
    const maxTimer = setTimeout(check, maxSeconds * 1000);
    process.once('SIGUSR1', check);
    for (let i = 0; i < count; i++) {
      const sock = connect({ host, port });
      const c: IdleConn = { sock, port: 0, server: '', buf: '', echoed: 0, error: null, checkAt: 0, ms: null };
      cs.push(c);
      sock.setNoDelay(true);
      sock.on('connect', () => {
        c.port = sock.localPort ?? 0;
        sock.write(`hello ${i}\n`);
      });
      sock.on('data', (d: Buffer) => {
        c.buf += d.toString('utf8');
        let nl: number;
        while ((nl = c.buf.indexOf('\n')) >= 0) {
          const line = c.buf.slice(0, nl);
          c.buf = c.buf.slice(nl + 1);
          if (!c.server) c.server = line;
          else if (c.echoed === 0 && line === `hello ${i}`) c.echoed = 1;
          else if (c.echoed === 1 && checking && line === `again ${i}`) {
            c.echoed = 2;
            c.ms = Date.now() - c.checkAt;
          } else c.error ??= `unexpected ${JSON.stringify(line.slice(0, 40))}`;
        }
        if (!readyPrinted && cs.length === count && cs.every((x) => x.echoed >= 1)) printReady();
        if (checking && cs.every((x) => x.echoed === 2 || x.error !== null)) finish();
      });
      sock.on('error', (e: NodeJS.ErrnoException) => (c.error ??= e.code ?? e.message));
      sock.on('close', () => {
        c.error ??= 'closed';
        if (checking && cs.every((x) => x.echoed === 2 || x.error !== null)) finish();
      });
    }
    setTimeout(printReady, 10000).unref(); // some never connected: say so, the run goes on
  });
}

const INJECT_PY = `
import socket, sys, random, struct
ifname, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
sent = 0
def csum(b):
    if len(b) % 2: b += b'\\0'
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while t > 0xffff: t = (t & 0xffff) + (t >> 16)
    return (~t) & 0xffff
def ip(proto, payload, src, dst, frag=0x4000, ihl=5, ver=4, badsum=False, totlen=None):
    tl = totlen if totlen is not None else 20 + len(payload)
    h = struct.pack('!BBHHHBBH4s4s', (ver << 4) | ihl, 0, tl, 1, frag, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst))
    c = csum(h) ^ (0x5a5a if badsum else 0)
    return h[:10] + struct.pack('!H', c) + h[12:] + payload
def send(b):
    global sent
    try:
        s.sendto(b, (ifname, 0x0800)); sent += 1
    except OSError:
        pass
vip, client = sys.argv[4], sys.argv[5]
tcp_syn = struct.pack('!HHIIBBHHH', 40000, 80, 1, 0, 5 << 4, 2, 65535, 0, 0)
for i in range(count):
    k = i % 8
    if k == 0: send(bytes(r.getrandbits(8) for _ in range(r.randint(1, 1500))))
    elif k == 1: send(ip(6, tcp_syn, client, vip, badsum=True))
    elif k == 2: send(ip(6, tcp_syn[:10], client, vip))
    elif k == 3: send(ip(6, tcp_syn, client, vip, frag=0x2000))
    elif k == 4: send(ip(6, tcp_syn, client, vip, ihl=3))
    elif k == 5: send(ip(6, tcp_syn, client, vip, ver=5))
    elif k == 6: send(ip(47, b'\\0' * 24, client, vip))
    else: send(ip(6, tcp_syn, client, vip, totlen=2000))
print('{"sent": %d}' % sent)
`;

/** One hand-made TCP segment (IPv4 or IPv6, valid checksums) written into a device, as if routed to it. */
const SPOOF_PY = `
import socket, struct, sys
ifname, src, dst, sport, dport, flags = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def csum(b):
    if len(b) % 2: b += b'\\0'
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while t > 0xffff: t = (t & 0xffff) + (t >> 16)
    return (~t) & 0xffff
tcp = struct.pack('!HHIIBBHHH', sport, dport, 1000, 0, 5 << 4, flags, 65535, 0, 0)
if ':' in src:
    s, d, proto = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst), 0x86dd
    c = csum(s + d + struct.pack('!IxxxB', 20, 6) + tcp)
    hdr = struct.pack('!IHBB16s16s', 0x60000000, 20, 6, 64, s, d)
else:
    s, d, proto = socket.inet_aton(src), socket.inet_aton(dst), 0x0800
    c = csum(s + d + struct.pack('!BBH', 0, 6, 20) + tcp)
    hdr = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 40, 1, 0x4000, 64, 6, 0, s, d)
    hdr = hdr[:10] + struct.pack('!H', csum(hdr)) + hdr[12:]
tcp = tcp[:16] + struct.pack('!H', c) + tcp[18:]
sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(proto))
sock.sendto(hdr + tcp, (ifname, proto))
print('{"sent": 1}')
`;

// Bounded twice (count and seconds); paced by a clock so a slow machine sends fewer, never a burst.
const SYN_FLOOD_PY = `
import socket, sys, random, struct, time
ifname, vip, dport, rate, seconds, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
r = random.Random(seed)
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
def csum(b):
    if len(b) % 2: b += b'\\0'
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while t > 0xffff: t = (t & 0xffff) + (t >> 16)
    return (~t) & 0xffff
dst = socket.inet_aton(vip)
sent = 0
start = time.time()
while sent < count:
    el = time.time() - start
    if el >= seconds: break
    due = min(count, int(el * rate) + 1)
    while sent < due:
        src = bytes([10, 77, r.randrange(256), r.randrange(1, 255)])
        tcp = struct.pack('!HHIIBBHHH', r.randrange(1024, 65536), dport, r.getrandbits(32), 0, 5 << 4, 2, 64240, 0, 0)
        c = csum(src + dst + struct.pack('!BBH', 0, 6, len(tcp)) + tcp)
        tcp = tcp[:16] + struct.pack('!H', c) + tcp[18:]
        h = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 40, r.getrandbits(16), 0x4000, 64, 6, 0, src, dst)
        h = h[:10] + struct.pack('!H', csum(h)) + h[12:]
        try:
            s.sendto(h + tcp, (ifname, 0x0800))
        except OSError:
            pass
        sent += 1
    time.sleep(0.01)
print('{"sent": %d, "seconds": %.2f}' % (sent, time.time() - start))
`;

async function main(argv: string[]): Promise<number> {
  const [cmd, ...a] = argv;
  switch (cmd) {
    case 'hold-echo':
      return holdEcho(a[0]!, Number(a[1]), Number(a[2]), Number(a[3] ?? 200));
    case 'echo-probe':
      return holdEcho(a[0]!, Number(a[1]), Number(a[2]), Number(a[3] ?? 20), true);
    case 'udp-ask':
      return udpAsk(a[0]!, Number(a[1]), a[2] ?? 'ping', Number(a[3] ?? 2000), Number(a[4] ?? 0));
    case 'tcp-connect':
      return tcpConnect(a[0]!, Number(a[1]), Number(a[2] ?? 3000));
    case 'load':
      return load(a[0]!, Number(a[1]), Number(a[2]), Number(a[3] ?? 4), Number(a[4] ?? 0), Number(a[5] ?? 1000));
    case 'udp-session':
      return udpSession(a[0]!, Number(a[1]), Number(a[2] ?? 10), Number(a[3] ?? 200));
    case 'udp-probe':
      return udpProbe(a[0]!, Number(a[1]), Number(a[2] ?? 10), Number(a[3] ?? 10));
    case 'streams':
      return streams(
        a[0]!,
        Number(a[1]),
        Number(a[2] ?? 10),
        Number(a[3] ?? 10),
        Number(a[4] ?? 100),
        Number(a[5] ?? 1000),
        Number(a[6] ?? 0),
        Number(a[7] ?? 0),
      );
    case 'idle-echo':
      return idleEcho(a[0]!, Number(a[1]), Number(a[2] ?? 100), Number(a[3] ?? 300), Number(a[4] ?? 10000));
    case 'inject': {
      const [ifname, count, seed, vip, client] = a;
      process.stdout.write(
        execFileSync('python3', ['-c', INJECT_PY, ifname!, count!, seed!, vip ?? '10.200.0.10', client ?? '10.200.1.2'], {
          encoding: 'utf8',
        }),
      );
      return 0;
    }
    case 'spoof': {
      // spoof IFNAME SRC DST SPORT DPORT FLAGS (the TCP flags byte: 2 SYN, 4 RST, 16 ACK)
      process.stdout.write(execFileSync('python3', ['-c', SPOOF_PY, ...a.slice(0, 6)], { encoding: 'utf8' }));
      return 0;
    }
    case 'syn-flood': {
      const [ifname, vip, port, rate, seconds, count, seed] = a;
      process.stdout.write(
        execFileSync(
          'python3',
          ['-c', SYN_FLOOD_PY, ifname!, vip!, port ?? '80', rate ?? '100', seconds ?? '10', count ?? '1000', seed ?? '1'],
          { encoding: 'utf8' },
        ),
      );
      return 0;
    }
    default:
      console.error(
        'usage: tools hold-echo|echo-probe|udp-ask|tcp-connect|load|udp-session|udp-probe|streams|idle-echo|inject|spoof|syn-flood …',
      );
      return 2;
  }
}

// Exit once stdout is flushed: a pipe takes a large JSON line (thousands of load records) in
// several writes, and process.exit() right away would cut it.
main(process.argv.slice(2)).then((c) => process.stdout.write('', () => process.exit(c)));
