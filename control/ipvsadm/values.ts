/**
 * ipvsadm.c's value parsers, on strings: string_to_number, parse_timeout, inet_aton (glibc's),
 * parse_service, parse_netmask, parse_sched_flags. Each fails as ipvsadm's does (command.ts).
 */
import { isIPv6 } from 'node:net';
import { formatIPv6, parseIPv6 } from '../../net/addr';
import { DEFAULT_SCHEDULER, flagScheduler, SCHED_FLAG_NAMES } from '../../schedulers/registry';
import { fail, type ParseEnv } from './command';
import { DEFAULT_PERSISTENT_TIMEOUT } from './tables';

/** string_to_number(): strtol base 10, all of the string, within [min, max]; else -1. */
export function stringToNumber(s: string, min: number, max: number): number {
  if (!/^[ \t\n\v\f\r]*[+-]?\d+$/.test(s)) return -1;
  const n = Number(s.trim());
  return Number.isSafeInteger(n) && n >= min && n <= max ? n + 0 : -1;
}

export function parseTimeout(buf: string | null, min: number, max: number): number {
  if (buf === null) return DEFAULT_PERSISTENT_TIMEOUT;
  const i = stringToNumber(buf, min, max);
  if (i === -1) fail(`invalid timeout value \`${buf}' specified`);
  return i;
}

/**
 * glibc inet_aton(): 1–4 parts separated by dots, each decimal, octal (leading 0) or hex (0x);
 * the last part fills the remaining bytes ("10.1" = 10.0.0.1). Returns the address as a number.
 */
export function inetAton(s: string): number | null {
  const parts: number[] = [];
  let i = 0;
  let val = 0;
  let digit = false;
  const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';
  for (;;) {
    let c = s[i];
    if (!isDigit(c)) return null;
    val = 0;
    digit = false;
    let base = 10;
    if (c === '0') {
      c = s[++i];
      if (c === 'x' || c === 'X') {
        base = 16;
        c = s[++i];
      } else {
        base = 8;
        digit = true;
      }
    }
    for (;;) {
      if (isDigit(c)) {
        if (base === 8 && (c === '8' || c === '9')) return null;
        val = val * base + Number(c);
      } else if (base === 16 && c !== undefined && /^[0-9a-fA-F]$/.test(c)) val = val * 16 + parseInt(c, 16);
      else break;
      if (val > 0xffffffff) return null;
      digit = true;
      c = s[++i];
    }
    if (c === '.') {
      if (parts.length > 2 || val > 0xff) return null;
      parts.push(val);
      i++;
      continue;
    }
    if (c !== undefined && !/^\s$/.test(c)) return null;
    break;
  }
  if (!digit) return null;
  if (val > [0xffffffff, 0xffffff, 0xffff, 0xff][parts.length]!) return null;
  return parts.reduce((a, p, k) => a + p * 2 ** (24 - 8 * k), val);
}

function dotted(a: number): string {
  return [a >>> 24, (a >>> 16) & 255, (a >>> 8) & 255, a & 255].join('.');
}

export interface Endpoint {
  af: 4 | 6;
  address: string;
  port: number;
}
export const SERVICE_ADDR = 1;
export const SERVICE_PORT = 2;

/** parse_service(): host[:port] or [IPv6]:port; a string of digits only is no address. */
export function parseService(buf: string, protocol: string, env: ParseEnv): { bits: number; ep: Endpoint } {
  const none = { bits: 0, ep: { af: 4 as const, address: '', port: 0 } };
  if (/^\d*$/.test(buf)) return none;
  let host = buf;
  let portStr: string | null = null;
  if (host[0] === '[') {
    const close = host.indexOf(']');
    if (close < 0 || host[close + 1] !== ':') return none;
    portStr = host.slice(close + 2);
    host = host.slice(1, close);
  }
  let ep: Endpoint;
  // One spelling per IPv6 address (RFC 5952, as uvsd stores it): every lookup — -L, -Z, -D, -a
  // — then finds "[FD00:200:0::10]" as the service "[fd00:200::10]" (inet_pton compares bytes).
  if (isIPv6(host)) ep = { af: 6, address: formatIPv6(parseIPv6(host)!), port: 0 };
  else {
    // As in ipvsadm, the port of "[1.2.3.4]:80" is looked for inside the brackets (and not found).
    const c = host.lastIndexOf(':');
    portStr = c < 0 ? null : host.slice(c + 1);
    if (c >= 0) host = host.slice(0, c);
    const a = inetAton(host);
    const addr = a !== null ? dotted(a) : (env.lookupHost?.(host) ?? null);
    if (addr === null) return none;
    ep = { af: 4, address: addr, port: 0 };
  }
  let bits = SERVICE_ADDR;
  if (portStr !== null) {
    bits |= SERVICE_PORT;
    const n = stringToNumber(portStr, 0, 65535);
    const p = n !== -1 ? n : (env.lookupService?.(portStr, protocol) ?? null);
    if (p === null) return none;
    ep.port = p;
  }
  return { bits, ep };
}

/** parse_netmask(): inet_aton or a host name. */
export function parseNetmask(buf: string, env: ParseEnv): string | null {
  const a = inetAton(buf);
  if (a !== null) return dotted(a);
  return env.lookupHost?.(buf) ?? null;
}

/** parse_sched_flags(): sh-* need -s sh and mh-* need -s mh, in the same command (default wlc). */
export function parseSchedFlags(sched: string, arg: string): string[] {
  const s = sched || DEFAULT_SCHEDULER;
  const out: string[] = [];
  for (const flag of arg.split(',').filter((f) => f !== '')) {
    if (!SCHED_FLAG_NAMES.includes(flag)) fail(`invalid scheduler flag \`${flag}'`);
    const needs = flagScheduler(flag);
    if (needs !== null && s !== needs) fail(`incompatible scheduler flag \`${flag}'`);
    if (!out.includes(flag)) out.push(flag);
  }
  return out;
}
