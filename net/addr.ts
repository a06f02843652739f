/**
 * Addresses: the one parser and printer of address text, for every folder.
 *
 *  - IPv4 as a signed 32-bit integer (the first octet in the top byte), IPv6 as four signed
 *    32-bit words, most significant first — the dataplane's and the connection table's form.
 *  - CIDRs of either family, netmasks, "addr:port" / "[v6]:port" endpoints and listeners.
 *  - Inet: an address tagged with its family, as unsigned words, for the tools that take both
 *    (uvs simulate, the disruption preview, the scheduler tests): the kernel's 32-bit fold (what
 *    sh/dh/mh/lblc hash) and prefix masks.
 */

// ── IPv4 ────────────────────────────────────────────────────────────────────────────────────

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Parses dotted-quad IPv4; returns null when it is not one. */
export function parseIPv4(s: string): number | null {
  const m = IPV4.exec(s);
  if (!m) return null;
  let v = 0;
  for (let i = 1; i <= 4; i++) {
    const o = Number(m[i]);
    if (o > 255 || (m[i]!.length > 1 && m[i]![0] === '0')) return null;
    v = (v << 8) | o;
  }
  return v | 0;
}

export function formatIPv4(a: number): string {
  return `${(a >>> 24) & 255}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`;
}

export interface Cidr {
  net: number;
  mask: number;
  bits: number;
}

export function parseCidr(s: string): Cidr | null {
  const [addr, bitsStr, extra] = s.split('/');
  if (extra !== undefined || addr === undefined) return null;
  const a = parseIPv4(addr);
  if (a === null) return null;
  const bits = bitsStr === undefined ? 32 : Number(bitsStr);
  if (!Number.isInteger(bits) || bits < 0 || bits > 32 || (bitsStr !== undefined && !/^\d+$/.test(bitsStr))) return null;
  const mask = bits === 0 ? 0 : (~0 << (32 - bits)) | 0;
  return { net: a & mask, mask, bits };
}

export function formatCidr(c: Cidr): string {
  return `${formatIPv4(c.net)}/${c.bits}`;
}

export function inCidr(a: number, c: Cidr): boolean {
  return (a & c.mask) === c.net;
}

/** Dotted netmask → prefix length, or null when the mask is not contiguous. */
export function maskBits(mask: number): number | null {
  let bits = 0;
  while (bits < 32 && mask & (0x80000000 >>> bits)) bits++;
  const back = bits === 0 ? 0 : (~0 << (32 - bits)) | 0;
  return back === (mask | 0) ? bits : null;
}

// ── IPv6 ────────────────────────────────────────────────────────────────────────────────────
// An IPv6 address is four signed 32-bit words, most significant first (w0 holds the first two
// groups). In the dataplane the last word is the "low" word that sits where an IPv4 address
// would; the other three travel beside it (conntrack/layout.ts E_*_HI).

/** Parses an IPv6 address (RFC 4291 text forms, with :: and an embedded dotted quad); null if not one. */
export function parseIPv6(s: string): Int32Array | null {
  if (s.length < 2 || s.length > 45 || !/^[0-9a-fA-F:.]+$/.test(s)) return null;
  let text = s;
  const quad = /(^|:)(\d{1,3}(?:\.\d{1,3}){3})$/.exec(text);
  if (quad) {
    // A trailing dotted quad is the last two groups.
    const v4 = parseIPv4(quad[2]!);
    if (v4 === null) return null;
    text = `${text.slice(0, text.length - quad[2]!.length)}${((v4 >>> 16) & 0xffff).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const parts = text.split('::');
  if (parts.length > 2) return null;
  const parse = (p: string): number[] | null => {
    if (p === '') return [];
    const out: number[] = [];
    for (const g of p.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const head = parse(parts[0]!);
  const rest = parts.length === 2 ? parse(parts[1]!) : [];
  if (!head || !rest) return null;
  if (parts.length === 1 ? head.length !== 8 : head.length + rest.length > 7) return null;
  const groups = [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest];
  const w = new Int32Array(4);
  for (let i = 0; i < 4; i++) w[i] = (groups[2 * i]! << 16) | groups[2 * i + 1]!;
  return w;
}

/** RFC 5952 text: lower case, the longest run (≥ 2) of zero groups as ::, ::ffff:a.b.c.d. */
export function formatIPv6(w: ArrayLike<number>, off = 0): string {
  const g: number[] = [];
  for (let i = 0; i < 4; i++) g.push((w[off + i]! >>> 16) & 0xffff, w[off + i]! & 0xffff);
  // An IPv4-mapped address keeps its dotted quad (RFC 5952 §5).
  if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) return `::ffff:${formatIPv4(w[off + 3]!)}`;
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (xs: number[]) => xs.map((x) => x.toString(16)).join(':');
  if (best < 0) return hex(g);
  return `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

/** An address of either family, as the config and the API write it. */
export type Family = 4 | 6;
export function familyOf(s: string): Family | null {
  if (parseIPv4(s) !== null) return 4;
  if (parseIPv6(s) !== null) return 6;
  return null;
}

export interface Cidr6 {
  net: Int32Array;
  mask: Int32Array;
  bits: number;
}

/** The mask words of an IPv6 prefix length. */
export function prefixMask6(bits: number): Int32Array {
  const m = new Int32Array(4);
  for (let i = 0; i < 4; i++) {
    const b = Math.max(0, Math.min(32, bits - 32 * i));
    m[i] = b === 0 ? 0 : (~0 << (32 - b)) | 0;
  }
  return m;
}

export function parseCidr6(s: string): Cidr6 | null {
  const [addr, bitsStr, extra] = s.split('/');
  if (extra !== undefined || addr === undefined) return null;
  const a = parseIPv6(addr);
  if (a === null) return null;
  const bits = bitsStr === undefined ? 128 : Number(bitsStr);
  if (!Number.isInteger(bits) || bits < 0 || bits > 128 || (bitsStr !== undefined && !/^\d+$/.test(bitsStr))) return null;
  const mask = prefixMask6(bits);
  const net = new Int32Array(4);
  for (let i = 0; i < 4; i++) net[i] = a[i]! & mask[i]!;
  return { net, mask, bits };
}

export function inCidr6(a: ArrayLike<number>, off: number, c: Cidr6): boolean {
  for (let i = 0; i < 4; i++) if ((a[off + i]! & c.mask[i]!) !== c.net[i]) return false;
  return true;
}

/** Either family's CIDR, for config checks. */
export function isCidr(s: string): boolean {
  return parseCidr(s) !== null || parseCidr6(s) !== null;
}

/** Whether an address (IPv4 or IPv6 text) is inside one of the CIDRs of its own family. */
export function inAnyCidr(address: string, cidrs: string[]): boolean {
  const a4 = parseIPv4(address);
  const a6 = a4 === null ? parseIPv6(address) : null;
  return cidrs.some((c) => {
    if (a4 !== null) {
      const n = parseCidr(c);
      return n !== null && inCidr(a4, n);
    }
    const n6 = parseCidr6(c);
    return a6 !== null && n6 !== null && inCidr6(a6, 0, n6);
  });
}

/** One spelling per address: IPv6 in RFC 5952 form, anything else unchanged. */
export function canonAddr(s: unknown): unknown {
  if (typeof s !== 'string' || !s.includes(':')) return s;
  const w = parseIPv6(s);
  return w ? formatIPv6(w) : s;
}

// ── host:port ───────────────────────────────────────────────────────────────────────────────

/** `addr:port`, IPv6 in brackets (ipvsadm's and URLs' form). */
export function hostPort(addr: string, port: number): string {
  return addr.includes(':') ? `[${addr}]:${port}` : `${addr}:${port}`;
}

/**
 * "host:port" → its parts, IPv6 as "[addr]:port" (brackets removed from `host`; `bracketed` says
 * which form it was). The host is not checked beyond that: a name, IPv4 or IPv6 text. Port 0–65535;
 * null when malformed.
 */
export function splitHostPort(s: string): { host: string; port: number; bracketed: boolean } | null {
  const b = /^\[([^\]]+)\]:(\d+)$/.exec(s);
  const m = b ?? /^([^:]+):(\d+)$/.exec(s);
  if (!m) return null;
  const port = Number(m[2]);
  return port >= 0 && port <= 65535 ? { host: m[1]!, port, bracketed: b !== null } : null;
}

// ── Inet: either family, tagged ─────────────────────────────────────────────────────────────

export interface Inet {
  family: Family;
  /** Big-endian 32-bit words: one for IPv4, four for IPv6 (uint32 values). */
  words: number[];
}

/** Parses dotted-quad IPv4 or textual IPv6; null when it is neither. */
export function parseInet(s: string): Inet | null {
  const v4 = parseIPv4(s);
  if (v4 !== null) return { family: 4, words: [v4 >>> 0] };
  if (!s.includes(':')) return null;
  const w = parseIPv6(s);
  return w === null ? null : { family: 6, words: Array.from(w, (x) => x >>> 0) };
}

/** The kernel's addr_fold: the address itself (IPv4) or the XOR of the four words, as int32. */
export function fold(a: Inet): number {
  return a.words.reduce((x, w) => x ^ w, 0) | 0;
}

/** Text form: dotted quad, or RFC 5952 (lowercase, longest zero run as "::", ::ffff:a.b.c.d). */
export function formatInet(a: Inet): string {
  return a.family === 4 ? formatIPv4(a.words[0]!) : formatIPv6(a.words);
}

export function formatEndpoint(a: Inet, port: number): string {
  return hostPort(formatInet(a), port);
}

/** "a.b.c.d:port" or "[v6]:port" (the family must match the form; at most 5 port digits); null when malformed. */
export function parseEndpoint(s: string): { addr: Inet; port: number } | null {
  const hp = splitHostPort(s);
  if (hp === null || !/:\d{1,5}$/.test(s)) return null;
  const addr = parseInet(hp.host);
  if (addr === null || (addr.family === 6) !== hp.bracketed) return null;
  return { addr, port: hp.port };
}

/** The address with only its first `bits` bits kept. */
export function maskPrefix(a: Inet, bits: number): Inet {
  const m = prefixMask6(bits);
  return { family: a.family, words: a.words.map((w, i) => (w & m[i]!) >>> 0) };
}

/** IPv4 address AND a dotted netmask word (any mask, as the kernel takes it). */
export function maskV4(a: Inet, mask: number): Inet {
  return { family: 4, words: [(a.words[0]! & mask) >>> 0] };
}
