/**
 * The transport protocols of a virtual service, by name and by number: the config's, the API's
 * and the state file's 'tcp' / 'udp' / 'sctp', the IP protocol numbers the dataplane and the
 * connection table key on, and the names ipvsadm prints and takes for them.
 */
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from './packet';

export type Protocol = 'tcp' | 'udp' | 'sctp';

/** In ipvsadm's order of protocol numbers (its listing sorts on them). */
export const PROTOCOLS: readonly Protocol[] = ['tcp', 'udp', 'sctp'];

export const PROTO_NUMBER: Readonly<Record<Protocol, number>> = { tcp: IPPROTO_TCP, udp: IPPROTO_UDP, sctp: IPPROTO_SCTP };

/** As ipvsadm -L and /proc/net/ip_vs print them (the kernel's ip_vs_protocol names). */
export const PROTO_LABEL: Readonly<Record<Protocol, string>> = { tcp: 'TCP', udp: 'UDP', sctp: 'SCTP' };

/** ipvsadm's service option for each (-t, -u, --sctp-service), as `ipvsadm -S` writes it. */
export const PROTO_SWITCH: Readonly<Record<Protocol, string>> = { tcp: '-t', udp: '-u', sctp: '--sctp-service' };

export function isProtocol(s: unknown): s is Protocol {
  return typeof s === 'string' && (PROTOCOLS as readonly string[]).includes(s);
}

/** The name of an IP protocol number, or null when no service has it. */
export function protocolOf(n: number): Protocol | null {
  return n === IPPROTO_TCP ? 'tcp' : n === IPPROTO_UDP ? 'udp' : n === IPPROTO_SCTP ? 'sctp' : null;
}

/** PROTO_LABEL of an IP protocol number, or the number as text. */
export function protoLabel(n: number): string {
  const p = protocolOf(n);
  return p === null ? String(n) : PROTO_LABEL[p];
}
