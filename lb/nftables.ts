/**
 * uvs's own nftables table: the masq reply marks as set elements, so the node holds a constant
 * number of rules however many real servers there are (issue 37).
 *
 * Before, every masq real server had two policy-routing rules (`from RIP ipproto P sport PORT`
 * and one for its ICMP). The kernel walks rules as a list for every routed packet: at 1,000
 * services × 4 servers a plain ping forwarded by the node took 5–8× longer, and each rule was an
 * `ip` process. Now one table per device,
 *
 *   table inet uvs_<device> {
 *     set replies4 { type ipv4_addr . inet_proto . inet_service }   RIP . proto . port
 *     set replies6 { type ipv6_addr . inet_proto . inet_service }
 *     set icmp4    { type ipv4_addr }                                RIP (its ICMP errors, not echo replies)
 *     set icmp6    { type ipv6_addr }
 *     chain prerouting { type filter hook prerouting priority mangle
 *       iifname <device> return                    what leaves the device is never sent back
 *       ip saddr . meta l4proto . th sport @replies4 meta mark set meta mark or BIT
 *       …  }
 *     chain output { type route hook output priority mangle; the same }   a server on this node
 *   }
 *
 * marks the real servers' replies with the into-device bit (lb/marks.ts), and one rule
 * `fwmark BIT/BIT lookup <routeTable>` sends them into the device. Sets are hash tables: the cost
 * per packet is one lookup, not a walk. Element changes go as one `nft -f -` per change,
 * asynchronously (a spawn, never execFileSync on the control thread); a batch is one transaction:
 * it applies whole or not at all. A batch the kernel refuses (someone flushed a set, deleted the
 * table) makes the next check rebuild the table with every element.
 */
import { runBackground, type Ran } from './background';
import { hexMark } from './marks';

/** A masq reply to mark: traffic from addr:port (proto) goes into the device; ICMP from addr (port 0). */
export interface ReplyRule {
  /** IPv4 or IPv6 text. */
  addr: string;
  port: number;
  proto: 'tcp' | 'udp' | 'sctp' | 'icmp';
}

export function ruleKey(r: ReplyRule): string {
  return `${r.proto} ${r.addr} ${r.port}`;
}

/** The table's name for a device (nft identifiers: letters, digits, _; the device may have . and -). */
export function nftTableName(device: string): string {
  return `uvs_${device.replace(/[^A-Za-z0-9_]/g, '_')}`;
}

/** Runs `nft [args] -f -` on this script without blocking the caller, at a lower CPU priority. */
export function nftRun(script: string, args: string[] = []): Promise<Ran> {
  return runBackground('nft', [...args, '-f', '-'], script);
}

/** Runs `nft ARGS` without blocking the caller, at a lower CPU priority. */
export function nftCmd(args: string[]): Promise<Ran> {
  return runBackground('nft', args);
}

/**
 * Whether `nft -j list chains inet` and `nft -j -t list sets inet` show the table's two chains on
 * their hooks and its four sets: the cheap check (no rule is listed, so no element is loaded).
 */
export function tableShape(chainsJson: string, setsJson: string, table: string): boolean {
  try {
    const items = [
      ...(JSON.parse(chainsJson) as { nftables: Record<string, { table?: string; name?: string; hook?: string }>[] }).nftables,
      ...(JSON.parse(setsJson) as { nftables: Record<string, { table?: string; name?: string; hook?: string }>[] }).nftables,
    ];
    const chains = new Set(items.filter((x) => x.chain?.table === table).map((x) => `${x.chain!.name} ${x.chain!.hook}`));
    const sets = new Set(items.filter((x) => x.set?.table === table).map((x) => x.set!.name));
    return chains.has('prerouting prerouting') && chains.has('output output') && SETS.every(([name]) => sets.has(name));
  } catch {
    return false;
  }
}

/** The set an element of this rule lives in, and the element's text. */
export function element(r: ReplyRule): { set: string; text: string } {
  const v6 = r.addr.includes(':');
  if (r.proto === 'icmp') return { set: v6 ? 'icmp6' : 'icmp4', text: r.addr };
  return { set: v6 ? 'replies6' : 'replies4', text: `${r.addr} . ${r.proto} . ${r.port}` };
}

const SETS = [
  ['replies4', 'ipv4_addr . inet_proto . inet_service'],
  ['replies6', 'ipv6_addr . inet_proto . inet_service'],
  ['icmp4', 'ipv4_addr'],
  ['icmp6', 'ipv6_addr'],
] as const;

/** The chains' rules: mark what the sets name with the into-device bit. */
function markRules(device: string, bit: number): string[] {
  const set = `meta mark set meta mark or ${hexMark(bit)}`;
  return [
    `iifname ${JSON.stringify(device)} return`,
    `ip saddr . meta l4proto . th sport @replies4 ${set}`,
    `ip6 saddr . meta l4proto . th sport @replies6 ${set}`,
    // Errors only (what ip_vs_out_icmp translates): a server's echo replies and the rest stay off the device.
    `ip saddr @icmp4 icmp type { destination-unreachable, time-exceeded, parameter-problem } ${set}`,
    `ip6 saddr @icmp6 icmpv6 type { destination-unreachable, packet-too-big, time-exceeded, parameter-problem } ${set}`,
  ];
}

/** Element lines for these rules: `add element …` (or delete) grouped per set, 1,000 per line. */
export function elementLines(verb: 'add' | 'delete', table: string, rules: Iterable<ReplyRule>): string[] {
  const per = new Map<string, string[]>();
  for (const r of rules) {
    const e = element(r);
    let l = per.get(e.set);
    if (!l) per.set(e.set, (l = []));
    l.push(e.text);
  }
  const out: string[] = [];
  for (const [set, items] of per) {
    for (let i = 0; i < items.length; i += 1000)
      out.push(`${verb} element inet ${table} ${set} { ${items.slice(i, i + 1000).join(', ')} }`);
  }
  return out;
}

/**
 * The whole table, atomically replacing whatever table of that name is there (`add` first: a
 * `delete` of a table that does not exist fails the transaction), with every element.
 */
export function tableScript(device: string, bit: number, rules: Iterable<ReplyRule>): string {
  const t = nftTableName(device);
  const lines = [`add table inet ${t}`, `delete table inet ${t}`, `table inet ${t} {`];
  for (const [name, type] of SETS) lines.push(`  set ${name} { type ${type}; }`);
  const rulesText = markRules(device, bit).map((r) => `    ${r}`);
  lines.push('  chain prerouting {', '    type filter hook prerouting priority mangle; policy accept;', ...rulesText, '  }');
  lines.push('  chain output {', '    type route hook output priority mangle; policy accept;', ...rulesText, '  }');
  lines.push('}');
  lines.push(...elementLines('add', t, rules));
  return `${lines.join('\n')}\n`;
}

/** Removes the table (absent is fine). */
export function removeTableScript(device: string): string {
  const t = nftTableName(device);
  return `add table inet ${t}\ndelete table inet ${t}\n`;
}

/**
 * Whether `nft -t list table` output (terse: no elements) holds everything tableScript makes:
 * the four sets and both chains with their rules.
 */
export function tableComplete(listing: string, device: string, bit: number): boolean {
  if (!listing.includes(`table inet ${nftTableName(device)} {`)) return false;
  for (const [name] of SETS) if (!listing.includes(`set ${name} {`)) return false;
  for (const chain of ['prerouting', 'output']) {
    const at = listing.indexOf(`chain ${chain} {`);
    if (at < 0) return false;
    // The chain ends at a line of its own `}` (rules hold anonymous sets `{ … }` on their line).
    const end = listing.slice(at).search(/\n\s*\}\s*\n/);
    const body = listing.slice(at, end < 0 ? undefined : at + end);
    // nft prints the rules back in its own words: check the sets and the bit each names.
    for (const s of ['@replies4', '@replies6', '@icmp4', '@icmp6']) if (!body.includes(s)) return false;
    const marks = [...body.matchAll(/meta mark set meta mark (?:or|\|) (0x[0-9a-fA-F]+)/g)].map((m) => Number(m[1]));
    if (marks.length < 4 || marks.some((m) => m !== bit)) return false;
  }
  return true;
}
