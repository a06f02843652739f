/**
 * Loopback TCP ports for the servers a test starts itself (redis-server, redis-sentinel).
 *
 * A fixed port inside the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999
 * by default) is a flaky test: connect() may have given it to any client socket alive at that
 * moment — the suite's own Redis clients, a replica's link to its master — and then the server's
 * bind() fails with EADDRINUSE and it exits (a client's TIME_WAIT does not block it: tried here).
 * CI once lost the Sentinel test to a sentinel that never answered in 15 s; its output went
 * nowhere then, so this is the likely cause, not a seen one. startServer() now keeps it.
 *
 * So the ports come from below the ephemeral range, where connect() never allocates, and are
 * checked against every TCP socket the kernel lists now (/proc/net/tcp and tcp6, any
 * state). Test files run one at a time (test/run.sh), so no other test takes them meanwhile.
 */
import { readFileSync } from 'node:fs';

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : 32768;
  } catch {
    return 32768;
  }
}

/** Local ports of every TCP socket (any state) in this network namespace. */
function portsInUse(): Set<number> {
  const used = new Set<number>();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const local = line.trim().split(/\s+/)[1]; // "0100007F:1F90"
      if (local) used.add(Number.parseInt(local.slice(local.indexOf(':') + 1), 16));
    }
  }
  return used;
}

/**
 * `n` consecutive free loopback ports below the ephemeral range, the search starting at a place
 * derived from `seed` (the process id by default) so that runs spread over the range.
 */
export function freePorts(n: number, seed = process.pid): number[] {
  const lo = 10000;
  const hi = ephemeralLow() - n; // the last start that keeps all n below the range
  const span = hi - lo;
  if (span <= 0) throw new Error(`no room for ${n} ports between ${lo} and the ephemeral range`);
  const used = portsInUse();
  for (let i = 0; i < span; i++) {
    const start = lo + ((seed * 7 + i) % span);
    let ok = true;
    for (let k = 0; k < n && ok; k++) ok = !used.has(start + k);
    if (ok) return Array.from({ length: n }, (_, k) => start + k);
  }
  throw new Error(`no ${n} consecutive free ports between ${lo} and ${hi + n}`);
}
