/**
 * The admin API's answers, declared once: api.ts returns them, and uvsadm.ts, the labs and the
 * tests read them (client.ts's `apiCall<T>`). One type per route, the JSON it sends with status
 * 200 (202 for a worker kill); any other status sends an ApiError. What the daemon's parts
 * already declare — a real server's view, the counters, a health verdict, the defenses, the
 * announcement — is used as it is, so each shape still lives in one place.
 */
import type { DefenseView } from '../conntrack/defense';
import type { SyncStats } from '../conntrack/redis-sync';
import type { IoPath, SteeringPath } from '../lb/tun';
import type { Protocol } from '../net/proto';
import type { AnnounceStatus } from './announce';
import type { UvsConfig } from './config';
import type { DisruptionPreview } from './disruption';
import type { ErrorCode } from './errors';
import type { HealthState } from './health';
import type { ListenerStatus } from './listen';
import type { MemoryView } from './memory';
import type { RealServerView } from './services';
import type { ControlThreadView } from './slices';
import type { FlowRates, FlowStats, PacketCounters } from './stats';

/** Every refusal and failure: a code of errors.ts (docs/errors.md), the reason, the field if any. */
export interface ApiError {
  code: ErrorCode;
  message: string;
  /** Where the problem is, e.g. `ops[0].realServer.weight`. */
  path?: string;
}

/** GET /v1/info */
export interface InfoResponse {
  name: 'uvs';
  version: string;
  device: string;
  workers: number;
  tableSize: number;
  configFile: string;
}

/** A real server as GET /v1/services lists it: the model's view, its counters and rates. */
export interface RealServerStatus extends RealServerView {
  stats: FlowStats;
  rates: FlowRates;
}

/** A virtual service as GET /v1/services lists it. */
export interface ServiceStatus {
  name: string;
  protocol: Protocol;
  address: string;
  port: number;
  scheduler: string;
  schedFlags: string[];
  /** Seconds; 0 = not persistent. */
  persistence: number;
  /** Persistence granularity, dotted. */
  netmask: string;
  stats: FlowStats;
  rates: FlowRates;
  realServers: RealServerStatus[];
}

/** GET /v1/services (ipvsadm -L). */
export interface ServicesResponse {
  /** What ipvsadm prints as `(size=…)`. */
  tableSize: number;
  services: ServiceStatus[];
}

/** One entry of the connection table (ipvsadm -Lc). */
export interface ConnectionStatus {
  /** 'TCP', 'UDP', 'SCTP'. */
  protocol: string;
  client: string;
  virtual: string;
  realServer: string;
  /** The protocol's state name; a persistence template's is ASSURED or NONE. */
  state: string;
  /** Seconds. */
  expiresIn: number;
  inactive: boolean;
  /** Another node's flow learnt from Redis, not adopted here (yet): no packet of it seen here. */
  shadow: boolean;
}

/** GET /v1/connections?limit&offset: a page of the table and its size. */
export interface ConnectionsResponse {
  total: number;
  offset: number;
  connections: ConnectionStatus[];
}

/** A dataplane worker (GET /v1/stats `workers`, uvsadm -L --workers). */
export interface WorkerStatus {
  id: number;
  ready: boolean;
  restarts: number;
  threadId: number | null;
  /** The I/O path it runs on; null before it has said. */
  io: IoPath | null;
  rxPackets: number;
  txPackets: number;
  batches: number;
}

/** GET /v1/defense (uvsadm -L --defense): levels, trigger, what they did, new flows refused. */
export interface DefenseResponse extends DefenseView {
  refused: { dropPacket: number; halfOpenPerSource: number; tableFull: number; fullnatPortsExhausted: number };
  /** SYN proxy (lb/synproxy.ts) since start: cookies sent, valid cookie ACKs, bad ones, client packets held and refused, servers that refused our SYN. */
  synProxyCounts: { cookies: number; accepted: number; badCookies: number; held: number; heldRefused: number; serverFailures: number };
}

/** GET /v1/stats */
export interface StatsResponse {
  /** Seconds since uvsd started. */
  uptime: number;
  /**
   * Bytes (process.memoryUsage): rss of the whole process; the V8 heap figures are the control
   * thread's, heapAfterFullGc what it retained at its last full collection (control/memory.ts).
   */
  memory: MemoryView;
  table: { entries: number; capacity: number; expired: number };
  packets: PacketCounters;
  /** Packets dropped, by reason (conntrack/layout.ts DROP_NAMES). */
  drops: Record<string, number>;
  /** Generated packets by kind and result: { reset: { sent, bad_destination, rate_limited }, … }. */
  generated: Record<string, Record<string, number>>;
  chains: { max: number; long: number };
  workers: WorkerStatus[];
  /**
   * How the device picks each packet's queue (dataplane.steering, docs/steering.md): ebpf (uvs's
   * program) or automq (the device's flow table); reason: why not ebpf under auto, else null.
   */
  steering: { path: SteeringPath; reason: string | null };
  /**
   * The node around the device (docs/node-resources.md): how masq replies reach it (nftables: uvs's
   * table, one rule; rules: no nftables, one policy rule per real server, with the reason) and
   * what the periodic check restored after another tool removed it.
   */
  node: {
    replies: { path: 'nftables' | 'rules'; reason: string | null };
    repairs: { nftables: number; rules: number; routes: number };
  };
  nodestExpired: number;
  shadows: number;
  adopted: number;
  proxyProtocolHeaders: number;
  /** PROXY protocol: client SYNs sent to the server without their data (TCP Fast Open: it would precede the header). */
  proxyProtocolSynData: number;
  /** Connections started by a packet other than a SYN / INIT (sloppy_tcp, sloppy_sctp: docs/sloppy.md). */
  sloppyConnections: number;
  parked: number;
  parkFull: number;
  /** SYN proxy: client packets held while their server's handshake was pending (consumed when held; replayed as txExtra). */
  synProxyHeld: number;
  syncRingFull: number;
  /** null without redis. */
  /** nodes: other live nodes; heldNodes: nodes no longer reporting, counted from their last report (docs/redis.md). */
  redis: (SyncStats & { nodes: string[]; heldNodes: string[] }) | null;
  draining: number;
  /** lastSeconds: the last accepted change (reload, edit, batch), from its turn to its answer. */
  reloads: { ok: number; failed: number; lastError: string | null; lastSeconds: number };
  stateFileSkipped: number;
  defense: DefenseResponse;
  announce: AnnounceStatus;
  /**
   * The TCP listeners (api.listen, metrics, healthz): one whose port another process holds is
   * not listening, names the holder and is tried again every 2 s (docs/control-plane.md).
   */
  listeners: ListenerStatus[];
  /**
   * The control thread's responsiveness (control/slices.ts): event-loop delay (longest since the
   * start, in the open one-second window, and in each of the last 60) and the sliced jobs by kind
   * (apply, publish, capture): how many, how many slices, the longest slice.
   */
  controlThread: ControlThreadView;
}

/** A real server being drained (GET /v1/drains, uvsadm -L --drain). */
export interface DrainStatus {
  service: string;
  realServer: string;
  /** ISO time. */
  since: string;
  /** Seconds. */
  drainingFor: number;
  /** ISO time; null = until the last connection ends. */
  deadline: string | null;
  activeConns: number;
  inactConns: number;
}

/** GET /v1/drains */
export interface DrainsResponse {
  /** Seconds between drain checks. */
  checkInterval: number;
  draining: DrainStatus[];
}

/** GET /v1/health: one verdict per checked real server. */
export interface HealthResponse {
  checks: HealthState[];
}

/**
 * GET /healthz and /livez (kube-proxy's shape), on the admin API's unix socket and on the healthz
 * listener: 200 while every worker runs, 503 otherwise. Only the answer on the root-only socket
 * proves that uvsd gave it (docs/failover.md, "The track script").
 */
export interface HealthzResponse {
  lastUpdated: string;
  currentTime: string;
  healthy: boolean;
  workers: { id: number; up: boolean; restarts: number }[];
}

/** GET /v1/timeouts (ipvsadm -L --timeout), seconds. */
export interface TimeoutsResponse {
  tcp: number;
  tcpFin: number;
  udp: number;
  /** Per SCTP state (ipvsadm --timeout prints only the first three). */
  sctp: Record<string, number>;
}

/** POST /v1/services/:protocol/:address/:port/preview */
export type PreviewResponse = DisruptionPreview;

/** GET /v1/config: the running document and the configuration it gave, secrets redacted. */
export interface ConfigResponse {
  file: string;
  document: unknown;
  effective: UvsConfig;
}

/** A change applied (POST /v1/batch, the service and real-server routes, PUT /v1/timeouts, POST /v1/reload). */
export interface AppliedResponse {
  ok: true;
  /** The snapshot version now running. */
  version: number;
}

/** POST /v1/zero (ipvsadm -Z): services whose counters start again from zero. */
export interface ZeroResponse {
  ok: true;
  zeroed: number;
}

/** GET and PUT /v1/maintenance. */
export type MaintenanceResponse = AnnounceStatus;

/** POST /v1/workers/:id/kill (202). */
export interface KillWorkerResponse {
  ok: true;
  worker: number;
}
