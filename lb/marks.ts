/**
 * The node's packet marks as uvs uses them: one mask (`dataplane.markMask`), its bits handed out
 * lowest first, each with one meaning. uvs sets and tests only these bits (`meta mark set meta
 * mark or BIT`, `fwmark BIT/BIT`), so a mark another system put on the same packet survives and
 * other systems' rules that test their own bits are not disturbed.
 *
 *   bit 0 of the mask  INTO_DEVICE  the packet is routed into uvs's device (rule
 *                                   `fwmark BIT/BIT lookup <routeTable>`): masq replies and their
 *                                   ICMP (set by uvs's nftables table), packets replayed after a
 *                                   Redis lookup (SO_MARK of the replay socket)
 *   bit 1, bit 2       reserved     VIPs bound on the node and fwmark services (issues 35, 39)
 *
 * The default mask 0x1082 (bits 1, 7, 12) avoids every bit the common neighbours use:
 * kube-proxy 0x4000/0x8000, Calico 0xffff0000, Cilium 0x0f00 and 0xffff0000, Weave
 * 0x20000/0x40000, Tailscale 0xff0000, Istio 0x539 (bits 0 3 4 5 8 10) and wg-quick's 51820
 * (0xca6c: bits 2 3 5 6 9 10 11 14 15) — a single shared bit would route their packets into the
 * device. docs/node-resources.md lists the rule priorities and the nftables table beside it.
 */

/** The bits of a mask, lowest first. */
export function maskBits(mask: number): number[] {
  const out: number[] = [];
  for (let b = 0; b < 32; b++) {
    const bit = 2 ** b;
    if (Math.floor(mask / bit) % 2 === 1) out.push(bit);
  }
  return out;
}

/** The bit that routes a packet into the device: the mask's lowest. */
export function intoDeviceBit(mask: number): number {
  const b = maskBits(mask)[0];
  if (b === undefined) throw new RangeError('dataplane.markMask has no bit set');
  return b;
}

/** 0x… text of a mark, as ip and nft take it. */
export function hexMark(v: number): string {
  return `0x${v.toString(16)}`;
}
