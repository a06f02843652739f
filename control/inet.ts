/**
 * IPv4 and IPv6 addresses for the tools that accept both (uvs simulate, the disruption preview):
 * parsing, RFC 5952 text, the kernel's 32-bit fold (what sh/dh/mh/lblc hash), prefix masks and
 * "addr:port" / "[addr]:port" endpoints, on top of lb/addr.ts (the one parser and printer of
 * address text).
 */
import { formatIPv6, parseIPv4, parseIPv6 } from '../lb/addr';

export interface Inet {
  family: 4 | 6;
  /** Big-endian 32-bit words: one for IPv4, four for IPv6 (uint32 values). */
  words: number[];
}

function parseV4Word(s: string): number | null {
  const v = parseIPv4(s);
  return v === null ? null : v >>> 0;
}

function parseV6(s: string): number[] | null {
  const w = parseIPv6(s);
  return w === null ? null : Array.from(w, (x) => x >>> 0);
}

/** Parses dotted-quad IPv4 or textual IPv6; null when it is neither. */
export function parseInet(s: string): Inet | null {
  const v4 = parseV4Word(s);
  if (v4 !== null) return { family: 4, words: [v4] };
  if (!s.includes(':')) return null;
  const w = parseV6(s);
  return w === null ? null : { family: 6, words: w };
}

/** The kernel's addr_fold: the address itself (IPv4) or the XOR of the four words, as int32. */
export function fold(a: Inet): number {
  return a.words.reduce((x, w) => x ^ w, 0) | 0;
}

/** Text form: dotted quad, or RFC 5952 (lowercase, longest zero run as "::", ::ffff:a.b.c.d). */
export function formatInet(a: Inet): string {
  if (a.family === 4) {
    const v = a.words[0]!;
    return `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`;
  }
  return formatIPv6(a.words);
}

export function formatEndpoint(a: Inet, port: number): string {
  return a.family === 4 ? `${formatInet(a)}:${port}` : `[${formatInet(a)}]:${port}`;
}

/** "a.b.c.d:port" or "[v6]:port"; null when malformed. */
export function parseEndpoint(s: string): { addr: Inet; port: number } | null {
  let host: string;
  let portText: string;
  if (s.startsWith('[')) {
    const end = s.indexOf(']:');
    if (end < 0) return null;
    host = s.slice(1, end);
    portText = s.slice(end + 2);
  } else {
    const c = s.lastIndexOf(':');
    if (c < 0 || s.indexOf(':') !== c) return null;
    host = s.slice(0, c);
    portText = s.slice(c + 1);
  }
  if (!/^\d{1,5}$/.test(portText) || Number(portText) > 65535) return null;
  const addr = parseInet(host);
  if (addr === null || (addr.family === 6) !== s.startsWith('[')) return null;
  return { addr, port: Number(portText) };
}

/** The address with only its first `bits` bits kept. */
export function maskPrefix(a: Inet, bits: number): Inet {
  const words = a.words.map((w, i) => {
    const keep = Math.max(0, Math.min(32, bits - 32 * i));
    const m = keep === 0 ? 0 : (~0 << (32 - keep)) >>> 0;
    return (w & m) >>> 0;
  });
  return { family: a.family, words };
}

/** IPv4 address AND a dotted netmask word (any mask, as the kernel takes it). */
export function maskV4(a: Inet, mask: number): Inet {
  return { family: 4, words: [(a.words[0]! & mask) >>> 0] };
}
