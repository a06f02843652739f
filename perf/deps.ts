/**
 * The peers and generators, from Debian packages. What is missing is installed with apt-get (as
 * root, `apt-get update` once first) under a policy-rc.d that forbids starting services, so that
 * installing nginx or haproxy never starts them on the host: the benchmark runs them only inside
 * the lab's LB namespace, with configuration files in the lab directory.
 */
import { existsSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

export interface Tool {
  /** Command looked for on PATH (or a file that must exist). */
  check: string;
  pkg: string;
  why: string;
}

export const NGINX_STREAM_MODULE = '/usr/lib/nginx/modules/ngx_stream_module.so';

export const TOOLS: Record<string, Tool> = {
  sockperf: { check: 'sockperf', pkg: 'sockperf', why: 'UDP packets/s, UDP and TCP request/response latency' },
  wrk: { check: 'wrk', pkg: 'wrk', why: 'TCP connections/s (HTTP, Connection: close)' },
  iperf3: { check: 'iperf3', pkg: 'iperf3', why: 'bulk TCP Gb/s' },
  trafgen: { check: 'trafgen', pkg: 'netsniff-ng', why: 'UDP with many concurrent flows (uvs scaling)' },
  nft: { check: 'nft', pkg: 'nftables', why: 'the nftables DNAT peer' },
  haproxy: { check: 'haproxy', pkg: 'haproxy', why: 'the HAProxy peer' },
  nginx: { check: 'nginx', pkg: 'nginx', why: 'the nginx stream peer' },
  nginxStream: { check: NGINX_STREAM_MODULE, pkg: 'libnginx-mod-stream', why: 'nginx stream module' },
  curl: { check: 'curl', pkg: 'curl', why: 'lab readiness checks' },
  ping: { check: 'ping', pkg: 'iputils-ping', why: 'forwarded ping through the node (perf scale)' },
  nc: { check: 'nc', pkg: 'netcat-openbsd', why: 'connection checks (perf scale)' },
  redis: { check: 'redis-server', pkg: 'redis-server', why: 'the two-node lab of the failure figures (--failures)' },
  keepalived: { check: 'keepalived', pkg: 'keepalived', why: 'VRRP between the two LB nodes of the failure figures (--failures)' },
  perf: { check: 'perf', pkg: 'linux-perf', why: 'syscalls per packet and per connection of the LB processes (perf stat)' },
  cc: { check: 'cc', pkg: 'gcc', why: 'building the C TUN forwarder peer (perf/peers/ctun.c)' },
};

export function have(check: string): boolean {
  if (check.startsWith('/')) return existsSync(check);
  try {
    execFileSync('sh', ['-c', `command -v ${check}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** nginx built with the stream module compiled in (not as a dynamic module)? */
export function nginxStreamBuiltIn(): boolean {
  try {
    return / --with-stream(\s|$)/.test(execFileSync('sh', ['-c', 'nginx -V 2>&1'], { encoding: 'utf8', timeout: 5000 }));
  } catch {
    return false;
  }
}

function nginxHasStream(): boolean {
  return have('nginx') && (nginxStreamBuiltIn() || existsSync(NGINX_STREAM_MODULE));
}

/**
 * Installs the packages for the tools named (keys of TOOLS) that are missing. Returns the names
 * still missing afterwards. log receives progress lines.
 */
export function ensureTools(names: string[], install: boolean, log: (s: string) => void): string[] {
  const missing = () => names.filter((n) => (n === 'nginxStream' ? !nginxHasStream() : !have(TOOLS[n]!.check)));
  let miss = missing();
  if (miss.length === 0) return [];
  const pkgs = [...new Set(miss.map((n) => TOOLS[n]!.pkg))];
  if (!install) {
    log(`missing (not installing, --no-install): ${pkgs.join(' ')}`);
    return miss;
  }
  if (process.getuid?.() !== 0) {
    log(`missing and not root, cannot install: ${pkgs.join(' ')}`);
    return miss;
  }
  log(`installing Debian packages: ${pkgs.join(' ')} (apt-get update first; services are not started)`);
  const policy = '/usr/sbin/policy-rc.d';
  const ours = !existsSync(policy);
  if (ours)
    writeFileSync(policy, '#!/bin/sh\n# written by uvs perf while it installs packages: start no services\nexit 101\n', { mode: 0o755 });
  try {
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'ignore', 'pipe'], env, timeout: 300000 });
    execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...pkgs], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env,
      timeout: 600000,
    });
  } catch (e) {
    log(
      `apt-get failed: ${((e as { stderr?: Buffer }).stderr?.toString() ?? (e as Error).message).trim().split('\n').slice(-2).join(' | ')}`,
    );
  } finally {
    if (ours && existsSync(policy) && readFileSync(policy, 'utf8').includes('uvs perf')) unlinkSync(policy);
  }
  miss = missing();
  if (miss.length) log(`still missing after install: ${miss.map((n) => TOOLS[n]!.pkg).join(' ')}`);
  return miss;
}

/** First line of a tool's version output, for the report. */
export function toolVersion(cmd: string, args: string[]): string {
  try {
    const out = execFileSync('sh', ['-c', `${cmd} ${args.join(' ')} 2>&1`], { encoding: 'utf8', timeout: 5000 });
    return (
      out
        .split('\n')
        .find((l) => l.trim())
        ?.trim() ?? '?'
    );
  } catch (e) {
    const o = (e as { stdout?: string }).stdout ?? '';
    return (
      o
        .split('\n')
        .find((l) => l.trim())
        ?.trim() ?? 'not installed'
    );
  }
}
