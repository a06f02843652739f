/** ipvsadm's version_exit() and usage_exit() texts, with uvs's differences said where they apply. */
import { DEFAULT_SCHEDULER } from '../../schedulers/registry';
import { DEFAULT_PERSISTENT_TIMEOUT, PROGRAM, VERSION } from './tables';

export function versionLine(): string {
  return `${PROGRAM} ${VERSION} (ipvsadm v1.31 command line, IPVS v1.2.1 semantics, uvsd over its API socket)\n`;
}

/** usage_exit(): ipvsadm's text, with uvs's differences said where they apply. */
export function usage(p: string = PROGRAM): string {
  return `${versionLine()}Usage:
  ${p} -A|E virtual-service [-s scheduler] [-p [timeout]] [-M netmask] [--pe persistence_engine] [-b sched-flags]
  ${p} -D virtual-service
  ${p} -C
  ${p} -R
  ${p} -S [-n]
  ${p} -a|e virtual-service -r server-address [options]
  ${p} -d virtual-service -r server-address
  ${p} -L|l [virtual-service] [options]
  ${p} -Z [virtual-service]
  ${p} --set tcp tcpfin udp
  ${p} --start-daemon {master|backup} [daemon-options]
  ${p} --stop-daemon {master|backup}
  ${p} -h

Commands:
Either long or short options are allowed.
  --add-service     -A        add virtual service with options
  --edit-service    -E        edit virtual service with options
  --delete-service  -D        delete virtual service
  --clear           -C        clear the whole table
  --restore         -R        restore rules from stdin (uvs: all lines as one atomic change)
  --save            -S        save rules to stdout
  --add-server      -a        add real server with options
  --edit-server     -e        edit real server with options
  --delete-server   -d        delete real server
  --list            -L|-l     list the table
  --zero            -Z        zero counters in a service or all services
  --set tcp tcpfin udp        set connection timeout values
  --start-daemon              start connection sync daemon (uvs: not supported, see below)
  --stop-daemon               stop connection sync daemon (uvs: not supported)
  --help            -h        display this help message

virtual-service:
  --tcp-service|-t  service-address   service-address is host[:port]
  --udp-service|-u  service-address   service-address is host[:port]
  --sctp-service    service-address   service-address is host[:port]
  --fwmark-service|-f fwmark          fwmark is an integer greater than zero (uvs: not supported)

Options:
  --ipv6         -6                   fwmark entry uses IPv6
  --scheduler    -s scheduler         one of rr|wrr|lc|wlc|lblc|lblcr|dh|sh|sed|nq|fo|ovf|mh|twos,
                                      the default scheduler is ${DEFAULT_SCHEDULER}.
  --pe            engine              alternate persistence engine (uvs: not supported)
  --persistent   -p [timeout]         persistent service (default timeout ${DEFAULT_PERSISTENT_TIMEOUT})
  --netmask      -M netmask           persistent granularity mask
  --real-server  -r server-address    server-address is host (and port); no port = the service's
  --gatewaying   -g                   gatewaying (direct routing) (uvs: refused, a TUN device
                                      carries no layer-2 frames)
  --ipip         -i                   ipip encapsulation (tunneling) (uvs: needs dataplane.tunnelSource)
  --masquerading -m                   masquerading (NAT) (the default in uvs; ipvsadm's is -g)
  --fullnat                           (uvs) full-NAT: the source becomes uvsd's pool address and port
  --proxy-protocol v1|v2|none         (uvs) full-NAT TCP: send the real server a PROXY protocol
                                      header with the client's address (-a, -e; -e without it
                                      keeps the server's setting)
  --tun-type      type                one of ipip|gue|gre,
                                      the default tunnel type is ipip (uvs: ipip only)
  --tun-port      port                tunnel destination port (uvs: gue only, not supported)
  --tun-nocsum                        tunnel encapsulation without checksum (uvs: not supported)
  --tun-csum                          tunnel encapsulation with checksum (uvs: not supported)
  --tun-remcsum                       tunnel encapsulation with remote checksum (uvs: not supported)
  --weight       -w weight            capacity of real server
  --u-threshold  -x uthreshold        upper threshold of connections
  --l-threshold  -y lthreshold        lower threshold of connections
  --connection   -c                   output of current IPVS connections
  --timeout                           output of timeout (tcp tcpfin udp)
  --daemon                            output of daemon information (uvs: none runs, so nothing)
  --stats                             output of statistics information
  --rate                              output of rate information (uvsd's estimator: the
                                      kernel's, every 2 s, EWMA weight 1/4)
  --exact                             expand numbers (display exact values)
  --thresholds                        output of thresholds information
  --persistent-conn                   output of persistent connection info
  --tun-info                          output of tunnel information
  --nosort                            disable sorting output of service/server entries
  --sort                              does nothing, for backwards compatibility
  --ops          -o                   one-packet scheduling (uvs: not supported yet)
  --numeric      -n                   numeric output of addresses and ports
  --sched-flags  -b flags             scheduler flags (comma-separated)
Daemon Options:
  --syncid sid                        syncid for connection sync (default=255)
  --sync-maxlen length                Max sync message length (default=1472)
  --mcast-interface interface         multicast interface for connection sync
  --mcast-group address               IPv4/IPv6 group (default=224.0.0.81)
  --mcast-port port                   UDP port (default=8848)
  --mcast-ttl ttl                     Multicast TTL (default=1)
  (uvs has no multicast sync daemon: uvs instances share connection state through Redis.)

uvs additions:
  --socket PATH                       uvsd API socket (default $UVS_SOCKET or /run/uvs/uvsd.sock)
  --reload                            re-read uvsd's configuration file (like SIGHUP)
  --kill-worker N                     terminate dataplane worker N (it is restarted; for testing)
  --maintenance on|off|status|wait    node maintenance: on withdraws this node's announcement
                                      (dataplane.announceTable) while it keeps forwarding what
                                      arrives; off announces again; status exits 1 in maintenance;
                                      wait returns once no packet arrived for 2 s (at most 300 s)
  -L --drain                          real servers being drained: since when, connections left
  -L --health                         health-check verdicts per real server
  -L --defense                        overload defenses (drop_entry, drop_packet, secure_tcp,
                                      half-open limit per source, SYN proxy): levels, trigger,
                                      counts
  --capture (--sample N | --flow K=V,…) [--seconds S] [--max-packets M] [--format pcap|jsonl]
            [-w FILE]                 capture 1 in N packets, or one flow's (keys protocol,
                                      address, port, peer, peerPort; either direction), for S
                                      seconds (10) or M packets (1000): a pcap file for tcpdump
                                      -r (default) or a JSON line per packet with the decision
  -L --workers                        dataplane workers: state, restarts, I/O path, packets

Differences from ipvsadm: the default forwarding method is masquerading (-m): uvs cannot route
directly. Host names given here are read from /etc/hosts only; without -n, listings look names
up in /etc/hosts, /etc/services and reverse DNS (300 ms for the whole listing, then numbers).
Changes made here live in uvsd until its configuration file is reloaded.
`;
}
