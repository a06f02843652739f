/**
 * What parsing an ipvsadm command line gives (a command: API operations or a listing; or an
 * error as stderr text and exit status), what it needs from its caller (ParseEnv), and how it
 * fails: ipvsadm's fail(), tryhelp_exit() and uvs's refusals, thrown as Fail and caught by
 * parseArgs (parse.ts).
 */
import type { EditOp, ServiceRef } from '../edits';
import { PROGRAM } from './tables';

export interface ListFormat {
  numeric: boolean;
  stats: boolean;
  rate: boolean;
  thresholds: boolean;
  persistentConn: boolean;
  tunInfo: boolean;
  exact: boolean;
  nosort: boolean;
}

export type Command =
  | { kind: 'help'; text: string }
  | { kind: 'version'; text: string }
  | {
      kind: 'list';
      what: 'services' | 'connections' | 'timeout' | 'daemon' | 'drain' | 'health' | 'defense' | 'workers';
      service?: ServiceRef;
      format: ListFormat;
    }
  /** -S; without -n names are printed (as the listings). */
  | { kind: 'save'; numeric: boolean }
  | { kind: 'restore' }
  /** -A -E -D -C -a -e -d --set: one batch. */
  | { kind: 'edit'; command: string; ops: EditOp[] }
  | { kind: 'zero'; service?: ServiceRef }
  | { kind: 'reload' }
  | { kind: 'killWorker'; worker: string }
  /** uvs: node maintenance (withdraw the announcement, keep forwarding), its status, or a wait until idle. */
  | { kind: 'maintenance'; action: 'on' | 'off' | 'status' | 'wait' };

export type ParseResult = { ok: true; command: Command } | { ok: false; stderr: string; exit: number };

export interface ParseEnv {
  /** Program name in messages (argv[0] of ipvsadm). */
  program?: string;
  /** Host name → dotted IPv4 (ipvsadm's gethostbyname); uvsadm reads /etc/hosts. */
  lookupHost?: (name: string) => string | null;
  /** Service name → port for tcp/udp/sctp (getservbyname); uvsadm reads /etc/services. */
  lookupService?: (name: string, protocol: string) => number | null;
  /** Parsing a line of -R input (a -R there is a usage error, as in ipvsadm). */
  readingStdin?: boolean;
}

export class Fail {
  constructor(
    readonly stderr: string,
    readonly exit: number,
  ) {}
}
/** ipvsadm's fail(2, …). */
export function fail(msg: string): never {
  throw new Fail(`${msg}\n`, 2);
}
export function tryHelp(program: string): never {
  throw new Fail(`Try \`${program} -h' or '${program} --help' for more information.\n`, 255);
}
/** What uvs cannot do: said plainly, exit 2. */
export function unsupported(msg: string): never {
  throw new Fail(`${PROGRAM}: ${msg}\n`, 2);
}
