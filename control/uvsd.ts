#!/usr/bin/env node
/**
 * uvsd — the uvs daemon. One per load-balancer node.
 */
import type { Logger } from 'pino';
import { startApi } from './api';
import { DEFAULT_MARK_MASK, loadConfigFile } from './config';
import { Daemon, type Serve } from './daemon';
import type { UvsError } from './errors';
import { listenOrWait } from './listen';
import { makeLogger } from './log';
import { startHealthz, startMetrics } from './metrics';
import { cleanupRouting } from '../lb/dataplane';

const HELP = `Usage: uvsd --config FILE [-v] [--pretty]
       uvsd --cleanup [--config FILE]

Runs the uvs load balancer: creates the TUN device (dataplane.device, one queue per worker),
routes the VIP ranges to it, sends masq replies into it (its nftables table inet uvs_<device>
and one rule: docs/node-resources.md) and serves the admin API on a root-only unix socket
(api.socket).

  --config FILE   YAML configuration (see uvs.example.yaml)
  --cleanup       remove the device, routes, rules and nftables table a uvsd with this
                  configuration created
                  (defaults used if no --config), then exit
  -v              debug logging (overrides log.level)
  --pretty        human-readable log lines instead of JSON
  -h, --help      this text

Signals: SIGHUP reloads the configuration (a bad file is rejected, the running one stays);
SIGINT/SIGTERM stop and remove everything uvsd created.`;

/** The daemon's listeners: the admin API (its unix socket, and api.listen), then metrics and healthz when configured. */
function listeners(log: Logger): Serve {
  return async (d, keep) => {
    const cfg = d.cfg;
    keep(await startApi(d, cfg.api.socket, log.child({ component: 'api' }), cfg.api));
    // A port another process holds does not stop uvsd: listenOrWait logs the holder and retries.
    const http = log.child({ component: 'listen' });
    const { address: m, token: mt } = cfg.metrics;
    if (m) keep(await listenOrWait('metrics', m, () => startMetrics(d, m, mt), http));
    const { address: h, token: ht } = cfg.healthz;
    if (h) keep(await listenOrWait('healthz', h, () => startHealthz(d, h, ht), http));
  };
}

async function main(argv: string[]): Promise<number> {
  let config: string | undefined;
  let cleanup = false;
  let verbose = false;
  let pretty = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--config' || a === '-c') config = argv[++i];
    else if (a.startsWith('--config=')) config = a.slice(9);
    else if (a === '--cleanup') cleanup = true;
    else if (a === '-v' || a === '--verbose') verbose = true;
    else if (a === '--pretty') pretty = true;
    else if (a === '-h' || a === '--help') {
      console.log(HELP);
      return 0;
    } else {
      console.error(`uvsd: unknown argument ${a}\n\n${HELP}`);
      return 2;
    }
  }
  if (cleanup) {
    const dp = config
      ? loadConfigFile(config).dataplane
      : {
          device: 'uvs0',
          routeTable: 4711,
          rulePriority: 4711,
          markMask: DEFAULT_MARK_MASK,
          vipCidrs: [] as string[],
          fullnat: { addresses: [] as string[] },
        };
    cleanupRouting({ ...dp, fullnatAddrs: dp.fullnat.addresses });
    console.log(
      `uvsd: removed ${dp.device}, its routes and rules (table ${dp.routeTable}, rule priority ${dp.rulePriority}) and its nftables table`,
    );
    return 0;
  }
  if (!config) {
    console.error(`uvsd: --config is required\n\n${HELP}`);
    return 2;
  }
  let cfgLevel: string;
  let cfgPretty: boolean;
  try {
    const c = loadConfigFile(config);
    cfgLevel = c.log.level;
    cfgPretty = c.log.pretty;
  } catch (e) {
    const err = e as UvsError;
    console.error(`uvsd: ${err.code ?? 'error'}: ${err.message}`);
    return 2;
  }
  const log = makeLogger(verbose ? 'debug' : cfgLevel, pretty || cfgPretty);
  let daemon: Daemon;
  try {
    daemon = await Daemon.start(config, log, listeners(log));
  } catch (e) {
    const err = e as UvsError;
    log.fatal({ code: err.code, err: err.message }, 'uvsd failed to start');
    return 1;
  }
  process.on('uncaughtException', (err) => log.error({ err: err.message, stack: err.stack }, 'uncaught exception (daemon keeps running)'));
  process.on('unhandledRejection', (err) => log.error({ err: String(err) }, 'unhandled rejection (daemon keeps running)'));
  process.on('SIGHUP', () => {
    log.info('SIGHUP: reloading configuration');
    daemon.reload();
  });
  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      log.info({ signal: sig }, 'stopping');
      resolve();
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  await daemon.stop();
  log.info('uvsd stopped');
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    console.error(`uvsd: ${(e as Error).stack ?? e}`);
    process.exit(1);
  },
);
