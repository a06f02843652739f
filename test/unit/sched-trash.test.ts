/**
 * A deleted real server that lblc's cache entry or lblcr's set still names stays in the trash, as
 * in the kernel (ip_vs_lblc.c ip_vs_lblc_new and ip_vs_lblcr.c ip_vs_dest_set_insert hold the dest;
 * ip_vs_ctl.c ip_vs_dest_trash_expire frees only an unreferenced one): its slot is not given to
 * another server, re-adding it revives the same slot, and the slot is freed once the scheduler
 * lets it go. The service model and the scheduler code together, as the daemon runs them: UDP
 * services (a server is deleted at once), servers added in configuration order (the list is the
 * reverse).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { createRealServerRegion } from '../../conntrack/table';
import { validateConfig } from '../../control/config';
import { ServiceModel } from '../../control/services';
import { lblcrSet } from '../../schedulers/lblcr';
import { getScheduler } from '../../schedulers/registry';
import { input } from '../helpers/sched';

const VIP = '10.96.0.10';
const A = '10.0.0.1';
const B = '10.0.0.2';
const C = '10.0.0.3';
const KEY = `udp ${VIP}:80`;
const DAY = 86_400_000;

function lab(scheduler: 'lblc' | 'lblcr') {
  const rsSab = createRealServerRegion(16);
  const m = new ServiceModel(rsSab, new SharedArrayBuffer(4 * L.SCHED_WORDS * 4), 16, 4);
  const rs = new Int32Array(rsSab);
  const sched = getScheduler(scheduler)!;
  const apply = (servers: string[]) =>
    m.apply(
      validateConfig({
        dataplane: { vipCidrs: ['10.96.0.0/24'], maxRealServers: 16, maxServices: 4 },
        services:
          servers.length === 0
            ? []
            : [
                {
                  protocol: 'udp',
                  address: VIP,
                  port: 80,
                  scheduler,
                  realServers: servers.map((address) => ({ address, port: 8080, weight: 1 })),
                },
              ],
      }),
    );
  let snap = apply([]);
  const slotOf = (addr: string) => m.realServerSlot(KEY, `${addr}:8080`)!.slot;
  const base = () => m.list()[0]!.slot * L.SCHED_WORDS + L.SCHED_STATE;
  return {
    m,
    config(servers: string[]) {
      snap = apply(servers);
    },
    slotOf,
    setActive(addr: string, n: number) {
      rs[slotOf(addr) * L.RS_WORDS + L.RS_ACTIVE] = n;
    },
    /** One new flow at `now` ms, scheduled on the last snapshot: the chosen server's address. */
    pick(now: number): string | null {
      const svc = snap.services[0]!;
      const i = sched.schedule(svc, m.sched, base(), rs, input('192.168.1.100', 0, now, VIP));
      return i < 0 ? null : m.namesOfSlot(svc.dests[i]!.rs)!.realServer.replace(/:8080$/, '');
    },
    /** lblcr's set as addresses, newest member first (deleted members included). */
    set(): string[] {
      return lblcrSet(m.sched, base(), input('192.168.1.100', 0, 0, VIP).vaddr).map((slot) =>
        m.namesOfSlot(slot)!.realServer.replace(/:8080$/, ''),
      );
    },
    trash: () => m.trash().map((i) => i.addr),
  };
}

test('lblcr: a deleted member stays in the trash, and the server added next gets another slot, not its set membership', () => {
  const l = lab('lblcr');
  l.config([A, B]); // list B, A
  assert.equal(l.pick(0), B);
  assert.deepEqual(l.set(), [B]);
  const slotB = l.slotOf(B);
  l.config([A]); // -d B: no connections, deleted at once
  const freed = l.m.collectTrash();
  l.config([A, C]);
  l.setActive(C, 1); // C would be used were it a member (1 > weight 1 is false: not overloaded)
  // The set's only member is deleted (!AVAILABLE): set_min finds none, wlc picks A (C is busier).
  assert.equal(l.pick(1000), A, 'C is not a member of the set');
  assert.deepEqual(l.set(), [A, B]);
  assert.equal(freed, 0, 'the set holds B: it stays in the trash though it has no connections');
  assert.deepEqual(l.trash(), [B]);
  assert.notEqual(l.slotOf(C), slotB, 'C does not take the slot the set names');
});

test('lblcr: a member re-added from the trash is the same slot and a member again', () => {
  const l = lab('lblcr');
  l.config([A, B]);
  assert.equal(l.pick(0), B);
  const slotB = l.slotOf(B);
  l.config([A]);
  l.m.collectTrash();
  l.config([A, C]); // C first: in uvs before this fix it took B's freed slot
  l.config([A, C, B]); // -a B: revived from the trash
  assert.equal(l.slotOf(B), slotB);
  assert.deepEqual(l.trash(), []);
  l.setActive(B, 1);
  l.setActive(C, 1);
  // Kernel: the set [B] has B AVAILABLE again, not overloaded in lblc's sense: B, though wlc would pick A.
  assert.equal(l.pick(1000), B);
  assert.deepEqual(l.set(), [B]);
});

test('lblcr: the trashed member is freed once the entry expires, or at once when its service is deleted', () => {
  const l = lab('lblcr');
  l.config([A, B]);
  assert.equal(l.pick(0), B);
  l.config([A]);
  l.m.tick(DAY - 60_000); // collector runs up to 23 h 59 min: the entry (last used at 0) is kept
  assert.equal(l.m.collectTrash(), 0);
  l.m.tick(DAY + 30 * 60_000); // the next full check (every 30th run) drops it
  assert.deepEqual(l.set(), []);
  assert.equal(l.m.collectTrash(), 1);
  assert.deepEqual(l.trash(), []);

  const d = lab('lblcr');
  d.config([A, B]);
  assert.equal(d.pick(0), B);
  d.config([A]);
  assert.equal(d.m.collectTrash(), 0);
  d.config([]); // ip_vs_del_service: done_service flushes the sets
  assert.equal(d.m.collectTrash(), 2);
});

test('lblc: a cached server deleted, then re-added after another server, is the same slot and a cache hit', () => {
  const l = lab('lblc');
  l.config([A, B]);
  assert.equal(l.pick(0), B);
  const slotB = l.slotOf(B);
  l.config([A]);
  const freed = l.m.collectTrash();
  l.config([A, C]);
  l.config([A, C, B]);
  l.setActive(B, 1); // not overloaded: a hit uses it; a miss would choose C
  assert.equal(l.pick(1000), B, 'the cache entry still names B');
  assert.equal(freed, 0, 'the cache entry holds B');
  assert.equal(l.slotOf(B), slotB, 'revived from the trash');
});

test('lblc: the trashed server is freed once a new flow replaces the entry', () => {
  const l = lab('lblc');
  l.config([A, B]);
  assert.equal(l.pick(0), B);
  l.config([A]);
  assert.equal(l.m.collectTrash(), 0);
  assert.equal(l.pick(1000), A, 'the cached server is deleted: wlc, and the entry now names A');
  assert.equal(l.m.collectTrash(), 1);
  assert.deepEqual(l.trash(), []);
});
