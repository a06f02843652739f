/** Parsers for the third-party generators' output (sockperf 3.x, wrk 4.x, iperf3 -J, trafgen). */

function strip(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/\x1b\[[0-9;]*m/g, '');
}

export interface SockperfTp {
  sentMessages: number;
  sentSeconds: number;
  sentRate: number;
}

/** `sockperf throughput`: "Total of N messages sent in S sec", "Message Rate is R [msg/sec]". */
export function parseSockperfTp(out: string): SockperfTp {
  const s = strip(out);
  const tot = /Total of (\d+) messages sent in ([\d.]+) sec/.exec(s);
  const rate = /Message Rate is ([\d.]+) \[msg\/sec\]/.exec(s);
  if (!tot || !rate) throw new Error(`sockperf throughput: no summary in output: ${s.trim().split('\n').slice(-3).join(' | ')}`);
  return { sentMessages: Number(tot[1]), sentSeconds: Number(tot[2]), sentRate: Number(rate[1]) };
}

export interface SockperfPp {
  /** Round-trip percentiles in µs (run with --full-rtt). */
  p50: number;
  p99: number;
  p999: number;
  avg: number;
  max: number;
  sent: number;
  received: number;
  seconds: number;
  dropped: number;
}

/** `sockperf ping-pong --full-rtt`: the percentile block and the [Valid Duration] line. */
export function parseSockperfPp(out: string): SockperfPp {
  const s = strip(out);
  const pct = (p: string) => {
    const m = new RegExp(`percentile ${p.replace('.', '\\.')}\\s*=\\s*([\\d.]+)`).exec(s);
    if (!m) throw new Error(`sockperf ping-pong: no percentile ${p} in output: ${s.trim().split('\n').slice(-3).join(' | ')}`);
    return Number(m[1]);
  };
  const valid = /RunTime=([\d.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)/.exec(s);
  const avg = /Summary: (?:Round trip|Latency) is ([\d.]+) usec/.exec(s);
  const max = /<MAX> observation\s*=\s*([\d.]+)/.exec(s);
  const dropped = /# dropped messages = (\d+)/.exec(s);
  if (!valid) throw new Error('sockperf ping-pong: no [Valid Duration] line');
  return {
    p50: pct('50.000'),
    p99: pct('99.000'),
    p999: pct('99.900'),
    avg: avg ? Number(avg[1]) : NaN,
    max: max ? Number(max[1]) : NaN,
    seconds: Number(valid[1]),
    sent: Number(valid[2]),
    received: Number(valid[3]),
    dropped: dropped ? Number(dropped[1]) : 0,
  };
}

export interface Wrk {
  requests: number;
  seconds: number;
  rps: number;
  socketErrors: number;
  non2xx: number;
}

/** wrk: "N requests in S s", "Requests/sec: R", "Socket errors: connect a, read b, write c, timeout d". */
export function parseWrk(out: string): Wrk {
  const req = /(\d+) requests in ([\d.]+)(us|ms|s|m)\b/.exec(out);
  const rps = /Requests\/sec:\s*([\d.]+)/.exec(out);
  if (!req || !rps) throw new Error(`wrk: no summary in output: ${out.trim().split('\n').slice(-3).join(' | ')}`);
  const unit = { us: 1e-6, ms: 1e-3, s: 1, m: 60 }[req[3] as 'us' | 'ms' | 's' | 'm'];
  const se = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const non = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  return {
    requests: Number(req[1]),
    seconds: Number(req[2]) * unit,
    rps: Number(rps[1]),
    socketErrors: se ? Number(se[1]) + Number(se[2]) + Number(se[3]) + Number(se[4]) : 0,
    non2xx: non ? Number(non[1]) : 0,
  };
}

export interface Iperf {
  bitsPerSecond: number;
  retransmits: number;
  seconds: number;
}

/** iperf3 -J: end.sum_received (what the real server received). */
export function parseIperf3(out: string): Iperf {
  let j: { error?: string; end?: { sum_received?: { bits_per_second: number; seconds: number }; sum_sent?: { retransmits?: number } } };
  try {
    j = JSON.parse(out);
  } catch {
    throw new Error(`iperf3: output is not JSON: ${out.trim().slice(0, 200)}`);
  }
  if (j.error) throw new Error(`iperf3: ${j.error}`);
  const r = j.end?.sum_received;
  if (!r) throw new Error('iperf3: no end.sum_received');
  return { bitsPerSecond: r.bits_per_second, seconds: r.seconds, retransmits: j.end?.sum_sent?.retransmits ?? 0 };
}

/** trafgen's closing statistics: "N packets outgoing". */
export function parseTrafgen(out: string): { packets: number } {
  const m = /(\d+) packets outgoing/.exec(out);
  if (!m) throw new Error(`trafgen: no statistics in output: ${out.trim().split('\n').slice(-3).join(' | ')}`);
  return { packets: Number(m[1]) };
}
