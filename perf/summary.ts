/**
 * A figure over rounds: median with min–max. Its own module so that the report and the failure
 * runs, which the report renders, both use it without importing each other.
 */
export interface Summary {
  median: number;
  min: number;
  max: number;
  n: number;
  values: number[];
}

export function summarize(values: number[]): Summary | null {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = v.length >> 1;
  const median = v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
  return { median, min: v[0]!, max: v[v.length - 1]!, n: v.length, values };
}
