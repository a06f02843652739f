/**
 * What keepalived's track script, a kubelet probe and an operator would see of uvsd's control
 * thread while a large request runs: /healthz over the API socket (what the shipped track script
 * asks), GET /v1/info over the API socket, and /healthz over TCP (127.0.0.1:10256), asked in turn
 * with INTERVAL ms between answers, each on a new connection. One JSON line per answer:
 *
 *   {"t": start (ms since the epoch), "ms": latency, "what", "status" (0: no answer in 30 s),
 *    "cpu": ms the control thread ran meanwhile, "wait": ms it waited for a CPU meanwhile,
 *    "self": ms this probe waited for a CPU meanwhile}
 *
 * The last three come from schedstat (/proc/PID/task/PID/schedstat for uvsd's main thread, whose
 * thread id is its pid; /proc/thread-self/schedstat for this one: on-CPU ns, then run-queue wait
 * ns — kernel/sched/stats.h, fs/proc/base.c proc_pid_schedstat). They separate what uvsd's control
 * thread did from what a loaded machine did to it: a stall is `cpu`; `wait` and `self` are the
 * scheduler's. Runs until SIGTERM.
 *
 *   node latency-probe.js SOCKET UVSD_PID [INTERVAL_MS]
 */
import { readFileSync } from 'node:fs';
import { request, type RequestOptions } from 'node:http';

const [socket, pid, interval = '5'] = process.argv.slice(2);
if (!socket || !pid) {
  console.error('usage: latency-probe SOCKET UVSD_PID [INTERVAL_MS]');
  process.exit(2);
}

/** [on-CPU ns, run-queue wait ns] of a thread, from its schedstat. */
function sched(file: string): [number, number] {
  try {
    const [run, wait] = readFileSync(file, 'latin1').split(' ');
    return [Number(run), Number(wait)];
  } catch {
    return [Number.NaN, Number.NaN];
  }
}
const MAIN = `/proc/${pid}/task/${pid}/schedstat`;
const SELF = '/proc/thread-self/schedstat';
const ms = (ns: number) => Math.round(ns / 1e5) / 10;

function ask(what: string, opts: RequestOptions): Promise<void> {
  return new Promise((resolve) => {
    const t = Date.now();
    const t0 = performance.now();
    const m0 = sched(MAIN);
    const s0 = sched(SELF);
    const done = (status: number) => {
      const m1 = sched(MAIN);
      const s1 = sched(SELF);
      const line = {
        t,
        ms: Math.round((performance.now() - t0) * 10) / 10,
        what,
        status,
        cpu: ms(m1[0] - m0[0]),
        wait: ms(m1[1] - m0[1]),
        self: ms(s1[1] - s0[1]),
      };
      process.stdout.write(`${JSON.stringify(line)}\n`);
      resolve();
    };
    const req = request({ ...opts, agent: false }, (res) => {
      res.resume();
      res.on('end', () => done(res.statusCode ?? 0));
    });
    req.setTimeout(30_000, () => req.destroy());
    req.on('error', () => done(0));
    req.end();
  });
}

let stop = false;
process.on('SIGTERM', () => (stop = true));
void (async () => {
  const asks: [string, RequestOptions][] = [
    ['healthz', { socketPath: socket, path: '/healthz' }],
    ['info', { socketPath: socket, path: '/v1/info' }],
    ['healthz-tcp', { host: '127.0.0.1', port: 10256, path: '/healthz' }],
  ];
  for (let i = 0; !stop; i++) {
    const [what, opts] = asks[i % asks.length]!;
    await ask(what, opts);
    await new Promise((r) => setTimeout(r, Number(interval)));
  }
  process.stdout.write('', () => process.exit(0));
})();
