/**
 * Host and service names for listings without -n, found the way ipvsadm finds them
 * (ipvsadm.c addrport_to_anyname → gethostbyaddr, getservbyport):
 *
 * - services: the first /etc/services line with that port and protocol, its official name (the
 *   first column: 80/tcp → http, 8080/tcp → http-alt). The file is parsed once per process;
 * - hosts: /etc/hosts first, the first line with that address and its first name (glibc's
 *   `hosts: files dns`), then a DNS PTR query.
 *
 * ipvsadm asks gethostbyaddr once per printed address and waits for each (resolv.conf's 5 s × 2
 * tries when no server answers). A listing here asks for all its addresses at once, each once,
 * and gives DNS one overall budget — REVERSE_BUDGET_MS for the whole listing, at most
 * MAX_REVERSE queries; what has no answer by then prints as a number, as ipvsadm prints an
 * address without a PTR record.
 */
import { promises as dnsPromises } from 'node:dns';
import { readFileSync } from 'node:fs';
import { canonAddr, parseIPv4, parseIPv6 } from '../../net/addr';
import type { Names } from './format';

/** The whole listing's DNS budget: a script that lists every few seconds must not stall. */
export const REVERSE_BUDGET_MS = 300;
/** Distinct addresses asked per listing (a -Lc of 100 000 clients must not send 100 000 queries). */
export const MAX_REVERSE = 256;

/** The part of dns.promises.Resolver used here (a test points a real one at its own server). */
export interface ReverseResolver {
  reverse(address: string): Promise<string[]>;
  cancel(): void;
}

export interface NameOptions {
  servicesFile?: string;
  hostsFile?: string;
  /** Default: a c-ares resolver from /etc/resolv.conf, one try, timing out with the budget. */
  resolver?: ReverseResolver;
  budgetMs?: number;
  maxReverse?: number;
}

function readLines(file: string): string[] {
  try {
    return readFileSync(file, 'utf8').split('\n');
  } catch {
    return [];
  }
}

const servicesCache = new Map<string, Map<string, string>>();

/** "port/proto" → official name, first line wins (getservbyport's files backend). */
export function servicesTable(file = '/etc/services'): Map<string, string> {
  let t = servicesCache.get(file);
  if (t) return t;
  t = new Map();
  for (const l of readLines(file)) {
    const [name, portProto] = l.replace(/#.*/, '').trim().split(/\s+/);
    if (!name || !portProto || !/^\d+\/\w+$/.test(portProto)) continue;
    if (!t.has(portProto)) t.set(portProto, name);
  }
  servicesCache.set(file, t);
  return t;
}

/** address (canonical) → first name of the first /etc/hosts line with it. */
export function hostsTable(file = '/etc/hosts'): Map<string, string> {
  const t = new Map<string, string>();
  for (const l of readLines(file)) {
    const [addr, name] = l.replace(/#.*/, '').trim().split(/\s+/);
    if (!addr || !name) continue;
    const key = parseIPv4(addr) !== null ? addr : parseIPv6(addr) !== null ? (canonAddr(addr) as string) : null;
    if (key !== null && !t.has(key)) t.set(key, name);
  }
  return t;
}

/**
 * Looks up the names of `addresses` (any spelling; ports need no lookup beyond the file) and
 * returns the answers as format.ts's Names. Never rejects: a failure is a number printed.
 */
export async function resolveNames(addresses: Iterable<string>, opts: NameOptions = {}): Promise<Names> {
  const services = servicesTable(opts.servicesFile);
  const hosts = hostsTable(opts.hostsFile);
  const budget = opts.budgetMs ?? REVERSE_BUDGET_MS;
  const found = new Map<string, string>();
  const ask: string[] = [];
  for (const a of new Set([...addresses].map((x) => canonAddr(x) as string))) {
    const h = hosts.get(a);
    if (h !== undefined) found.set(a, h);
    else if (ask.length < (opts.maxReverse ?? MAX_REVERSE)) ask.push(a);
  }
  if (ask.length > 0) {
    const resolver = opts.resolver ?? new dnsPromises.Resolver({ timeout: budget, tries: 1 });
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, budget);
    });
    const queries = Promise.all(
      ask.map((a) =>
        resolver.reverse(a).then(
          (names) => {
            if (names[0]) found.set(a, names[0]);
          },
          () => undefined, // NXDOMAIN, no server, cancelled: the number is printed
        ),
      ),
    );
    await Promise.race([queries, deadline]);
    clearTimeout(timer);
    resolver.cancel();
  }
  return {
    host: (address) => found.get(canonAddr(address) as string) ?? null,
    service: (port, protocol) => services.get(`${port}/${protocol}`) ?? null,
  };
}
