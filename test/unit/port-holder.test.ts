/**
 * control/port-holder.ts names who holds a TCP port, from /proc: a listener of this very process
 * on an IPv4 address, an IPv6 address and a wildcard is found with its pid and uid, and a port
 * nobody listens on names no one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { describeHolders, listeners, portHolders } from '../../control/port-holder';

function listen(host: string, port = 0): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, host, () => resolve(s));
  });
}
const portOf = (s: Server) => (s.address() as { port: number }).port;
const close = (s: Server) => new Promise<void>((r) => s.close(() => r()));

for (const [host, shown] of [
  ['127.0.0.1', '127.0.0.1'],
  ['::1', '[::1]'],
] as const) {
  test(`a listener on ${host} is found with this process's pid and uid`, async (t) => {
    let s: Server;
    try {
      s = await listen(host);
    } catch {
      return t.skip(`no ${host} here`);
    }
    const port = portOf(s);
    const hs = portHolders(host, port);
    await close(s);
    assert.equal(hs.length, 1);
    assert.equal(hs[0]!.local, `${shown}:${port}`);
    assert.equal(hs[0]!.uid, process.getuid!());
    assert.deepEqual(
      hs[0]!.processes.map((p) => p.pid),
      [process.pid],
    );
  });
}

test('a wildcard listener holds every address of its port; describeHolders names it once', async () => {
  const s = await listen('0.0.0.0');
  const port = portOf(s);
  const first = describeHolders('127.0.0.1', port);
  const again = describeHolders('127.0.0.1', port, first.inode);
  await close(s);
  assert.match(first.text, new RegExp(`^pid ${process.pid} \\(.*\\), uid ${process.getuid!()}\\b.*listening on 0\\.0\\.0\\.0:${port}$`));
  assert.equal(first.same, false);
  assert.equal(again.same, true, 'the same holder: no /proc walk, nothing new to say');
  assert.deepEqual(listeners('127.0.0.1', port), [], 'gone once closed');
});
