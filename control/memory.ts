/**
 * uvsd's memory as the API and the metrics report it. `process.memoryUsage()` gives the process's
 * RSS and the control thread's V8 heap as it is at that moment — garbage included, so under churn
 * (a Redis outage's lookups and retries) heap used and RSS swing with V8's collection schedule.
 * What the control thread really retains is the heap right after a full (mark-compact) collection:
 * a `gc` performance observer reads it after each one (the callback runs a little later, so it
 * includes what was allocated meanwhile — an upper bound).
 */
import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';

export interface MemoryView {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  /** Control-thread heap used just after its last full collection (bytes); null before the first. */
  heapAfterFullGc: number | null;
}

let afterFullGc: number | null = null;
let observer: PerformanceObserver | null = null;

/** Starts reading the heap after each full collection (idempotent). */
export function watchFullGcs(): void {
  if (observer) return;
  observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if ((e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
        afterFullGc = getHeapStatistics().used_heap_size;
      }
    }
  });
  observer.observe({ entryTypes: ['gc'] });
}

export function stopWatchingGcs(): void {
  observer?.disconnect();
  observer = null;
}

export function memoryView(): MemoryView {
  const m = process.memoryUsage();
  return {
    rss: m.rss,
    heapUsed: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    heapAfterFullGc: afterFullGc,
  };
}
