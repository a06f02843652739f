/** IPv4 addresses as signed 32-bit integers (the first octet in the top byte). */

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
