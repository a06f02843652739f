/**
 * IPv6 keys in the connection table: entries made by the packet path are found again by the
 * sweeper (insert and remove hash the same 128-bit key), and a synced record for the same client
 * key but another real server is not taken as a refresh of the shadow entry (as for IPv4, where
 * the real server is part of what a refresh must match).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { newFlow } from '../../conntrack/flow';
import { udp6 } from '../helpers/packets';
import { setup6, VIP6 } from '../helpers/processor';

test('IPv6 entries are removed by the sweeper (keys hash the same at insert and remove)', () => {
  const { run, table } = setup6('fullnat', 'udp', false, { persistence: 60, netmask: 64 });
  for (let i = 0; i < 50; i++) run(udp6({ src: `2001:db8:${i}::${i + 1}`, dst: VIP6, sport: 5000 + i, dport: 80 }));
  assert.equal(table.count(), 100);
  const now = table.now();
  table.expire(now + 400_000);
  table.expire(now + 400_000 + 61_000);
  assert.equal(table.count(), 0);
});

test('putShadow: an IPv6 record for the same client key but another real server is not taken as a refresh', async () => {
  const { ConnTable, createRealServerRegion } = await import('../../conntrack/table');
  const { parseIPv6 } = await import('../../net/addr');
  const t = new ConnTable(
    ConnTable.create(64, { tcp: [0, 900, 120, 60, 120, 60, 10, 60, 60, 120, 10], udp: 300 }),
    createRealServerRegion(8),
    L.OWNER_CONTROL,
  );
  const c = parseIPv6('2001:db8::5')!,
    v = parseIPv6('fd00:96::10')!;
  const r1 = parseIPv6('fd00:10::1')!,
    r2 = parseIPv6('fd00:20::1')!; // same last 32 bits
  const hi = (r: Int32Array) => [c[0]!, c[1]!, c[2]!, v[0]!, v[1]!, v[2]!, r[0]!, r[1]!, r[2]!, c[0]!, c[1]!, c[2]!];
  const proto = 6 | L.PROTO_V6;
  const cports = (40000 << 16) | 80,
    dports = (8080 << 16) | 40000;
  const now = t.now();
  const e1 = t.putShadow(
    newFlow({
      proto,
      caddr: c[3]!,
      cports,
      vaddr: v[3]!,
      daddr: r1[3]!,
      dports,
      laddr: c[3]!,
      rs: 1,
      state: 3,
      expires: now + 10_000,
      hi: hi(r1),
    }),
  );
  assert.ok(e1 >= 0);
  const e2 = t.putShadow(
    newFlow({
      proto,
      caddr: c[3]!,
      cports,
      vaddr: v[3]!,
      daddr: r2[3]!,
      dports,
      laddr: c[3]!,
      rs: 2,
      state: 3,
      expires: now + 900_000,
      hi: hi(r2),
    }),
  );
  // IPv4 semantics: a different server for the key → -1, the old shadow keeps its own timer.
  assert.equal(e2, -1, 'a record naming fd00:20::1 refreshed the shadow that points at fd00:10::1');
});
