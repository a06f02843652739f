/**
 * Who holds a TCP port uvsd could not listen on (EADDRINUSE): the listening sockets on that port
 * in this network namespace's /proc/net/tcp and /proc/net/tcp6 (state 0A = TCP_LISTEN, whose
 * local address is the one asked for, a wildcard, or its IPv4-mapped form), each with its owner
 * uid and inode, and the processes whose file descriptors hold that inode (/proc/<pid>/fd/* →
 * `socket:[inode]`). Linux prints the addresses as the words of `struct in_addr` / `in6_addr` in
 * host byte order (`tcp4_seq_show`/`tcp6_seq_show`, net/ipv4/tcp_ipv4.c, net/ipv6/tcp_ipv6.c,
 * format "%08X:%04X"), so they are compared in that form.
 *
 * Read only when a listen fails, never on a request path. The /proc/*\/fd walk is the costly
 * part (one readlink per open file on the host): `describeHolders` skips it when the holder's
 * inode is the one it named last time.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { endianness } from 'node:os';
import { formatIPv4, formatIPv6, parseIPv4, parseIPv6 } from '../net/addr';

export interface PortHolder {
  /** The listening socket's local address as /proc shows it, decoded (e.g. 0.0.0.0:10256). */
  local: string;
  uid: number;
  user: string | null;
  inode: number;
  /** Processes holding the socket (several after a fork); empty when none could be read. */
  processes: { pid: number; comm: string; cmdline: string }[];
}

const TCP_LISTEN = '0A';
const LE = endianness() === 'LE';

/** A 32-bit word of a network-order address as /proc prints it (host order, %08X). */
function procWord(w: number): string {
  const x = LE ? (((w & 0xff) << 24) | ((w & 0xff00) << 8) | ((w >>> 8) & 0xff00) | (w >>> 24)) >>> 0 : w >>> 0;
  return x.toString(16).toUpperCase().padStart(8, '0');
}

/** The /proc spellings of a host's address that conflict with a listener on it: itself, the wildcards, its IPv4-mapped form. */
function conflicting(host: string): Set<string> {
  const h = host.replace(/^\[|\]$/g, '');
  const out = new Set<string>(['00000000', '0'.repeat(32)]);
  const v4 = parseIPv4(h);
  if (v4 !== null) {
    out.add(procWord(v4));
    out.add(procWord(0) + procWord(0) + procWord(0xffff) + procWord(v4)); // ::ffff:a.b.c.d
  }
  const v6 = parseIPv6(h);
  if (v6 !== null) out.add(Array.from(v6, procWord).join(''));
  return out;
}

/** A /proc address back to text (for the message). */
function decode(hex: string, port: number): string {
  const words = hex.match(/.{8}/g)!.map((w) => {
    const x = Number.parseInt(w, 16);
    return (LE ? ((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24) : x) | 0;
  });
  return words.length === 1 ? `${formatIPv4(words[0]!)}:${port}` : `[${formatIPv6(words)}]:${port}`;
}

/** Listening sockets on `host:port` (or a wildcard covering it) in this network namespace. */
export function listeners(host: string, port: number): Omit<PortHolder, 'processes' | 'user'>[] {
  const want = conflicting(host);
  const out: Omit<PortHolder, 'processes' | 'user'>[] = [];
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue; // no IPv6 in this kernel
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
      const c = line.trim().split(/\s+/);
      if (c.length < 10 || c[3] !== TCP_LISTEN) continue;
      const [addr, p] = c[1]!.split(':') as [string, string];
      if (Number.parseInt(p, 16) !== port || !want.has(addr)) continue;
      out.push({ local: decode(addr, port), uid: Number(c[7]), inode: Number(c[9]) });
    }
  }
  return out;
}

/** The processes whose file descriptors hold socket `inode`. */
export function socketProcesses(inode: number): PortHolder['processes'] {
  const target = `socket:[${inode}]`;
  const out: PortHolder['processes'] = [];
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return out;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone, or not ours to read
    }
    for (const fd of fds) {
      let link = '';
      try {
        link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (link !== target) continue;
      const read = (f: string) => {
        try {
          return readFileSync(`/proc/${pid}/${f}`, 'utf8');
        } catch {
          return '';
        }
      };
      // Both are the holder's to choose: control characters (a forged log line) become spaces.
      const clean = (t: string) => t.replace(/[\x00-\x1f\x7f]+/g, ' ').trim();
      out.push({ pid: Number(pid), comm: clean(read('comm')), cmdline: clean(read('cmdline')).slice(0, 200) });
      break;
    }
  }
  return out;
}

function userName(uid: number): string | null {
  try {
    for (const l of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const f = l.split(':');
      if (f.length > 2 && Number(f[2]) === uid && f[2] !== '') return f[0]!;
    }
  } catch {
    /* no passwd file: the uid alone */
  }
  return null;
}

/** Every holder of `host:port`, with its processes. */
export function portHolders(host: string, port: number): PortHolder[] {
  return listeners(host, port).map((l) => ({ ...l, user: userName(l.uid), processes: socketProcesses(l.inode) }));
}

/** One line naming a holder: "pid 4242 (python3 -m http.server 10256), uid 65534 (nobody), listening on 127.0.0.1:10256". */
export function holderText(h: PortHolder): string {
  const who = h.processes.length
    ? h.processes.map((p) => `pid ${p.pid} (${p.cmdline || p.comm})`).join(', ')
    : `socket inode ${h.inode}, no process found (in another pid namespace?)`;
  return `${who}, uid ${h.uid}${h.user !== null ? ` (${h.user})` : ''}, listening on ${h.local}`;
}

/**
 * What to say about who holds `host:port`. `lastInode` is the inode named the last time: when it
 * is the same, the /proc/*\/fd walk is skipped and `same` is true (the caller need not log again).
 */
export function describeHolders(host: string, port: number, lastInode = -1): { text: string; inode: number; same: boolean } {
  const ls = listeners(host, port);
  if (ls.length === 0)
    return { text: 'no listening socket on that port found in /proc/net/tcp{,6} (released since?)', inode: -1, same: false };
  if (ls[0]!.inode === lastInode) return { text: '', inode: lastInode, same: true };
  const hs = ls.map((l) => ({ ...l, user: userName(l.uid), processes: socketProcesses(l.inode) }));
  return { text: hs.map(holderText).join('; '), inode: ls[0]!.inode, same: false };
}
