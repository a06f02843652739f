/**
 * IPv4 and IPv6 addresses for the tools that accept both (uvs simulate, the disruption preview):
 * parsing, RFC 5952 text, the kernel's 32-bit fold (what sh/dh/mh/lblc hash), prefix masks and
 * "addr:port" / "[addr]:port" endpoints. The dataplane itself is IPv4-only (lb/addr.ts).
 */

export interface Inet {
  family: 4 | 6;
  /** Big-endian 32-bit words: one for IPv4, four for IPv6 (uint32 values). */
  words: number[];
}

const V4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

function parseV4Word(s: string): number | null {
  const m = V4.exec(s);
  if (!m) return null;
  let v = 0;
  for (let i = 1; i <= 4; i++) {
    const o = m[i]!;
    if (Number(o) > 255 || (o.length > 1 && o[0] === '0')) return null;
    v = v * 256 + Number(o);
  }
  return v;
}

function parseV6(s: string): number[] | null {
  if (!/^[0-9a-fA-F:.]+$/.test(s)) return null;
  let text = s;
  if (s.includes('.')) {
    // A trailing dotted quad stands for the last two groups.
    const c = s.lastIndexOf(':');
    const v4 = parseV4Word(s.slice(c + 1));
    if (v4 === null) return null;
    text = `${s.slice(0, c + 1)}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const side = (h: string): number[] | null => {
    if (h === '') return [];
    const out: number[] = [];
    for (const g of h.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const head = side(halves[0]!);
  const rest = halves.length === 2 ? side(halves[1]!) : [];
  if (head === null || rest === null) return null;
  const given = head.length + rest.length;
  if (halves.length === 2 ? given > 7 : given !== 8) return null;
  const groups = [...head, ...new Array<number>(8 - given).fill(0), ...rest];
  const words: number[] = [];
  for (let i = 0; i < 8; i += 2) words.push(((groups[i]! << 16) | groups[i + 1]!) >>> 0);
  return words;
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
  const g: number[] = [];
  for (const w of a.words) g.push(w >>> 16, w & 0xffff);
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    return `::ffff:${formatInet({ family: 4, words: [a.words[3]!] })}`;
  }
  let bestAt = -1;
  let bestLen = 1; // a single 0 group is not shortened (RFC 5952 4.2.2)
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestAt = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (xs: number[]): string => xs.map((x) => x.toString(16)).join(':');
  if (bestAt < 0) return hex(g);
  return `${hex(g.slice(0, bestAt))}::${hex(g.slice(bestAt + bestLen))}`;
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
