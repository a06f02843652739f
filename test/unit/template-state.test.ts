/**
 * Persistence templates list as the kernel lists them in /proc/net/ip_vs_conn (ipvsadm -Lnc):
 * NONE until a connection they control is ESTABLISHED (TCP, SCTP) or a UDP one gets a reply, then
 * ASSURED (include/net/ip_vs.h ip_vs_control_assure_ct; ip_vs_proto.c ip_vs_state_name). The
 * packets go through the real processor and table; the listing is the API's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TCPF_ACK, TCPF_SYN } from '../../conntrack/state';
import { connectionsView } from '../../control/connections';
import { field, tcp, udp } from '../helpers/packets';
import { makeProcessor } from '../helpers/processor';

const VIP = '10.96.0.10';
const CLIENT = '192.168.1.100';

function setup(service: Record<string, unknown>) {
  const p = makeProcessor({ dataplane: { vipCidrs: ['10.96.0.0/24'] }, services: [service] }, { capacity: 64 });
  const table = p.table;
  const run = (pkt: Uint8Array) => p.run(pkt).pkt;
  /** -Lnc's rows as the API gives them: template rows have client port 0. */
  const rows = () => connectionsView({ table }, 100, 0).connections;
  const templateState = () =>
    rows()
      .filter((r) => r.client.endsWith(':0'))
      .map((r) => r.state);
  return { run, rows, templateState };
}

test('a TCP template is NONE until its connection is ESTABLISHED, then ASSURED', () => {
  const { run, rows, templateState } = setup({
    protocol: 'tcp',
    address: VIP,
    port: 80,
    scheduler: 'rr',
    persistence: 300,
    realServers: [{ address: '10.0.0.1', port: 8080 }],
  });
  const syn = run(tcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: TCPF_SYN }));
  assert.deepEqual(templateState(), ['NONE']);
  assert.deepEqual(
    rows()
      .filter((r) => !r.client.endsWith(':0'))
      .map((r) => r.state),
    ['SYN_RECV'],
    'the connection keeps its TCP state name',
  );
  run(tcp({ src: field(syn).dst, dst: CLIENT, sport: 8080, dport: 40000, flags: TCPF_SYN | TCPF_ACK }));
  assert.deepEqual(templateState(), ['NONE'], 'SYN_RECV is not ESTABLISHED');
  run(tcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: TCPF_ACK }));
  assert.deepEqual(templateState(), ['ASSURED']);
  // A second connection through the same template leaves it ASSURED.
  run(tcp({ src: CLIENT, dst: VIP, sport: 40001, dport: 80, flags: TCPF_SYN }));
  assert.deepEqual(templateState(), ['ASSURED']);
});

test('a UDP template is NONE until a reply comes back, then ASSURED (not the protocol name UDP)', () => {
  const { run, templateState } = setup({
    protocol: 'udp',
    address: VIP,
    port: 53,
    scheduler: 'rr',
    persistence: 300,
    realServers: [{ address: '10.0.0.1', port: 5353 }],
  });
  run(udp({ src: CLIENT, dst: VIP, sport: 48000, dport: 53 }));
  run(udp({ src: CLIENT, dst: VIP, sport: 48000, dport: 53 }));
  assert.deepEqual(templateState(), ['NONE'], 'requests alone do not assure it');
  run(udp({ src: '10.0.0.1', dst: CLIENT, sport: 5353, dport: 48000 }));
  assert.deepEqual(templateState(), ['ASSURED']);
});
