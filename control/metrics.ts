/**
 * Prometheus metrics and the health endpoint.
 *
 * `node_ipvs_*` carry node_exporter's IPVS collector names, types, help strings and backend labels
 * (local_address, local_port, remote_address, remote_port, proto, local_mark), so dashboards built
 * for kernel IPVS work unchanged. `uvs_*` describe the dataplane. Every value is read at scrape
 * time from the shared counters and the service model (metrics flow one way: workers bump,
 * this reads); nothing here runs per packet.
 *
 * Listeners: metrics on 127.0.0.1:10249 (kube-proxy's port), /healthz and /livez on
 * 127.0.0.1:10256. Either may listen beyond loopback only with a bearer token; on loopback they
 * are open without one, as kube-proxy's (read-only, no secrets; Prometheus and kubelet probes
 * expect it). Both check the Host header (http-guard.ts); the listener is listen.ts's.
 */
import { performance } from 'node:perf_hooks';
import { Counter, Gauge, Registry } from 'prom-client';
import { memoryView } from './memory';
import * as L from '../conntrack/layout';
import type { HealthzResponse } from './api-types';
import type { Daemon } from './daemon';
import { listenHttp, tokenOk, type HttpEndpoint } from './listen';
import { controlThreadView, Slicer } from './slices';

export function buildRegistry(d: Daemon): Registry {
  const reg = new Registry();
  // The five node totals of one scrape share one pass over the services' counters.
  let sum = { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0 };
  let sumAt = -Infinity;
  const svcStatsSum = () => {
    if (performance.now() - sumAt < 100) return sum;
    sum = { conns: 0, inPkts: 0, outPkts: 0, inBytes: 0, outBytes: 0 };
    for (const { slot } of d.model.counterSlots()) {
      const st = d.stats.service(slot);
      sum.conns += st.conns;
      sum.inPkts += st.inPkts;
      sum.outPkts += st.outPkts;
      sum.inBytes += st.inBytes;
      sum.outBytes += st.outBytes;
    }
    sumAt = performance.now();
    return sum;
  };
  const counterFrom = (name: string, help: string, labelNames: string[], fill: (c: Counter) => void) =>
    new Counter({
      name,
      help,
      labelNames,
      registers: [reg],
      collect() {
        this.reset();
        fill(this);
      },
    });
  const gaugeFrom = (name: string, help: string, labelNames: string[], fill: (g: Gauge) => void) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers: [reg],
      collect() {
        this.reset();
        fill(this);
      },
    });

  const total = (name: string, help: string, key: 'conns' | 'inPkts' | 'outPkts' | 'inBytes' | 'outBytes') =>
    counterFrom(name, help, [], (c) => c.inc(svcStatsSum()[key]));
  total('node_ipvs_connections_total', 'The total number of connections made.', 'conns');
  total('node_ipvs_incoming_packets_total', 'The total number of incoming packets.', 'inPkts');
  total('node_ipvs_outgoing_packets_total', 'The total number of outgoing packets.', 'outPkts');
  total('node_ipvs_incoming_bytes_total', 'The total amount of incoming data.', 'inBytes');
  total('node_ipvs_outgoing_bytes_total', 'The total amount of outgoing data.', 'outBytes');

  counterFrom('uvs_packets_total', 'Packets read from (rx) and written to (tx) the TUN device.', ['direction'], (c) => {
    const g = d.stats.global();
    c.inc({ direction: 'rx' }, g.rxPackets);
    c.inc({ direction: 'tx' }, g.txPackets);
  });
  counterFrom('uvs_bytes_total', 'Bytes read from (rx) and written to (tx) the TUN device.', ['direction'], (c) => {
    const g = d.stats.global();
    c.inc({ direction: 'rx' }, g.rxBytes);
    c.inc({ direction: 'tx' }, g.txBytes);
  });
  counterFrom('uvs_drops_total', 'Packets dropped by the dataplane, by reason.', ['reason'], (c) => {
    for (const [reason, v] of Object.entries(d.stats.drops())) c.inc({ reason }, v);
  });
  counterFrom('uvs_tx_errors_total', 'Packets the TUN device would not take (queue full).', [], (c) => c.inc(d.stats.global().txErrors));
  counterFrom(
    'uvs_tx_extra_packets_total',
    'Packets written beyond one per packet handled: GSO segments after the first (tunnel), PROXY protocol header segments ahead of data.',
    [],
    (c) => c.inc(d.stats.global().txExtra),
  );
  counterFrom('uvs_scheduling_failures_total', 'New flows refused because no real server was available.', [], (c) =>
    c.inc(d.stats.drops().no_real_server!),
  );
  counterFrom('uvs_connections_expired_total', 'Connection entries removed by their timers.', [], (c) => c.inc(d.expiredTotal));
  gaugeFrom('uvs_connection_table_entries', 'Live entries in the shared connection table.', [], (g) => g.set(d.table.count()));
  gaugeFrom('uvs_connection_table_capacity', 'Capacity of the shared connection table.', [], (g) => g.set(d.table.capacity));
  gaugeFrom(
    'uvs_connection_table_chain_max',
    'Longest hash chain a worker walked in the last 10 to 20 s (about 8 for a full 64 k table; hash flooding shows as more).',
    [],
    (g) => g.set(d.stats.maxWord(L.C_CHAIN_MAX)),
  );
  counterFrom(
    'uvs_connection_table_long_chains_total',
    'Lookups and inserts that walked a hash chain longer than 16 entries (an alarm: a keyed hash makes them all but impossible).',
    [],
    (c) => c.inc(d.stats.word(L.C_LONG_CHAINS)),
  );
  counterFrom(
    'uvs_generated_packets_total',
    'Packets uvs generated (kind: reset, unreachable, echo, too_big) and those it suppressed (result: sent, bad_destination, rate_limited).',
    ['kind', 'result'],
    (c) => {
      for (const [kind, r] of Object.entries(d.stats.generated())) for (const [result, v] of Object.entries(r)) c.inc({ kind, result }, v);
    },
  );
  counterFrom('uvs_worker_packets_total', 'Packets read per dataplane worker.', ['worker'], (c) => {
    d.stats.perWorker().forEach((w, i) => c.inc({ worker: String(i) }, w.rxPackets));
  });
  gaugeFrom(
    'uvs_memory_bytes',
    "uvsd's memory by kind (process.memoryUsage): rss of the whole process; heap_used, heap_total of the control thread's V8 heap, heap_after_full_gc what it retained at its last full collection; external, array_buffers (the shared table included).",
    ['kind'],
    (g) => {
      const m = memoryView();
      if (m.heapAfterFullGc !== null) g.set({ kind: 'heap_after_full_gc' }, m.heapAfterFullGc);
      g.set({ kind: 'rss' }, m.rss);
      g.set({ kind: 'heap_used' }, m.heapUsed);
      g.set({ kind: 'heap_total' }, m.heapTotal);
      g.set({ kind: 'external' }, m.external);
      g.set({ kind: 'array_buffers' }, m.arrayBuffers);
    },
  );
  gaugeFrom('uvs_worker_up', '1 when the dataplane worker is running.', ['worker'], (g) => {
    for (const w of d.dataplane.workerInfo()) g.set({ worker: String(w.id) }, w.ready ? 1 : 0);
  });
  gaugeFrom(
    'uvs_worker_io_path',
    'The I/O path of a running dataplane worker: 1 for the path it runs on (io_uring, or poll = poll + read + write; dataplane.io).',
    ['worker', 'path'],
    (g) => {
      for (const w of d.dataplane.workerInfo()) {
        if (w.io === null) continue;
        g.set({ worker: String(w.id), path: 'io_uring' }, w.io === 'io_uring' ? 1 : 0);
        g.set({ worker: String(w.id), path: 'poll' }, w.io === 'poll' ? 1 : 0);
      }
    },
  );
  gaugeFrom(
    'uvs_dataplane_steering',
    "How the device picks each packet's queue: 1 for the way it does (ebpf = uvs's program, keyed on the client's endpoint; automq = the device's flow table; dataplane.steering).",
    ['path'],
    (g) => {
      const s = d.dataplane.steering();
      g.set({ path: 'ebpf' }, s.path === 'ebpf' ? 1 : 0);
      g.set({ path: 'automq' }, s.path === 'automq' ? 1 : 0);
    },
  );
  gaugeFrom(
    'uvs_node_replies',
    "How masq replies reach the device: 1 for the way they do (nftables = uvs's table and one rule; rules = one policy rule per real server, without nftables).",
    ['path'],
    (g) => {
      const r = d.dataplane.replies();
      g.set({ path: 'nftables' }, r.path === 'nftables' ? 1 : 0);
      g.set({ path: 'rules' }, r.path === 'rules' ? 1 : 0);
    },
  );
  counterFrom(
    'uvs_node_repairs_total',
    'Times uvsd restored its own node state another tool removed (what: nftables = its table, rules = its policy rules, routes = its routes; dataplane.resyncInterval).',
    ['what'],
    (c) => {
      const r = d.dataplane.repairs();
      for (const k of ['nftables', 'rules', 'routes'] as const) c.inc({ what: k }, r[k]);
    },
  );
  counterFrom('uvs_worker_restarts_total', 'Dataplane worker restarts.', ['worker'], (c) => {
    for (const w of d.dataplane.workerInfo()) c.inc({ worker: String(w.id) }, w.restarts);
  });
  gaugeFrom(
    'uvs_listener_up',
    '1 while a TCP listener (api, metrics, healthz) listens; 0 while another process holds its port (uvsd tries again every 2 s).',
    ['listener', 'address'],
    (g) => {
      for (const l of d.listenerStatus()) g.set({ listener: l.name, address: l.address }, l.listening ? 1 : 0);
    },
  );
  gaugeFrom(
    'uvs_control_loop_delay_max_seconds',
    "The longest delay of the control thread's event loop in the last 60 s (what a /healthz or API request could have waited; control/slices.ts).",
    [],
    (g) => {
      const v = controlThreadView().loopDelay;
      g.set(Math.max(v.currentMs, ...v.windows.map((w) => w.maxMs)) / 1000);
    },
  );
  gaugeFrom(
    'uvs_control_cpu_run_max_seconds',
    'The longest CPU time the control thread ran without its event loop turning, in the last 60 s (control/slices.ts; 0 where /proc has no schedstat).',
    [],
    (g) => {
      const v = controlThreadView().loopDelay;
      g.set(Math.max(v.currentCpuMs ?? 0, ...v.windows.map((w) => w.maxCpuMs ?? 0)) / 1000);
    },
  );
  gaugeFrom('uvs_drain_list_size', 'Real servers being drained (graceful termination).', [], (g) => g.set(d.model.drains().length));
  counterFrom(
    'uvs_drains_total',
    'Drains finished, by result: deleted (no connection left), deadline (maximum drain time), resurrected (re-added).',
    ['result'],
    (c) => {
      for (const [result, v] of Object.entries(d.drainResults)) c.inc({ result }, v);
    },
  );
  counterFrom('uvs_config_reloads_total', 'Configuration reloads, by result.', ['result'], (c) => {
    c.inc({ result: 'ok' }, d.reloads.ok);
    c.inc({ result: 'rejected' }, d.reloads.failed);
  });
  // Overload defenses (conntrack/defense.ts): the kernel's sysctl values and what they did.
  gaugeFrom(
    'uvs_defense_mode',
    'Overload defense setting as /proc/sys/net/ipv4/vs shows it: 0 off, 1 automatic (idle), 2 automatic (on), 3 always.',
    ['defense'],
    (g) => {
      for (const x of d.defense.view().defenses) g.set({ defense: x.name }, x.mode);
    },
  );
  gaugeFrom('uvs_defense_active', '1 while the overload defense acts.', ['defense'], (g) => {
    for (const x of d.defense.view().defenses) g.set({ defense: x.name }, x.active ? 1 : 0);
  });
  gaugeFrom(
    'uvs_defense_free_entries',
    'Free connection-table entries at the last defense check (the kernel compares free memory).',
    [],
    (g) => g.set(d.defense.freeEntries),
  );
  gaugeFrom('uvs_defense_amemthresh', 'Free entries below which the automatic defenses switch on.', [], (g) =>
    g.set(d.defense.settings.amemthresh),
  );
  gaugeFrom('uvs_defense_drop_rate', 'drop_packet: 1 of every this many new flows is refused (0 = none).', [], (g) =>
    g.set(d.defense.dropRate),
  );
  counterFrom(
    'uvs_defense_dropped_entries_total',
    'Entries removed by drop_entry: half_open (SYN_RECV/SYNACK, SCTP INIT) or idle (todrop_entry, dropEntryScope kernel only).',
    ['kind'],
    (c) => {
      c.inc({ kind: 'half_open' }, d.defense.counts.droppedHalfOpen);
      c.inc({ kind: 'idle' }, d.defense.counts.droppedIdle);
    },
  );
  counterFrom('uvs_defense_secure_tcp_shortened_total', 'Half-open entries whose timer secure_tcp cut to its short timeout.', [], (c) =>
    c.inc(d.defense.counts.secureTcpShortened),
  );
  counterFrom(
    'uvs_defense_refusals_total',
    'New flows refused by a defense: drop_packet, or a source at its half-open limit.',
    ['defense'],
    (c) => {
      const drops = d.stats.drops();
      c.inc({ defense: 'dropPacket' }, drops.defense_drop_packet ?? 0);
      c.inc({ defense: 'halfOpenPerSource' }, drops.half_open_per_source ?? 0);
    },
  );
  gaugeFrom('uvs_fullnat_pool_used_ratio', "Share of a full-NAT real server's pool address × port pairs in use.", ['real_server'], (g) => {
    for (const p of d.defense.poolUse) g.set({ real_server: p.realServer }, p.capacity > 0 ? p.used / p.capacity : 0);
  });
  gaugeFrom('uvs_connection_table_shadow_entries', 'Entries learnt from other nodes through Redis, not yet adopted.', [], (g) =>
    g.set(d.table.shadows()),
  );
  counterFrom(
    'uvs_proxy_protocol_headers_total',
    'PROXY protocol header segments sent to full-NAT real servers (one per connection; more when resent after loss).',
    [],
    (c) => c.inc(d.stats.word(L.C_PP_HEADERS)),
  );
  counterFrom(
    'uvs_proxy_protocol_syn_data_total',
    "Client SYNs of PROXY protocol flows sent on without their data (TCP Fast Open data would precede uvs's header).",
    [],
    (c) => c.inc(d.stats.word(L.C_PP_SYN_DATA)),
  );
  counterFrom(
    'uvs_sloppy_connections_total',
    'Connections started by a packet other than a SYN or INIT (sloppy_tcp, sloppy_sctp): a flow another node carried.',
    [],
    (c) => c.inc(d.stats.word(L.C_SLOPPY)),
  );
  // SYN proxy (lb/synproxy.ts); its bad cookies are uvs_drops_total{reason="bad_cookie"}.
  counterFrom('uvs_synproxy_cookies_total', 'SYN-ACKs with a SYN cookie sent to clients (no entry made).', [], (c) =>
    c.inc(d.stats.word(L.C_GEN_BASE + L.GEN_SYN_ACK * L.GEN_RESULTS + L.GEN_SENT)),
  );
  counterFrom('uvs_synproxy_accepted_total', 'Client ACKs with a valid SYN cookie: flows made, a SYN sent to the real server.', [], (c) =>
    c.inc(d.stats.word(L.C_SP_ACCEPTED)),
  );
  counterFrom(
    'uvs_synproxy_held_packets_total',
    "Client packets held while the real server's handshake was pending, and those that could not be held.",
    ['result'],
    (c) => {
      c.inc({ result: 'held' }, d.stats.word(L.C_SP_HELD));
      c.inc({ result: 'refused' }, d.stats.word(L.C_SP_HELD_REFUSED));
    },
  );
  counterFrom('uvs_synproxy_server_failures_total', "Real servers that answered the SYN proxy's SYN with a RST.", [], (c) =>
    c.inc(d.stats.word(L.C_SP_SERVER_FAIL)),
  );
  gaugeFrom('uvs_synproxy_pending', "SYN-proxied flows waiting for their real server's SYN-ACK.", [], (g) => g.set(d.table.spPending()));
  gaugeFrom('uvs_synproxy_held_packets', 'Client packets held now (shared area of 512).', [], (g) => g.set(d.table.holdUsed()));
  counterFrom('uvs_adoptions_total', "Other nodes' flows taken over by this node (first packet seen here).", [], (c) =>
    c.inc(d.stats.word(L.C_ADOPTED)),
  );
  gaugeFrom(
    'uvs_announced',
    '1 while the announcement routes are in dataplane.announceTable (a BGP speaker draws traffic here).',
    [],
    (g) => g.set(d.announcer.status().announced ? 1 : 0),
  );
  gaugeFrom('uvs_maintenance', '1 while node maintenance is on (announcement withdrawn, still forwarding).', [], (g) =>
    g.set(d.announcer.status().maintenance ? 1 : 0),
  );
  counterFrom(
    'uvs_parked_packets_total',
    'Mid-flow packets parked for a Redis lookup, and those refused because the park ring was full.',
    ['result'],
    (c) => {
      c.inc({ result: 'parked' }, d.stats.word(L.C_PARKED));
      c.inc({ result: 'ring_full' }, d.stats.word(L.C_PARK_FULL));
    },
  );
  if (d.sync) {
    const st = d.sync.stats;
    gaugeFrom('uvs_redis_connected', '1 while the Redis connection is up.', [], (g) => g.set(st.connected ? 1 : 0));
    gaugeFrom('uvs_redis_sync_queue_depth', 'Flow records waiting to be written to Redis.', [], (g) => g.set(st.queueDepth));
    gaugeFrom('uvs_redis_sync_lag_seconds', 'Time from a flow record being queued to its write being acknowledged (last batch).', [], (g) =>
      g.set(st.lagSeconds),
    );
    counterFrom('uvs_redis_records_written_total', 'Flow records written to Redis.', [], (c) => c.inc(st.written));
    counterFrom(
      'uvs_redis_records_dropped_total',
      'Flow records dropped because the write queue was full (Redis down or slow), plus sync events lost to a full worker ring.',
      [],
      (c) => c.inc(st.dropped + d.stats.word(L.C_SYNC_RING_FULL)),
    );
    counterFrom('uvs_redis_errors_total', 'Redis errors (connection, command, timeout).', [], (c) => c.inc(st.errors));
    counterFrom('uvs_redis_records_received_total', "Other nodes' flow records pre-loaded from the change stream.", [], (c) =>
      c.inc(st.received),
    );
    counterFrom(
      'uvs_adoption_lookups_total',
      "Redis lookups for parked packets, by result (refused: the record was not believed; busy: a packet dropped at the in-flight or waiting-packet cap; joined: a packet that waited on its flow's lookup).",
      ['result'],
      (c) => {
        for (const [k, v] of Object.entries(st.lookups)) c.inc({ result: k }, v);
      },
    );
    counterFrom(
      'uvs_adoption_second_chances_total',
      'Client packets Redis knew nothing of twice (or could not be asked about), replayed once to be scheduled (sloppy) or refused with a RST: no silent black hole.',
      [],
      (c) => c.inc(st.secondChances),
    );
    counterFrom(
      'uvs_adoption_replay_failures_total',
      "Packets of a Redis lookup's hit that could not be replayed into the device (no raw socket, EMSGSIZE, a firewall, a full buffer).",
      [],
      (c) => c.inc(st.replayFailed),
    );
    gaugeFrom('uvs_adoption_lookups_in_flight', 'Redis lookups for parked packets not answered yet (at most redis.maxLookups).', [], (g) =>
      g.set(st.lookupsInFlight),
    );
    gaugeFrom('uvs_adoption_parked_waiting', 'Parked packets waiting on a Redis lookup.', [], (g) => g.set(st.parkedWaiting));
    gaugeFrom('uvs_redis_pending_commands', 'Commands sent to Redis and not answered yet.', [], (g) => g.set(d.sync!.pendingCommands()));
    counterFrom(
      'uvs_redis_command_timeouts_total',
      'Redis commands unanswered within redis.commandTimeout (the connection is then re-made).',
      [],
      (c) => c.inc(st.commandTimeouts),
    );
    counterFrom(
      'uvs_redis_resyncs_total',
      'Walks of the local table that queued every live flow again because Redis may have lost records (records dropped from the queue, another Redis server).',
      [],
      (c) => c.inc(st.resyncs),
    );
    counterFrom('uvs_redis_records_resynced_total', 'Flow records queued again by those walks.', [], (c) => c.inc(st.resynced));
    gaugeFrom(
      'uvs_redis_catching_up',
      '1 from a (re)connect to Redis until every record owed since (queued before it, or by the walk it called for) is written.',
      [],
      (g) => g.set(st.catchingUp ? 1 : 0),
    );
    gaugeFrom(
      'uvs_redis_catchup_seconds',
      'Seconds the last catch-up took, from the (re)connect to its last owed record written.',
      [],
      (g) => g.set(st.lastCatchUpSeconds ?? 0),
    );
    counterFrom(
      'uvs_redis_shadows_superseded_total',
      "Shadows replaced by another node's record of a newer flow on the same client address and port.",
      [],
      (c) => c.inc(st.superseded),
    );
    counterFrom('uvs_redis_records_refused_total', "Other nodes' flow records not believed, by reason.", ['reason'], (c) => {
      for (const [k, v] of Object.entries(st.refused)) c.inc({ reason: k }, v);
    });
    counterFrom('uvs_redis_counts_refused_total', "Other nodes' connection counts not believed, by reason.", ['reason'], (c) => {
      for (const [k, v] of Object.entries(st.countsRefused)) c.inc({ reason: k }, v);
    });
    counterFrom(
      'uvs_redis_nodes_refused_total',
      'Entries of the Redis node list ignored, by reason (future: heartbeat ahead of this clock by more than 5 s, removed; cap: beyond redis.maxNodes; bad_id), and with redis.recordKey signed heartbeats refused (auth: no valid MAC; stale: older than three count periods or from the future).',
      ['reason'],
      (c) => {
        for (const [k, v] of Object.entries(st.nodesRefused)) c.inc({ reason: k }, v);
      },
    );
    gaugeFrom('uvs_cluster_nodes', 'uvs nodes seen in Redis in the last three count periods, this one included.', [], (g) =>
      g.set(d.sync!.remoteNodes.length + 1),
    );
  }
  return reg;
}

/** A label value as the exposition format writes it (prom-client's escaping). */
function esc(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/**
 * The families with one series per service or per real server (node_exporter's backend gauges,
 * the per-service and per-real-server counters, weights and health), as exposition text built in
 * slices (control/slices.ts). Through prom-client they were one piece of work: with 1023
 * services and 4096 real servers (about 50 000 series) a scrape held the control thread 860 ms.
 * Same names, types, help, labels (node_exporter's backend labels, in its order) and values as
 * before; rows with identical labels are summed, as node_exporter does.
 */
export async function perServerText(d: Daemon, write: (part: string) => void): Promise<void> {
  type Fam = { name: string; type: 'counter' | 'gauge'; help: string; rows: Map<string, number> };
  const fams: Fam[] = [];
  // `sum`: rows with identical labels add up (prom-client's inc); else the last one stays (set).
  const fam = (name: string, type: Fam['type'], help: string, sum = true) => {
    const f: Fam = { name, type, help, rows: new Map() };
    fams.push(f);
    return (labels: string, v: number) => f.rows.set(labels, sum ? (f.rows.get(labels) ?? 0) + v : v);
  };
  const active = fam('node_ipvs_backend_connections_active', 'gauge', 'The current active connections by local and remote address.');
  const inactive = fam('node_ipvs_backend_connections_inactive', 'gauge', 'The current inactive connections by local and remote address.');
  const weight = fam('node_ipvs_backend_weight', 'gauge', 'The current backend weight by local and remote address.');
  // Per service and per real server (ipvsadm --stats): node_exporter has node totals only. -Z
  // restarts them from zero, which rate() reads as a counter reset.
  const svcConns = fam('uvs_service_connections_total', 'counter', 'Connections scheduled per virtual service (ipvsadm --stats Conns).');
  const svcPackets = fam(
    'uvs_service_packets_total',
    'counter',
    'Packets per virtual service: in = client to server, out = server to client (ipvsadm --stats InPkts, OutPkts).',
  );
  const svcBytes = fam(
    'uvs_service_bytes_total',
    'counter',
    'Bytes per virtual service, by direction (ipvsadm --stats InBytes, OutBytes).',
  );
  const rsConns = fam('uvs_backend_connections_total', 'counter', 'Connections scheduled per real server of a service.');
  const rsPackets = fam('uvs_backend_packets_total', 'counter', 'Packets per real server of a service, by direction.');
  const rsBytes = fam('uvs_backend_bytes_total', 'counter', 'Bytes per real server of a service, by direction.');
  // node_ipvs_backend_weight is the weight the schedulers see (0 while failing or draining, the
  // ramp during slow start); this is the one configured, the weight it returns to.
  const configured = fam(
    'uvs_realserver_configured_weight',
    'gauge',
    'The configured weight of the real server (node_ipvs_backend_weight is the current one, lower during slow start).',
    false,
  );
  const healthy = fam('uvs_realserver_healthy', 'gauge', '1 when the real server passes its health check (or has none).', false);
  const sl = new Slicer('metrics');
  for (const s of d.model.eachService()) {
    const proto = s.cfg.protocol.toUpperCase();
    const svc = `local_address="${esc(s.cfg.address)}",local_port="${s.cfg.port}",proto="${proto}"`;
    const st = d.stats.service(s.slot);
    svcConns(`{${svc}}`, st.conns);
    svcPackets(`{${svc},direction="in"}`, st.inPkts);
    svcPackets(`{${svc},direction="out"}`, st.outPkts);
    svcBytes(`{${svc},direction="in"}`, st.inBytes);
    svcBytes(`{${svc},direction="out"}`, st.outBytes);
    for (const r of s.realServers) {
      const b = `local_address="${esc(s.cfg.address)}",local_port="${s.cfg.port}",remote_address="${esc(r.address)}",remote_port="${r.port}",proto="${proto}",local_mark=""`;
      const rst = d.stats.realServer(r.slot);
      active(`{${b}}`, r.activeConns);
      inactive(`{${b}}`, r.inactConns);
      weight(`{${b}}`, r.weight);
      rsConns(`{${b}}`, rst.conns);
      rsPackets(`{${b},direction="in"}`, rst.inPkts);
      rsPackets(`{${b},direction="out"}`, rst.outPkts);
      rsBytes(`{${b},direction="in"}`, rst.inBytes);
      rsBytes(`{${b},direction="out"}`, rst.outBytes);
      configured(`{${b}}`, r.configuredWeight);
      healthy(`{${b}}`, r.healthy ? 1 : 0);
    }
    if (sl.due()) await sl.pause();
  }
  // Written family by family, in parts of at most 1000 lines: one 8 MB string would be encoded
  // and written in one piece.
  for (const f of fams) {
    let lines = [`\n# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`];
    for (const [labels, v] of f.rows) {
      lines.push(`${f.name}${labels} ${getValueAsString(v)}`);
      if (lines.length >= 1000) {
        write(`${lines.join('\n')}\n`);
        lines = [];
      }
      if (sl.due()) await sl.pause();
    }
    write(`${lines.join('\n')}\n`);
  }
  sl.end();
}

/** prom-client's number format (util.js getValueAsString). */
function getValueAsString(v: number): string {
  if (Number.isNaN(v)) return 'Nan';
  if (!Number.isFinite(v)) return v < 0 ? '-Inf' : '+Inf';
  return String(v);
}

export function startMetrics(d: Daemon, address: string, token: string | undefined): Promise<HttpEndpoint> {
  const reg = buildRegistry(d);
  return listenHttp(address, (req, res) => {
    if (!tokenOk(req, token)) {
      res
        .writeHead(401, { 'content-type': 'application/json' })
        .end(JSON.stringify({ code: 'UVS_ERR_API_UNAUTHORIZED', message: 'missing or wrong bearer token' }));
      return;
    }
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    // The registry's families are small (node-wide figures); the per-server ones come in slices.
    reg.metrics().then(
      async (text) => {
        res.writeHead(200, { 'content-type': reg.contentType }).write(text);
        try {
          await perServerText(d, (part) => res.write(part));
        } catch (e) {
          res.destroy(e as Error); // the status is sent: a cut answer is the only way to say it failed
          return;
        }
        res.end();
      },
      (e: Error) => res.writeHead(500).end(e.message),
    );
  });
}

/** kube-proxy-style health: 200 while every worker runs, 503 otherwise (GET /healthz, /livez). */
export function healthzView(d: Daemon): { status: 200 | 503; body: HealthzResponse } {
  const workers = d.dataplane.workerInfo();
  const healthy = workers.length > 0 && workers.every((w) => w.ready);
  const now = new Date().toISOString();
  return {
    status: healthy ? 200 : 503,
    body: {
      lastUpdated: healthy ? now : new Date(d.lastSnapshotAt).toISOString(),
      currentTime: now,
      healthy,
      workers: workers.map((w) => ({ id: w.id, up: w.ready, restarts: w.restarts })),
    },
  };
}

/**
 * The healthz listener (healthz.address, 127.0.0.1:10256 by default), for kubelet-style probes. Any
 * local user can listen on that port while uvsd does not, so an answer here does not prove uvsd
 * gave it: keepalived asks the admin API's root-only socket instead (examples/keepalived).
 */
export function startHealthz(d: Daemon, address: string, token: string | undefined): Promise<HttpEndpoint> {
  return listenHttp(address, (req, res) => {
    if (!tokenOk(req, token)) {
      res.writeHead(401).end();
      return;
    }
    if (req.url !== '/healthz' && req.url !== '/livez') {
      res.writeHead(404).end();
      return;
    }
    const h = healthzView(d);
    res.writeHead(h.status, { 'content-type': 'application/json' }).end(JSON.stringify(h.body));
  });
}
