#!/usr/bin/env node
/**
 * uvsadm — ipvsadm-compatible administration of a running uvsd, over its API socket.
 */
import { apiCall, DEFAULT_SOCKET } from './client';
import { formatConnections, formatDrains, formatHealth, formatList, formatTimeouts, type FmtConnection, type FmtDrain, type FmtHealth, type FmtService } from './ipvsadm-format';

const HELP = `uvsadm v0.1.0 (ipvsadm-compatible front end of uvsd)
Usage:
  uvsadm -L|l [options]          list the table (ipvsadm layout)
  uvsadm --reload                re-read uvsd's configuration file (like SIGHUP)
  uvsadm --kill-worker N         terminate dataplane worker N (it is restarted; for testing)
  uvsadm -h

Options:
  --numeric      -n   numeric output (uvs never resolves names; accepted for compatibility)
  --connection   -c   list the connection table
  --stats             packet and byte counters
  --exact        -X   expand numbers (with --stats)
  --timeout           show the tcp tcpfin udp timeouts
  --drain             (uvs) real servers being drained: since when, connections left, deadline
  --health            (uvs) health-check verdicts per real server
  --socket PATH       uvsd API socket (default $UVS_SOCKET or /run/uvs/uvsd.sock)

Not yet implemented (edit the YAML configuration and run uvsadm --reload instead):
  -A -E -D -C -a -e -d -Z --set -S -R --rate`;

const UNIMPLEMENTED = new Set(['-A', '--add-service', '-E', '--edit-service', '-D', '--delete-service', '-C', '--clear', '-a', '--add-server', '-e', '--edit-server', '-d', '--delete-server', '-Z', '--zero', '--set', '-S', '--save', '-R', '--restore', '--rate']);

function tryHelp(msg: string): number {
  console.error(`${msg}\nTry \`uvsadm -h' or 'uvsadm --help' for more information.`);
  return 255;
}

async function main(argv: string[]): Promise<number> {
  let socket = DEFAULT_SOCKET;
  let list = argv.length === 0;
  let conns = false;
  let stats = false;
  let exact = false;
  let timeout = false;
  let drain = false;
  let health = false;
  let reload = false;
  let kill: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '-h' || a === '--help') {
      console.log(HELP);
      return 0;
    }
    if (a === '--socket') socket = argv[++i] ?? socket;
    else if (a === '--reload') reload = true;
    else if (a === '--kill-worker') kill = argv[++i];
    else if (/^-[lLncX]+$/.test(a) && a.length > 1 && !a.startsWith('--')) {
      for (const ch of a.slice(1)) {
        if (ch === 'L' || ch === 'l') list = true;
        else if (ch === 'c') conns = true;
        else if (ch === 'X') exact = true;
      }
    } else if (a === '--list') list = true;
    else if (a === '--numeric') void 0;
    else if (a === '--connection') conns = true;
    else if (a === '--stats') stats = true;
    else if (a === '--exact') exact = true;
    else if (a === '--timeout') timeout = true;
    else if (a === '--drain') drain = true;
    else if (a === '--health') health = true;
    else if (UNIMPLEMENTED.has(a)) {
      console.error(`uvsadm: ${a} is not implemented yet; edit uvsd's YAML configuration and run 'uvsadm --reload'`);
      return 255;
    } else return tryHelp(`uvsadm: invalid option -- '${a}'`);
  }
  try {
    if (reload) {
      const r = await apiCall<{ ok?: boolean; code?: string; message?: string; version?: number }>(socket, 'POST', '/v1/reload');
      if (r.status !== 200) {
        console.error(`uvsadm: reload rejected: ${r.body.code}: ${r.body.message}`);
        return 1;
      }
      console.log(`configuration reloaded (snapshot ${r.body.version})`);
      return 0;
    }
    if (kill !== undefined) {
      const r = await apiCall<{ message?: string }>(socket, 'POST', `/v1/workers/${encodeURIComponent(kill)}/kill`);
      if (r.status !== 202) {
        console.error(`uvsadm: ${r.body.message}`);
        return 1;
      }
      return 0;
    }
    if (timeout) {
      const r = await apiCall<{ tcp: number; tcpFin: number; udp: number }>(socket, 'GET', '/v1/timeouts');
      process.stdout.write(formatTimeouts(r.body));
      return 0;
    }
    if (health) {
      const r = await apiCall<{ checks: FmtHealth[] }>(socket, 'GET', '/v1/health');
      process.stdout.write(formatHealth(r.body.checks));
      return 0;
    }
    if (drain) {
      const r = await apiCall<{ checkInterval: number; draining: FmtDrain[] }>(socket, 'GET', '/v1/drains');
      process.stdout.write(formatDrains(r.body.checkInterval, r.body.draining));
      return 0;
    }
    if (!list && !conns) return tryHelp('uvsadm: no command specified');
    if (conns) {
      const r = await apiCall<{ connections: FmtConnection[] }>(socket, 'GET', '/v1/connections?limit=100000');
      process.stdout.write(formatConnections(r.body.connections));
      return 0;
    }
    const r = await apiCall<{ tableSize: number; services: FmtService[] }>(socket, 'GET', '/v1/services');
    process.stdout.write(formatList(r.body.tableSize, r.body.services, { stats, exact }));
    return 0;
  } catch (e) {
    console.error(`uvsadm: cannot reach uvsd at ${socket}: ${(e as Error).message}`);
    return 1;
  }
}

main(process.argv.slice(2)).then((c) => process.exit(c));
