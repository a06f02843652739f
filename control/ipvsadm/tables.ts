/**
 * ipvsadm.c's constants and tables, as uvsadm's parser reads them (parse.ts): the commands
 * (CMD_*), the option columns (OPTC_*) in the order ipvsadm checks them, commands_v_options
 * (which option each command requires, refuses or allows) and tunnel_types_v_options
 * (docs/ipvs-semantics.md §6.1).
 */

/** The program name in messages (ipvsadm's argv[0]) and the version -v prints. */
export const PROGRAM = 'uvsadm';
export const VERSION = 'v0.1.0';

/** ipvsadm's MAX_TIMEOUT: 31 days. */
export const MAX_TIMEOUT = 86400 * 31;
/** IPVS_SVC_PERSISTENT_TIMEOUT: `-p` without a value. */
export const DEFAULT_PERSISTENT_TIMEOUT = 360;
export const INT_MAX = 0x7fffffff;

export const CMD = {
  NONE: 0,
  ADD: 1,
  EDIT: 2,
  DEL: 3,
  FLUSH: 4,
  LIST: 5,
  ADDDEST: 6,
  DELDEST: 7,
  EDITDEST: 8,
  TIMEOUT: 9,
  STARTDAEMON: 10,
  STOPDAEMON: 11,
  RESTORE: 12,
  SAVE: 13,
  ZERO: 14,
  // uvs's own commands
  RELOAD: 15,
  KILLWORKER: 16,
  MAINTENANCE: 17,
} as const;
export type Cmd = (typeof CMD)[keyof typeof CMD];
export const CMD_NAMES = [
  'add-service',
  'edit-service',
  'delete-service',
  'flush',
  'list',
  'add-server',
  'delete-server',
  'edit-server',
  'set',
  'start-daemon',
  'stop-daemon',
  'restore',
  'save',
  'zero',
  'reload',
  'kill-worker',
  'maintenance',
];

/** Option columns, in ipvsadm's order (the order its checks run in), then uvs's two listings. */
export const OPT_NAMES = [
  'numeric',
  'connection',
  'service-address',
  'scheduler',
  'persistent',
  'netmask',
  'real-server',
  'forwarding-method',
  'weight',
  'u-threshold',
  'l-threshold',
  'mcast-interface',
  'timeout',
  'daemon',
  'stats',
  'rate',
  'thresholds',
  'persistent-conn',
  'nosort',
  'syncid',
  'exact',
  'ops',
  'pe',
  'sched-flags',
  'mcast-group',
  'mcast-port',
  'mcast-ttl',
  'sync-maxlen',
  'tun-info',
  'tun-type',
  'tun-port',
  'tun-nocsum',
  'tun-csum',
  'tun-remcsum',
  'drain',
  'health',
  'defense',
  'workers',
  'proxy-protocol',
] as const;
export type OptName = (typeof OPT_NAMES)[number];
export const OPT = Object.fromEntries(OPT_NAMES.map((n, i) => [n, i])) as Record<OptName, number>;

/** One row of commands_v_options: '+' compulsory, 'x' illegal, '1' exclusive, ' ' optional. */
function row(allowed: Partial<Record<OptName, '+' | '1' | ' '>>): string {
  return OPT_NAMES.map((n) => allowed[n] ?? 'x').join('');
}
const SERVER_OPTS = {
  'service-address': '+',
  'real-server': '+',
  'forwarding-method': ' ',
  weight: ' ',
  'u-threshold': ' ',
  'l-threshold': ' ',
  'tun-type': ' ',
  'tun-port': ' ',
  'tun-nocsum': ' ',
  'tun-csum': ' ',
  'tun-remcsum': ' ',
  'proxy-protocol': ' ',
} as const;
const SERVICE_OPTS = {
  'service-address': '+',
  scheduler: ' ',
  persistent: ' ',
  netmask: ' ',
  ops: ' ',
  pe: ' ',
  'sched-flags': ' ',
} as const;
export const COMMANDS_V_OPTIONS: Record<number, string> = {
  [CMD.ADD]: row(SERVICE_OPTS),
  [CMD.EDIT]: row(SERVICE_OPTS),
  [CMD.DEL]: row({ 'service-address': '+' }),
  [CMD.FLUSH]: row({}),
  [CMD.LIST]: row({
    numeric: ' ',
    connection: '1',
    'service-address': '1',
    timeout: '1',
    daemon: '1',
    stats: ' ',
    rate: ' ',
    thresholds: ' ',
    'persistent-conn': ' ',
    nosort: ' ',
    syncid: ' ',
    exact: ' ',
    'tun-info': ' ',
    drain: '1',
    health: '1',
    defense: '1',
    workers: '1',
  }),
  [CMD.ADDDEST]: row(SERVER_OPTS),
  [CMD.DELDEST]: row({ 'service-address': '+', 'real-server': '+' }),
  [CMD.EDITDEST]: row(SERVER_OPTS),
  [CMD.TIMEOUT]: row({}),
  [CMD.STARTDAEMON]: row({
    'mcast-interface': ' ',
    syncid: ' ',
    'mcast-group': ' ',
    'mcast-port': ' ',
    'mcast-ttl': ' ',
    'sync-maxlen': ' ',
  }),
  [CMD.STOPDAEMON]: row({ syncid: ' ' }),
  [CMD.RESTORE]: row({}),
  [CMD.SAVE]: row({ numeric: ' ' }),
  [CMD.ZERO]: row({ 'service-address': ' ' }),
  [CMD.RELOAD]: row({}),
  [CMD.KILLWORKER]: row({}),
  [CMD.MAINTENANCE]: row({}),
};

/** tunnel_types_v_options: rows ipip, gue, gre; columns tun-port, tun-nocsum, tun-csum, tun-remcsum. */
export const TUN_NAMES = ['ipip', 'gue', 'gre'];
export const TUN_OPTS: OptName[] = ['tun-port', 'tun-nocsum', 'tun-csum', 'tun-remcsum'];
export const TUNNEL_V_OPTIONS = ['xxxx', '+111', 'x11x'];
