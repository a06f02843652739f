/**
 * popt as ipvsadm uses it: ipvsadm.c's options_table (long and short names, which take an
 * argument) and poptGetNextOpt over a whole command line, with popt's error messages.
 */
import { CMD, type Cmd } from './tables';

/** 0 = no argument, 1 = required, 2 = optional (POPT_ARGFLAG_OPTIONAL). */
export interface OptDef {
  long: string | null;
  short: string | null;
  arg: 0 | 1 | 2;
  tag: string;
}
const d = (long: string | null, short: string | null, arg: 0 | 1 | 2, tag?: string): OptDef => ({
  long,
  short,
  arg,
  tag: tag ?? short ?? long!,
});
/** ipvsadm's options_table, in its order (a long name listed twice, like "list", finds the first). */
export const OPTIONS: OptDef[] = [
  d('add-service', 'A', 0),
  d('edit-service', 'E', 0),
  d('delete-service', 'D', 0),
  d('clear', 'C', 0),
  d('list', 'L', 0),
  d('list', 'l', 0),
  d('zero', 'Z', 0),
  d('add-server', 'a', 0),
  d('edit-server', 'e', 0),
  d('delete-server', 'd', 0),
  d('set', null, 0),
  d('help', 'h', 0),
  d('version', 'v', 0),
  d('restore', 'R', 0),
  d('save', 'S', 0),
  d('start-daemon', null, 1),
  d('stop-daemon', null, 1),
  d('tcp-service', 't', 1),
  d('udp-service', 'u', 1),
  d('sctp-service', null, 1),
  d('fwmark-service', 'f', 1),
  d('scheduler', 's', 1),
  d('persistent', 'p', 2),
  d('netmask', 'M', 1),
  d('real-server', 'r', 1),
  d('masquerading', 'm', 0),
  d('fullnat', null, 0), // uvs: full-NAT (source NAT to uvsd's pool), no ipvsadm equivalent
  d('ipip', 'i', 0),
  d('gatewaying', 'g', 0),
  d('weight', 'w', 1),
  d('u-threshold', 'x', 1),
  d('l-threshold', 'y', 1),
  d('numeric', 'n', 0),
  d('connection', 'c', 0),
  d('mcast-interface', null, 1),
  d('syncid', null, 1),
  d('timeout', null, 0),
  d('daemon', null, 0),
  d('stats', null, 0),
  d('rate', null, 0),
  d('thresholds', null, 0),
  d('persistent-conn', null, 0),
  d('nosort', null, 0),
  d('sort', null, 0),
  d('exact', 'X', 0),
  d('ipv6', '6', 0),
  d('ops', 'o', 0),
  d('pe', null, 1),
  d('sched-flags', 'b', 1),
  d('mcast-group', null, 1),
  d('mcast-port', null, 1),
  d('mcast-ttl', null, 1),
  d('sync-maxlen', null, 1),
  d('tun-info', null, 0),
  d('tun-type', null, 1),
  d('tun-port', null, 1),
  d('tun-nocsum', null, 0),
  d('tun-csum', null, 0),
  d('tun-remcsum', null, 0),
  // uvs's additions
  d('drain', null, 0),
  d('health', null, 0),
  d('defense', null, 0),
  d('workers', null, 0),
  d('proxy-protocol', null, 1), // full-NAT TCP: PROXY protocol header to the real server
  d('reload', null, 0),
  d('kill-worker', null, 1),
  d('maintenance', null, 1),
];

export type Token =
  | { t: 'opt'; tag: string; arg: string | null; text: string }
  | { t: 'arg'; v: string }
  | { t: 'err'; text: string; why: string };

const POPT_BADOPT = 'unknown option';
export const POPT_NOARG = 'missing argument';
const POPT_UNWANTEDARG = 'option does not take an argument';

/**
 * poptGetNextOpt over the whole line: options in order, leftovers as arguments, and the first
 * error last (popt stops there). An option's argument is `--long=ARG`, the rest of a short
 * cluster (`-w3`, `-p=60`), or the next word — for an optional argument only if that word does
 * not start with '-'.
 */
export function tokenize(argv: string[]): Token[] {
  const out: Token[] = [];
  let rest = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (rest || a[0] !== '-' || a === '-') {
      out.push({ t: 'arg', v: a });
      continue;
    }
    if (a === '--') {
      rest = true;
      continue;
    }
    const next = (def: OptDef): string | null | undefined => {
      if (i + 1 < argv.length && !(def.arg === 2 && argv[i + 1]![0] === '-')) return argv[++i]!;
      return def.arg === 1 ? undefined : null;
    };
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
      const def = OPTIONS.find((o) => o.long === name);
      if (!def) return [...out, { t: 'err', text: a, why: POPT_BADOPT }];
      let arg: string | null | undefined = eq < 0 ? null : a.slice(eq + 1);
      if (def.arg === 0 && arg !== null) return [...out, { t: 'err', text: a, why: POPT_UNWANTEDARG }];
      if (def.arg !== 0 && arg === null) arg = next(def);
      if (arg === undefined) return [...out, { t: 'err', text: a, why: POPT_NOARG }];
      out.push({ t: 'opt', tag: def.tag, arg, text: a });
      continue;
    }
    for (let k = 1; k < a.length; k++) {
      const def = OPTIONS.find((o) => o.short === a[k]);
      if (!def) return [...out, { t: 'err', text: a, why: POPT_BADOPT }];
      if (def.arg === 0) {
        out.push({ t: 'opt', tag: def.tag, arg: null, text: a });
        continue;
      }
      let arg: string | null | undefined;
      if (k + 1 < a.length) arg = a.slice(k + 1 + (a[k + 1] === '=' ? 1 : 0));
      else arg = next(def);
      if (arg === undefined) return [...out, { t: 'err', text: a, why: POPT_NOARG }];
      out.push({ t: 'opt', tag: def.tag, arg, text: a });
      break;
    }
  }
  return out;
}

export const COMMAND_TAGS: Record<string, Cmd> = {
  A: CMD.ADD,
  E: CMD.EDIT,
  D: CMD.DEL,
  a: CMD.ADDDEST,
  e: CMD.EDITDEST,
  d: CMD.DELDEST,
  C: CMD.FLUSH,
  L: CMD.LIST,
  l: CMD.LIST,
  Z: CMD.ZERO,
  set: CMD.TIMEOUT,
  R: CMD.RESTORE,
  S: CMD.SAVE,
  'start-daemon': CMD.STARTDAEMON,
  'stop-daemon': CMD.STOPDAEMON,
  reload: CMD.RELOAD,
  'kill-worker': CMD.KILLWORKER,
  maintenance: CMD.MAINTENANCE,
};
