/** Hammer a shared connection table from a worker thread (test/unit/table.test.ts). */
import { parentPort, workerData } from 'node:worker_threads';
import { ConnTable } from '../../conntrack/table';
import { DIR_INPUT, DIR_OUTPUT, TCPF_ACK, TCPF_SYN, TCPF_FIN } from '../../conntrack/state';
import { newFlow } from '../../conntrack/flow';
import { mulberry32 } from './rng';

const { table, rs, id, ops, keys, seed } = workerData as {
  table: SharedArrayBuffer;
  rs: SharedArrayBuffer;
  id: number;
  ops: number;
  keys: number;
  seed: number;
};
const t = new ConnTable(table, rs, id + 1);
const next = mulberry32(seed);
let inserted = 0;
let removed = 0;
let full = 0;
const now = t.now();
for (let i = 0; i < ops; i++) {
  const k = next() % keys;
  const caddr = 0x0a000000 | k;
  const cports = ((1024 + (k % 50000)) << 16) | 80;
  const vaddr = 0x0a600001;
  const rsSlot = k % 4;
  const daddr = 0x0a0b0000 | rsSlot;
  const dports = (8080 << 16) | (cports >>> 16);
  const op = next() % 10;
  if (op < 5) {
    const e = t.insert(newFlow({ proto: 6, caddr, cports, vaddr, daddr, dports, laddr: caddr, rs: rsSlot, now }));
    if (e < 0) full++;
    else {
      inserted++;
      const b = t.bucket(6, caddr, cports, vaddr);
      t.lockBucket(b);
      const f = t.findIn(b, 6, caddr, cports, vaddr);
      if (f >= 0) t.touch(f, DIR_INPUT, TCPF_SYN, now);
      t.unlockBucket(b);
    }
  } else if (op < 8) {
    const b = t.bucket(6, daddr, dports, caddr);
    t.lockBucket(b);
    const f = t.findOut(b, 6, daddr, dports, caddr);
    if (f >= 0) t.touch(f, DIR_OUTPUT, op === 7 ? TCPF_FIN | TCPF_ACK : TCPF_ACK, now);
    t.unlockBucket(b);
  } else {
    const b = t.bucket(6, caddr, cports, vaddr);
    t.lockBucket(b);
    const f = t.findIn(b, 6, caddr, cports, vaddr);
    t.unlockBucket(b);
    if (f >= 0 && t.remove(f, false, now)) removed++;
  }
}
parentPort!.postMessage({ inserted, removed, full });
