/**
 * ICMP echo health checks (`healthCheck.type: ping`, keepalived's PING_CHECK): an echo request to
 * the real server, healthy when its echo reply comes back within the timeout. IPv4 ICMP and IPv6
 * ICMPv6, over the npm `raw-socket` package: one raw socket per family for all checks, opened on
 * the first ping and closed with the checker. Replies are matched by identifier (random per
 * socket), sequence number and source address, so other pings on the host (and, on IPv4, our own
 * requests to a local address, which a raw socket also receives) are ignored.
 *
 * Why raw-socket here and uvs's own addon (lb/native/tun.c) on the packet paths: a health check
 * sends one packet per interval per server, where a callback and a Buffer per packet cost nothing,
 * and raw-socket already integrates the socket with Node's event loop (uv_poll), which the addon's
 * batch reads (poll + recv loop, for worker threads that own their loop) do not.
 */
import { createRequire } from 'node:module';
import { randomInt } from 'node:crypto';
import { parseIPv4 } from '../net/addr';

interface RawSocket {
  on(ev: 'message', fn: (buf: Buffer, source: string) => void): void;
  on(ev: 'error', fn: (e: Error) => void): void;
  send(buf: Buffer, off: number, len: number, addr: string, cb: (e: Error | null, bytes: number) => void): void;
  close(): void;
}
interface RawSocketModule {
  createSocket(o: { protocol: number; addressFamily?: number }): RawSocket;
  createChecksum(...bufs: Buffer[]): number;
  writeChecksum(buf: Buffer, off: number, sum: number): void;
  AddressFamily: { IPv4: number; IPv6: number };
  Protocol: { ICMP: number; ICMPv6: number };
}

let raw: RawSocketModule | null = null;
function rawSocket(): RawSocketModule {
  // Loaded on first use: a configuration without ping checks never needs the native module.
  raw ??= createRequire(__filename)('raw-socket') as RawSocketModule;
  return raw;
}

const ICMP_ECHO = 8;
const ICMP_ECHOREPLY = 0;
const ICMP6_ECHO = 128;
const ICMP6_ECHOREPLY = 129;
/** Bytes of payload after the 8-byte echo header (a marker plus the send time, as ping does). */
const PAYLOAD = 16;

interface Pending {
  addr: string;
  resolve: (err: string | null) => void;
  timer: NodeJS.Timeout;
}

class Pinger {
  private sock: RawSocket | null = null;
  private readonly v6: boolean;
  private readonly id = randomInt(1, 0xffff);
  private seq = 0;
  private readonly pending = new Map<number, Pending>();

  constructor(v6: boolean) {
    this.v6 = v6;
  }

  private open(): RawSocket {
    if (this.sock) return this.sock;
    const r = rawSocket();
    const s = this.v6
      ? r.createSocket({ protocol: r.Protocol.ICMPv6, addressFamily: r.AddressFamily.IPv6 })
      : r.createSocket({ protocol: r.Protocol.ICMP });
    s.on('message', (buf, source) => this.onMessage(buf, source));
    // raw-socket closes the socket after an error: fail what is waiting, reopen on the next ping.
    s.on('error', (e) => {
      this.sock = null;
      for (const [seq, p] of this.pending) this.settle(seq, p, `raw socket: ${e.message}`);
    });
    this.sock = s;
    return s;
  }

  private onMessage(buf: Buffer, source: string): void {
    // IPv4 raw sockets deliver the IP header; IPv6 ones start at the ICMPv6 header.
    const at = this.v6 ? 0 : (buf[0]! & 15) << 2;
    if (buf.length < at + 8) return;
    if (buf[at] !== (this.v6 ? ICMP6_ECHOREPLY : ICMP_ECHOREPLY) || buf.readUInt16BE(at + 4) !== this.id) return;
    const seq = buf.readUInt16BE(at + 6);
    const p = this.pending.get(seq);
    // Only the pinged address may answer (source is the kernel's text form, as we sent it).
    if (p && sameAddr(p.addr, source, this.v6)) this.settle(seq, p, null);
  }

  private settle(seq: number, p: Pending, err: string | null): void {
    clearTimeout(p.timer);
    this.pending.delete(seq);
    p.resolve(err);
  }

  ping(addr: string, timeoutMs: number): Promise<string | null> {
    return new Promise((resolve) => {
      let s: RawSocket;
      try {
        s = this.open();
      } catch (e) {
        resolve(`raw socket: ${(e as Error).message}`);
        return;
      }
      let seq = (this.seq = (this.seq + 1) & 0xffff);
      while (this.pending.has(seq)) seq = this.seq = (this.seq + 1) & 0xffff;
      const b = Buffer.alloc(8 + PAYLOAD);
      b[0] = this.v6 ? ICMP6_ECHO : ICMP_ECHO;
      b.writeUInt16BE(this.id, 4);
      b.writeUInt16BE(seq, 6);
      b.write('uvs-ping', 8, 'latin1');
      b.writeDoubleBE(Date.now(), 16);
      // ICMPv6's checksum covers a pseudo-header: the kernel fills it for raw ICMPv6 sockets.
      if (!this.v6) rawSocket().writeChecksum(b, 2, rawSocket().createChecksum(b));
      const p: Pending = { addr, resolve, timer: setTimeout(() => this.settle(seq, p, `no echo reply within ${timeoutMs} ms`), timeoutMs) };
      this.pending.set(seq, p);
      s.send(b, 0, b.length, addr, (e) => {
        if (e && this.pending.get(seq) === p) this.settle(seq, p, (e as NodeJS.ErrnoException).code ?? e.message);
      });
    });
  }

  close(): void {
    for (const [seq, p] of this.pending) this.settle(seq, p, 'health checks stopped');
    this.sock?.close();
    this.sock = null;
  }
}

function sameAddr(a: string, b: string, v6: boolean): boolean {
  if (!v6) return parseIPv4(a) === parseIPv4(b);
  return a.toLowerCase() === b.toLowerCase() || expand6(a) === expand6(b);
}

function expand6(a: string): string {
  const [head, tail] = a.toLowerCase().split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const mid = tail === undefined ? [] : Array(8 - h.length - t.length).fill('0');
  return [...h, ...mid, ...t].map((x) => x.replace(/^0+(?=.)/, '')).join(':');
}

let v4: Pinger | null = null;
let v6: Pinger | null = null;

/** One echo request; resolves null on a reply within timeoutMs, else the reason. */
export function pingCheck(addr: string, timeoutMs: number): Promise<string | null> {
  const p = addr.includes(':') ? (v6 ??= new Pinger(true)) : (v4 ??= new Pinger(false));
  return p.ping(addr, timeoutMs);
}

/** Closes the raw sockets (they keep the event loop alive); the next ping reopens them. */
export function closePingSockets(): void {
  v4?.close();
  v6?.close();
  v4 = v6 = null;
}
