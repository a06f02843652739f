#!/usr/bin/env node
/**
 * uvs — tools around the daemon: the namespace lab, the scheduler simulator.
 * Each subcommand loads only what it needs (simulate must start fast: no daemon, no fastify).
 */
const HELP = `Usage: uvs <command> [args]

Commands:
  lab up [--prefix P]      build the namespace lab (client, LB node, three real servers)
  lab down [--prefix P]    remove it (every process and namespace with the prefix)
  lab status [--prefix P]  list the lab's namespaces
  simulate                 read a scenario (JSON) on stdin, print one JSON line per connect
  decap --vips VIP[,VIP] --directors ADDR[,ADDR]
                           real-server side of tunnel forwarding (IPIP, ip6ip6) without a kernel
                           driver, from those directors only (decap --help)
  perf [--quick] [...]     benchmark uvs against direct, a C TUN forwarder, nftables, HAProxy, nginx (perf --help)
  help                     this text`;

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === 'lab') {
    const { labCommand } = await import('../lab/cli');
    return labCommand(rest);
  }
  if (cmd === 'perf') {
    const { perfCommand } = await import('../perf/run');
    return perfCommand(rest);
  }
  if (cmd === 'decap') {
    const { decapCommand } = await import('../lb/decap');
    return decapCommand(rest);
  }
  if (cmd === 'simulate') {
    const { simulateCommand } = await import('./simulate');
    return simulateCommand(rest);
  }
  if (cmd === undefined || cmd === 'help' || cmd === '-h' || cmd === '--help') {
    console.log(HELP);
    return cmd === undefined ? 2 : 0;
  }
  console.error(`uvs: unknown command ${cmd}\n\n${HELP}`);
  return 2;
}

main(process.argv.slice(2)).then((c) => process.exit(c));
