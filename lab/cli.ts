/** `uvs lab up|down|status` */
import { Lab } from './lab';

export async function labCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  let prefix = 'uvslab';
  for (let i = 0; i < rest.length; i++) if (rest[i] === '--prefix') prefix = rest[++i] ?? prefix;
  const lab = new Lab({ prefix });
  if (sub === 'up') {
    lab.up();
    await lab.waitServers();
    console.log(
      `lab ${prefix} up: client ${lab.clientNs} (${lab.clientAddr}), LB node ${lab.lbNs}, real servers ${lab.rsNs.map((n, i) => `${n} (${lab.rsAddrs[i]})`).join(', ')}`,
    );
    console.log(`VIP range 10.200.0.0/24 routes from the client to the LB node; start uvsd there with:`);
    console.log(`  ip netns exec ${lab.lbNs} uvsd --config uvs.example.yaml`);
    return 0;
  }
  if (sub === 'down') {
    lab.down();
    console.log(`lab ${prefix} removed`);
    return 0;
  }
  if (sub === 'status') {
    const ns = Lab.existing(prefix);
    console.log(ns.length ? ns.join('\n') : `no lab ${prefix}`);
    return 0;
  }
  console.error('usage: uvs lab up|down|status [--prefix P]');
  return 2;
}
