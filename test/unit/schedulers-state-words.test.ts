/**
 * The scheduler region holds one slot of SCHED_WORDS per service, word 0 its lock
 * (conntrack/layout.ts): a scheduler reads and writes only its own words, base … slot end. Every
 * scheduler runs the same random scenario twice — in a SchedModel (base = 1, alone) and in the
 * middle slot of a three-slot region (the slot before marked, its own lock word held, the slot
 * after zeros or marked) — and must make the same decisions and leave every other word as it was.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from '../../conntrack/layout';
import { SchedModel } from '../../control/sched-model';
import { fold, parseInet } from '../../net/addr';
import { schedulerNames } from '../../schedulers/registry';
import type { SchedInput } from '../../schedulers/types';
import { rngBelow } from '../helpers/rng';

const MARK = 0x5a5a5a5a;
const ADDRS = ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.5'];
/** More destination addresses than lblc's 12 cache entries, so its cache fills and replaces. */
const VIPS = Array.from({ length: 14 }, (_, i) => fold(parseInet(`10.96.0.${10 + i}`)!));

const rng = rngBelow;

/**
 * Slot 0 marked; slot 1 ours, its lock word held (an owner id); slot 2 the neighbour after, its
 * words all `after`: 0 (a fresh slot) or marked (a busy one), so a word past the scheduler's own
 * looks free in one and used in the other.
 */
function scenario(name: string, after: number): void {
  const m = new SchedModel(name, 0);
  const s = m.scheduler;
  const region = new Int32Array(3 * L.SCHED_WORDS).fill(MARK, 0, L.SCHED_WORDS + L.SCHED_STATE);
  region.fill(after, 2 * L.SCHED_WORDS);
  const base = L.SCHED_WORDS + L.SCHED_STATE;
  const others = region.slice();
  s.init?.(m.svc, region, base);
  s.seed?.(m.state, m.base, 1);
  s.seed?.(region, base, 1);
  /** One list change in both: the model runs prepare and its hook; the same hook on the region. */
  const change = (kind: 'add' | 'del' | 'upd', key: string, apply: () => void) => {
    const before = m.svc.dests.slice();
    apply();
    const rs = m.servers.get(key)!.rs;
    s.update?.(m.svc, region, base, { kind, rs, position: kind === 'add' ? -1 : before.findIndex((d) => d.rs === rs), before });
  };
  for (let seed = 1; seed <= 3; seed++) {
    const r = rng(seed);
    let now = 0;
    for (let step = 0; step < 300; step++) {
      const listed = m.listed();
      const op = r(12);
      if (op === 0 || listed.length === 0) {
        const free = ADDRS.filter((a) => !listed.some((x) => x.key === `${a}:80`));
        if (free.length === 0) continue;
        const a = free[r(free.length)]!;
        change('add', `${a}:80`, () => m.add(parseInet(a)!, 80, 1 + r(4)));
      } else if (op === 1 && listed.length > 1) {
        const x = listed[r(listed.length)]!;
        change('del', x.key, () => m.del(x));
      } else if (op === 2) {
        const x = listed[r(listed.length)]!;
        change('upd', x.key, () => m.edit(x, r(5), 0, 0));
      } else if (op === 3) {
        const x = listed[r(listed.length)]!;
        const o = x.rs * L.RS_WORDS;
        m.rs[o + L.RS_ACTIVE] = r(4);
        m.rs[o + L.RS_INACTIVE] = r(40);
        if (r(3) === 0) m.rs[o + L.RS_FLAGS]! ^= L.RSF_OVERLOAD; // no hook: the cursor schedulers meet it mid-walk
      } else if (op === 4 && s.tick) {
        for (let runs = 1 + r(2000); runs > 0; runs--) {
          now = (now + s.tickInterval!) | 0;
          s.tick(m.svc, m.state, m.base, m.rs, now);
          s.tick(m.svc, region, base, m.rs, now);
        }
      } else {
        now = (now + r(1000)) | 0;
        const input: SchedInput = { caddr: r(0xffffffff) | 0, cport: r(65536), vaddr: VIPS[r(VIPS.length)]!, vport: 80, now };
        const want = m.schedule(input)?.key ?? null;
        const i = s.schedule(m.svc, region, base, m.rs, input);
        assert.equal(i < 0 ? null : m.server(m.svc.dests[i]!.rs).key, want, `${name} (slot after: ${after}) seed ${seed} step ${step}`);
      }
    }
  }
  for (let w = 0; w < region.length; w++)
    if (w < base || w >= 2 * L.SCHED_WORDS) assert.equal(region[w], others[w], `${name}: word ${w} of the region`);
}

for (const name of schedulerNames()) {
  test(`${name} uses only its own state words`, () => {
    scenario(name, 0);
    scenario(name, MARK);
  });
}
