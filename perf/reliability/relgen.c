/*
 * relgen: the packet generator of the reliability run (perf/reliability/), compiled with cc at
 * run time. It writes IP packets into one device through an AF_PACKET socket — straight into
 * uvsd's TUN device (no link header: the kernel hands them to uvsd as if routed there, so even
 * packets the kernel's IP input would refuse reach it), or onto a veth with a destination MAC —
 * with sendmmsg(), 32 at a time, paced when a rate is given.
 *
 *   relgen mode=M if=DEV [count=N] [pps=R] [seconds=S] [seed=X] [vip4=A] [vip6=A] [port=P]
 *          [uport=P] [sport=P] [mac=aa:bb:cc:dd:ee:ff] [kind=NAME]
 *
 *   fuzz     malformed and random frames of the kinds in KINDS below: IPv4 and IPv6, every
 *            protocol uvs handles (TCP, UDP, SCTP, ICMP, ICMPv6) and others, bad headers, IPv6
 *            extension chains, fragments, ICMP errors quoting garbage, spoofed special sources,
 *            and packets with a random virtio_net_hdr (PACKET_VNET_HDR: what the kernel lets
 *            through reaches uvsd as offload metadata; what it refuses is counted as refused)
 *   syn4     TCP SYNs to vip4:port from random sources in 198.18.0.0/15 and random ports
 *   syn6     TCP SYNs to [vip6]:port from random sources all over 2001:db8::/32
 *   syn6net  the same from one /64 (2001:db8:1:2::/64, random interface identifiers): the
 *            IPv6 hash-flood pattern
 *   syn6fold the same from one /64 whose interface identifiers' two 32-bit words xor to one
 *            value (fixed by seed=), all from source port sport=: one 32-bit xor fold of the
 *            address and one port, a queue-steering aim
 *   syn4low  syn4 with source ports below port (1 .. port-1): keyed on the VIP's endpoint by a
 *            steering key that takes the endpoint with the higher port
 *   ack4     mid-flow TCP ACKs to vip4:port from random sources (no flow has them: with Redis
 *            sync on, each one is a lookup)
 *
 * Stops after count packets (0 = no limit), after seconds (0 = no limit) or at SIGINT/SIGTERM,
 * and prints one JSON line: {"sent","refused","ms","kinds":{name:count}}. "refused" = sends the
 * kernel rejected (e.g. a virtio header it does not accept, a full device queue: ENOBUFS).
 * Sources are from ranges nothing in the lab uses (198.18.0.0/15, RFC 2544; 2001:db8::/32,
 * RFC 3849) except for the `spoof` kinds, which are about exactly that.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32
#define FRAME 9216

enum {
  K_RANDOM, K_RANDOM4, K_RANDOM6, K_V4_BADSUM, K_V4_BADHDR, K_V4_FRAG, K_V4_TCP, K_V4_UDP, K_V4_SCTP,
  K_V4_ICMP, K_V4_ICMPERR, K_V4_PROTO, K_V4_SPOOF, K_V6_BADHDR, K_V6_EXT, K_V6_TCP, K_V6_UDP,
  K_V6_SCTP, K_V6_ICMP, K_V6_ICMPERR, K_V6_SPOOF, K_VNET, NKINDS
};
static const char *KINDS[NKINDS] = {
  "random", "random4", "random6", "v4_bad_checksum", "v4_bad_header", "v4_fragment", "v4_tcp", "v4_udp", "v4_sctp",
  "v4_icmp", "v4_icmp_error_garbage", "v4_other_protocol", "v4_spoofed_source", "v6_bad_header", "v6_ext_chain", "v6_tcp", "v6_udp",
  "v6_sctp", "v6_icmp", "v6_icmp_error_garbage", "v6_spoofed_source", "bad_virtio_header",
};

static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }

// xorshift64*: fast, seeded, good enough for fuzzing.
static uint64_t rs;
static inline uint64_t rnd(void) {
  rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
  return rs * 0x2545F4914F6CDD1DULL;
}
static inline uint32_t rn(uint32_t n) { return (uint32_t)(((rnd() >> 32) * (uint64_t)n) >> 32); }
static void rbytes(uint8_t *p, int n) {
  while (n >= 8) { uint64_t v = rnd(); memcpy(p, &v, 8); p += 8; n -= 8; }
  if (n > 0) { uint64_t v = rnd(); memcpy(p, &v, (size_t)n); }
}
static inline void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v & 255; }
static inline void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

static uint32_t sum(const uint8_t *p, int n, uint32_t s) {
  for (int i = 0; i + 1 < n; i += 2) s += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (n & 1) s += (uint32_t)p[n - 1] << 8;
  return s;
}
static uint16_t fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return (uint16_t)~s;
}

static uint32_t crc32c_table[256];
static void crc32c_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78 : c >> 1;
    crc32c_table[i] = c;
  }
}
static uint32_t crc32c(const uint8_t *p, int n) {
  uint32_t c = 0xffffffff;
  for (int i = 0; i < n; i++) c = crc32c_table[(c ^ p[i]) & 255] ^ (c >> 8);
  return ~c;
}

// ── options ─────────────────────────────────────────────────────────────────────────────────
static const char *mode = "fuzz", *ifname = "uvs0";
static uint64_t count, pps;
static double seconds;
static uint8_t vip4[4] = {10, 200, 0, 10}, vip6[16];
static int port = 80, uport = 5353, sport = 5000;
static uint8_t mac[6];
static int has_mac;
static int only_kind = -1; // kind=NAME: fuzz with that kind alone (to find which kind does what)

// ── headers ─────────────────────────────────────────────────────────────────────────────────
static void src4_random(uint8_t *a) { uint32_t x = 0xC6120000u | rn(1u << 17); put32(a, x); } // 198.18.0.0/15
static void src6_random(uint8_t *a) { a[0] = 0x20; a[1] = 0x01; a[2] = 0x0d; a[3] = 0xb8; rbytes(a + 4, 12); }
static void src6_net(uint8_t *a) {
  static const uint8_t p[8] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2};
  memcpy(a, p, 8);
  rbytes(a + 8, 8);
}
static uint32_t fold6; // syn6fold: the xor of every source's two interface-identifier words
static void src6_fold(uint8_t *a) {
  src6_net(a);
  uint32_t w2 = (uint32_t)rnd();
  put32(a + 8, w2);
  put32(a + 12, w2 ^ fold6);
}

/** IPv4 header (20 bytes, checksum set) for an L4 payload of l4 bytes; returns 20. */
static int ip4(uint8_t *b, int proto, const uint8_t *src, const uint8_t *dst, int l4) {
  b[0] = 0x45; b[1] = 0; put16(b + 2, (uint16_t)(20 + l4)); put16(b + 4, (uint16_t)rnd());
  put16(b + 6, 0x4000); b[8] = 64; b[9] = (uint8_t)proto; put16(b + 10, 0);
  memcpy(b + 12, src, 4); memcpy(b + 16, dst, 4);
  put16(b + 10, fold(sum(b, 20, 0)));
  return 20;
}
static int ip6(uint8_t *b, int next, const uint8_t *src, const uint8_t *dst, int plen) {
  put32(b, 0x60000000u); put16(b + 4, (uint16_t)plen); b[6] = (uint8_t)next; b[7] = 64;
  memcpy(b + 8, src, 16); memcpy(b + 24, dst, 16);
  return 40;
}
static uint32_t pseudo4(const uint8_t *ip, int proto, int len) {
  uint32_t s = sum(ip + 12, 8, 0);
  return s + (uint32_t)proto + (uint32_t)len;
}
static uint32_t pseudo6(const uint8_t *ip, int proto, int len) {
  uint32_t s = sum(ip + 8, 32, 0);
  return s + (uint32_t)proto + (uint32_t)len;
}
/** TCP header with random options: returns its length (doff·4). */
static int tcp(uint8_t *t, int dport, uint8_t flags, int optwords) {
  put16(t, (uint16_t)(1024 + rn(64000))); put16(t + 2, (uint16_t)dport);
  put32(t + 4, (uint32_t)rnd()); put32(t + 8, flags & 0x10 ? (uint32_t)rnd() : 0);
  t[12] = (uint8_t)((5 + optwords) << 4); t[13] = flags; put16(t + 14, 65535); put16(t + 16, 0); put16(t + 18, 0);
  if (optwords) rbytes(t + 20, optwords * 4);
  return 20 + optwords * 4;
}
static uint8_t tcp_flags(void) {
  static const uint8_t common[] = {0x02, 0x10, 0x04, 0x14, 0x11, 0x18, 0x12, 0x01};
  return rn(4) ? common[rn(sizeof common)] : (uint8_t)rnd();
}
static int sctp(uint8_t *s, int dport, int room) {
  put16(s, (uint16_t)(1024 + rn(64000))); put16(s + 2, (uint16_t)dport); put32(s + 4, rn(4) ? (uint32_t)rnd() : 0); put32(s + 8, 0);
  int n = 12, chunks = 1 + (int)rn(4);
  for (int c = 0; c < chunks && n + 4 <= room; c++) {
    static const uint8_t types[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xc0, 0xff};
    int body = (int)rn(64);
    if (n + 4 + body > room) body = room - n - 4;
    uint8_t *k = s + n;
    k[0] = types[rn(sizeof types)]; k[1] = (uint8_t)rnd();
    int len = rn(5) ? 4 + body : (int)rn(65536); // mostly right, sometimes any length
    put16(k + 2, (uint16_t)len);
    rbytes(k + 4, body);
    n += 4 + ((body + 3) & ~3);
    if (n > room) n = room;
  }
  uint32_t c = crc32c(s, n);
  if (rn(10) < 7) { s[8] = c & 255; s[9] = (c >> 8) & 255; s[10] = (c >> 16) & 255; s[11] = c >> 24; } // little-endian on the wire (RFC 9260)
  return n;
}

static const uint8_t *dst4(void) {
  static uint8_t other[4];
  if (rn(8)) return vip4;
  memcpy(other, vip4, 3); other[3] = (uint8_t)rnd(); // another address of the VIP range
  return other;
}
static const uint8_t *dst6(void) {
  static uint8_t other[16];
  if (rn(8)) return vip6;
  memcpy(other, vip6, 8); rbytes(other + 8, 8);
  return other;
}
static int dport(void) {
  int r = (int)rn(10);
  return r < 6 ? port : r < 8 ? uport : r < 9 ? sport : (int)rn(65536);
}

/** A valid-looking IPv4 packet of protocol proto (TCP/UDP/SCTP/ICMP echo) from src; returns its length. */
static int v4_l4(uint8_t *b, int proto, const uint8_t *src, const uint8_t *dst) {
  uint8_t *l = b + 20;
  int n;
  if (proto == 6) {
    n = tcp(l, dport(), tcp_flags(), rn(3) ? 0 : (int)rn(11));
    int pay = rn(3) ? 0 : (int)rn(512);
    rbytes(l + n, pay); n += pay;
    ip4(b, 6, src, dst, n);
    put16(l + 16, rn(10) ? fold(sum(l, n, pseudo4(b, 6, n))) : (uint16_t)rnd());
  } else if (proto == 17) {
    int pay = (int)rn(600);
    n = 8 + pay;
    put16(l, (uint16_t)(1024 + rn(64000))); put16(l + 2, (uint16_t)(rn(2) ? uport : dport()));
    put16(l + 4, (uint16_t)(rn(6) ? n : (int)rn(65536))); put16(l + 6, 0);
    rbytes(l + 8, pay);
    ip4(b, 17, src, dst, n);
    int c = (int)rn(10);
    put16(l + 6, c < 6 ? fold(sum(l, n, pseudo4(b, 17, n))) : c < 8 ? 0 : (uint16_t)rnd());
  } else if (proto == 132) {
    n = sctp(l, rn(2) ? sport : dport(), 20 + (int)rn(400));
    ip4(b, 132, src, dst, n);
  } else {
    int pay = (int)rn(256);
    n = 8 + pay;
    l[0] = rn(2) ? 8 : (uint8_t)rnd(); l[1] = rn(2) ? 0 : (uint8_t)rnd(); put16(l + 2, 0); rbytes(l + 4, 4 + pay);
    put16(l + 2, rn(10) ? fold(sum(l, n, 0)) : (uint16_t)rnd());
    ip4(b, 1, src, dst, n);
  }
  return 20 + n;
}
static int v6_l4(uint8_t *b, int proto, const uint8_t *src, const uint8_t *dst) {
  uint8_t *l = b + 40;
  int n;
  if (proto == 6) {
    n = tcp(l, dport(), tcp_flags(), rn(3) ? 0 : (int)rn(11));
    int pay = rn(3) ? 0 : (int)rn(512);
    rbytes(l + n, pay); n += pay;
    ip6(b, 6, src, dst, n);
    put16(l + 16, rn(10) ? fold(sum(l, n, pseudo6(b, 6, n))) : (uint16_t)rnd());
  } else if (proto == 17) {
    int pay = (int)rn(600);
    n = 8 + pay;
    put16(l, (uint16_t)(1024 + rn(64000))); put16(l + 2, (uint16_t)(rn(2) ? uport : dport()));
    put16(l + 4, (uint16_t)(rn(6) ? n : (int)rn(65536))); put16(l + 6, 0);
    rbytes(l + 8, pay);
    ip6(b, 17, src, dst, n);
    int c = (int)rn(10);
    put16(l + 6, c < 7 ? fold(sum(l, n, pseudo6(b, 17, n))) : c < 8 ? 0 : (uint16_t)rnd());
  } else if (proto == 132) {
    n = sctp(l, rn(2) ? sport : dport(), 20 + (int)rn(400));
    ip6(b, 132, src, dst, n);
  } else {
    int pay = (int)rn(256);
    n = 8 + pay;
    static const uint8_t types[] = {128, 129, 133, 134, 135, 136, 137, 143, 1, 2, 3, 4};
    l[0] = rn(2) ? 128 : rn(2) ? types[rn(sizeof types)] : (uint8_t)rnd(); l[1] = rn(2) ? 0 : (uint8_t)rnd(); put16(l + 2, 0); rbytes(l + 4, 4 + pay);
    ip6(b, 58, src, dst, n);
    put16(l + 2, rn(10) ? fold(sum(l, n, pseudo6(b, 58, n))) : (uint16_t)rnd());
  }
  return 40 + n;
}
static int pick_proto(void) {
  static const int p[] = {6, 6, 17, 132, 1};
  return p[rn(5)];
}

/** An ICMP(v6) error whose quoted packet is garbage: random bytes, a truncated or lying header. */
static int icmp_err4(uint8_t *b) {
  uint8_t src[4];
  src4_random(src);
  uint8_t *ic = b + 20, *q = ic + 8;
  static const uint8_t types[] = {3, 3, 3, 4, 5, 11, 12};
  ic[0] = types[rn(sizeof types)]; ic[1] = (uint8_t)rn(16); put16(ic + 2, 0); put32(ic + 4, rn(2) ? 1400 : (uint32_t)rnd());
  int ql;
  switch (rn(5)) {
    case 0: ql = (int)rn(64); rbytes(q, ql); break; // pure garbage, maybe shorter than a header
    case 1: ql = v4_l4(q, pick_proto(), vip4, src); break; // a plausible packet of ours, to nowhere
    case 2: ql = v4_l4(q, pick_proto(), vip4, src); ql = 20 + (int)rn(8); break; // cut inside the ports
    case 3: ql = v4_l4(q, pick_proto(), vip4, src); q[0] = (uint8_t)(0x40 | rn(16)); break; // bad quoted ihl
    default: ql = v4_l4(q, pick_proto(), vip4, src); put16(q + 2, (uint16_t)rnd()); rbytes(q + 20, 4); break; // lying length, random ports
  }
  int n = 8 + ql;
  put16(ic + 2, rn(10) ? fold(sum(ic, n, 0)) : (uint16_t)rnd());
  ip4(b, 1, src, dst4(), n);
  return 20 + n;
}
static int icmp_err6(uint8_t *b) {
  uint8_t src[16];
  src6_random(src);
  uint8_t *ic = b + 40, *q = ic + 8;
  static const uint8_t types[] = {1, 1, 2, 3, 4};
  ic[0] = types[rn(sizeof types)]; ic[1] = (uint8_t)rn(8); put16(ic + 2, 0); put32(ic + 4, rn(2) ? 1280 : (uint32_t)rnd());
  int ql;
  switch (rn(4)) {
    case 0: ql = (int)rn(80); rbytes(q, ql); break;
    case 1: ql = v6_l4(q, pick_proto() == 1 ? 58 : pick_proto(), vip6, src); break;
    case 2: ql = v6_l4(q, 6, vip6, src); ql = 40 + (int)rn(8); break;
    default: ql = v6_l4(q, 17, vip6, src); q[6] = (uint8_t)rnd(); put16(q + 4, (uint16_t)rnd()); break; // bad next header / length
  }
  if (ql > 1200) ql = 1200;
  int n = 8 + ql;
  ip6(b, 58, src, dst6(), n);
  put16(ic + 2, rn(10) ? fold(sum(ic, n, pseudo6(b, 58, n))) : (uint16_t)rnd());
  return 40 + n;
}

/** One fuzz frame of kind k into b; sets *proto (ethertype). Returns its length. */
static int fuzz(uint8_t *b, int k, uint16_t *proto) {
  uint8_t s4[4], s6[16];
  src4_random(s4);
  src6_random(s6);
  *proto = ETH_P_IP;
  int n;
  switch (k) {
    case K_RANDOM: n = 1 + (int)rn(1500); rbytes(b, n); if (rn(2)) *proto = ETH_P_IPV6; return n;
    case K_RANDOM4: n = 1 + (int)rn(1500); rbytes(b, n); b[0] = 0x45; return n;
    case K_RANDOM6: n = 1 + (int)rn(1500); rbytes(b, n); b[0] = (uint8_t)(0x60 | rn(16)); *proto = ETH_P_IPV6; return n;
    case K_V4_BADSUM: n = v4_l4(b, pick_proto(), s4, dst4()); b[10] ^= (uint8_t)(1 + rn(255)); return n;
    case K_V4_BADHDR:
      n = v4_l4(b, pick_proto(), s4, dst4());
      switch (rn(6)) {
        case 0: b[0] = (uint8_t)(0x40 | rn(5)); break; // ihl < 5
        case 1: b[0] = (uint8_t)((5 + rn(9) + (rn(2) ? 2 : 0)) << 4 | 5); if ((b[0] >> 4) == 6) b[0] = 0x75; break; // another version
        case 2: put16(b + 2, (uint16_t)(n + 1 + rn(60000))); break; // longer than the frame
        case 3: put16(b + 2, (uint16_t)rn(20)); break; // shorter than its header
        case 4: b[0] = (uint8_t)(0x40 | (6 + rn(10))); rbytes(b + 20, 40); break; // options: garbage
        default: n = 1 + (int)rn(19); break; // cut inside the header
      }
      put16(b + 10, 0); put16(b + 10, fold(sum(b, (b[0] & 15) * 4 <= n ? (b[0] & 15) * 4 : 20, 0)));
      return n;
    case K_V4_FRAG:
      n = v4_l4(b, pick_proto(), s4, dst4());
      put16(b + 6, (uint16_t)(rn(2) ? 0x2000 | rn(8192) : rn(8192)));
      if ((b[6] | b[7]) == 0) b[7] = 1;
      put16(b + 10, 0); put16(b + 10, fold(sum(b, 20, 0)));
      return n;
    case K_V4_TCP: return v4_l4(b, 6, s4, dst4());
    case K_V4_UDP: return v4_l4(b, 17, s4, dst4());
    case K_V4_SCTP: return v4_l4(b, 132, s4, dst4());
    case K_V4_ICMP: return v4_l4(b, 1, s4, dst4());
    case K_V4_ICMPERR: return icmp_err4(b);
    case K_V4_PROTO: {
      static const uint8_t protos[] = {0, 2, 4, 41, 47, 50, 51, 58, 89, 103, 112, 136, 255};
      int p = rn(3) ? protos[rn(sizeof protos)] : (int)rn(256);
      if (p == 6 || p == 17 || p == 132 || p == 1) p = 47;
      int pay = (int)rn(400);
      rbytes(b + 20, pay);
      ip4(b, p, s4, dst4(), pay);
      return 20 + pay;
    }
    case K_V4_SPOOF: {
      // Sources a generated reply must never go to: VIP range, multicast, broadcast, loopback,
      // unspecified, and the lab's own client. Unused VIP ports (RST/unreachable candidates) too.
      switch (rn(6)) {
        case 0: memcpy(s4, vip4, 3); s4[3] = (uint8_t)rnd(); break;
        case 1: put32(s4, 0xE0000000u | rn(1u << 28)); break;
        case 2: put32(s4, 0xFFFFFFFFu); break;
        case 3: put32(s4, 0x7F000000u | rn(1u << 24)); break;
        case 4: put32(s4, 0); break;
        default: put32(s4, 0x0AC80100u | rn(256)); break;
      }
      n = v4_l4(b, pick_proto(), s4, dst4());
      if (rn(2) && b[9] == 6) { put16(b + 22, (uint16_t)(20000 + rn(1000))); uint8_t *t = b + 20; int tl = n - 20; put16(t + 16, 0); put16(t + 16, fold(sum(t, tl, pseudo4(b, 6, tl)))); }
      return n;
    }
    case K_V6_BADHDR:
      *proto = ETH_P_IPV6;
      n = v6_l4(b, pick_proto() == 1 ? 58 : pick_proto(), s6, dst6());
      switch (rn(4)) {
        case 0: put16(b + 4, (uint16_t)(n - 40 + 1 + rn(60000))); break; // payload longer than the frame
        case 1: n = 1 + (int)rn(39); break; // cut inside the header
        case 2: b[0] = (uint8_t)(0x40 | (b[0] & 15)); break; // says v4
        default: put16(b + 4, 0); break; // jumbo-style zero length
      }
      return n;
    case K_V6_EXT: {
      *proto = ETH_P_IPV6;
      static const uint8_t ext[] = {0, 43, 60, 44, 51, 59, 135, 139};
      int nh = (int)rn(12), off = 40;
      uint8_t *prev = b + 6;
      for (int i = 0; i < nh && off < 1200; i++) {
        uint8_t e = ext[rn(sizeof ext)];
        *prev = e;
        uint8_t *h = b + off;
        int len = e == 44 ? 8 : 8 * (1 + (int)rn(4));
        rbytes(h, len);
        if (e == 51) h[1] = (uint8_t)(len / 4 - 2); else if (e != 44) h[1] = (uint8_t)(len / 8 - 1);
        if (rn(10) == 0) h[1] = (uint8_t)rnd(); // a length that runs past the frame
        prev = h;
        off += len;
      }
      static const uint8_t last[] = {6, 17, 58, 132, 59, 255};
      *prev = last[rn(sizeof last)];
      int pay = 8 + (int)rn(200);
      rbytes(b + off, pay);
      if (*prev == 6 && pay >= 20) { b[off + 12] = 0x50; put16(b + off + 2, (uint16_t)port); }
      uint8_t nxt = b[6];
      ip6(b, nxt, s6, dst6(), off - 40 + pay);
      return off + pay;
    }
    case K_V6_TCP: *proto = ETH_P_IPV6; return v6_l4(b, 6, s6, dst6());
    case K_V6_UDP: *proto = ETH_P_IPV6; return v6_l4(b, 17, s6, dst6());
    case K_V6_SCTP: *proto = ETH_P_IPV6; return v6_l4(b, 132, s6, dst6());
    case K_V6_ICMP: *proto = ETH_P_IPV6; return v6_l4(b, 58, s6, dst6());
    case K_V6_ICMPERR: *proto = ETH_P_IPV6; return icmp_err6(b);
    case K_V6_SPOOF: {
      *proto = ETH_P_IPV6;
      memset(s6, 0, 16);
      switch (rn(5)) {
        case 0: memcpy(s6, vip6, 8); rbytes(s6 + 8, 8); break; // VIP range
        case 1: s6[0] = 0xff; s6[1] = 0x02; s6[15] = 1; break; // ff02::1
        case 2: s6[15] = 1; break; // ::1
        case 3: break; // ::
        default: s6[0] = 0xfe; s6[1] = 0x80; rbytes(s6 + 8, 8); break; // link-local
      }
      return v6_l4(b, pick_proto() == 1 ? 58 : pick_proto(), s6, dst6());
    }
  }
  return 0;
}

/** A random virtio_net_hdr before a TCP/UDP packet (maybe larger than the MTU, as GSO would be). */
static int vnet_frame(uint8_t *b, uint16_t *proto) {
  struct virtio_net_hdr *h = (struct virtio_net_hdr *)b;
  uint8_t *p = b + sizeof *h;
  uint8_t s4[4], s6[16];
  int v6 = (int)rn(2), n;
  if (v6) { src6_random(s6); n = v6_l4(p, rn(2) ? 6 : 17, s6, vip6); *proto = ETH_P_IPV6; }
  else { src4_random(s4); n = v4_l4(p, rn(2) ? 6 : 17, s4, vip4); *proto = ETH_P_IP; }
  if (rn(3) == 0) { // a GSO super-packet: grow the payload, fix the lengths
    int extra = 1500 + (int)rn(6000);
    rbytes(p + n, extra);
    n += extra;
    if (v6) put16(p + 4, (uint16_t)(n - 40)); else { put16(p + 2, (uint16_t)n); put16(p + 10, 0); put16(p + 10, fold(sum(p, 20, 0))); }
  }
  static const uint8_t gso[] = {VIRTIO_NET_HDR_GSO_NONE, VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP, 5 /* UDP_L4 */, 0x80 | VIRTIO_NET_HDR_GSO_TCPV4, 0x33};
  h->flags = (uint8_t)(rn(3) ? VIRTIO_NET_HDR_F_NEEDS_CSUM : rnd() & 7);
  h->gso_type = gso[rn(sizeof gso)];
  int l3 = v6 ? 40 : 20;
  h->hdr_len = (uint16_t)(rn(2) ? l3 + 20 + rn(40) : rn(256));
  h->gso_size = (uint16_t)(rn(2) ? 1 + rn(1460) : rnd());
  h->csum_start = (uint16_t)(rn(2) ? (uint32_t)l3 : rn(128));
  h->csum_offset = (uint16_t)(rn(2) ? 16 : rn(2) ? 6 : rn(256));
  return (int)sizeof *h + n;
}

static int syn_frame(uint8_t *b, int kind, uint16_t *proto) {
  uint8_t src[16];
  int n;
  uint8_t *t;
  if (kind == 4 || kind == 1 || kind == 5) {
    src4_random(src);
    t = b + 20;
    n = tcp(t, port, kind == 1 ? 0x10 : 0x02, 0);
    if (kind == 5) put16(t, (uint16_t)(1 + rn(port > 1 ? (uint32_t)port - 1 : 1)));
    if (kind != 1) { t[12] = 6 << 4; t[20] = 2; t[21] = 4; put16(t + 22, 1460); n = 24; } // MSS option, as real SYNs carry
    ip4(b, 6, src, vip4, n);
    put16(t + 16, fold(sum(t, n, pseudo4(b, 6, n))));
    *proto = ETH_P_IP;
    return 20 + n;
  }
  if (kind == 6) src6_random(src); else if (kind == 8) src6_fold(src); else src6_net(src);
  t = b + 40;
  n = tcp(t, port, 0x02, 0);
  if (kind == 8) put16(t, (uint16_t)sport);
  t[12] = 6 << 4; t[20] = 2; t[21] = 4; put16(t + 22, 1440); n = 24;
  ip6(b, 6, src, vip6, n);
  put16(t + 16, fold(sum(t, n, pseudo6(b, 6, n))));
  *proto = ETH_P_IPV6;
  return 40 + n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_mac(const char *s, uint8_t *m) {
  unsigned x[6];
  if (sscanf(s, "%x:%x:%x:%x:%x:%x", &x[0], &x[1], &x[2], &x[3], &x[4], &x[5]) != 6) return -1;
  for (int i = 0; i < 6; i++) m[i] = (uint8_t)x[i];
  return 0;
}

int main(int argc, char **argv) {
  uint64_t seed = 1;
  inet_pton(AF_INET6, "fd00:200::10", vip6);
  for (int i = 1; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) { fprintf(stderr, "relgen: bad argument %s (key=value)\n", argv[i]); return 2; }
    *eq = 0;
    const char *k = argv[i], *v = eq + 1;
    if (!strcmp(k, "mode")) mode = v;
    else if (!strcmp(k, "if")) ifname = v;
    else if (!strcmp(k, "count")) count = strtoull(v, 0, 10);
    else if (!strcmp(k, "pps")) pps = strtoull(v, 0, 10);
    else if (!strcmp(k, "seconds")) seconds = strtod(v, 0);
    else if (!strcmp(k, "seed")) seed = strtoull(v, 0, 10);
    else if (!strcmp(k, "vip4")) { if (inet_pton(AF_INET, v, vip4) != 1) { fprintf(stderr, "relgen: bad vip4\n"); return 2; } }
    else if (!strcmp(k, "vip6")) { if (inet_pton(AF_INET6, v, vip6) != 1) { fprintf(stderr, "relgen: bad vip6\n"); return 2; } }
    else if (!strcmp(k, "port")) port = atoi(v);
    else if (!strcmp(k, "uport")) uport = atoi(v);
    else if (!strcmp(k, "sport")) sport = atoi(v);
    else if (!strcmp(k, "kind")) {
      for (int j = 0; j < NKINDS; j++) if (!strcmp(v, KINDS[j])) only_kind = j;
      if (only_kind < 0) { fprintf(stderr, "relgen: unknown kind %s\n", v); return 2; }
    }
    else if (!strcmp(k, "mac")) { if (parse_mac(v, mac)) { fprintf(stderr, "relgen: bad mac\n"); return 2; } has_mac = 1; }
    else { fprintf(stderr, "relgen: unknown option %s\n", k); return 2; }
  }
  int m = !strcmp(mode, "fuzz") ? 0 : !strcmp(mode, "syn4") ? 4 : !strcmp(mode, "syn6") ? 6 : !strcmp(mode, "syn6net") ? 7 : !strcmp(mode, "ack4") ? 1
        : !strcmp(mode, "syn4low") ? 5 : !strcmp(mode, "syn6fold") ? 8 : -1;
  if (m < 0) { fprintf(stderr, "relgen: unknown mode %s\n", mode); return 2; }
  rs = seed * 0x9E3779B97F4A7C15ULL + 1;
  fold6 = (uint32_t)(rnd() >> 32);
  crc32c_init();
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  unsigned idx = if_nametoindex(ifname);
  if (!idx) { fprintf(stderr, "relgen: no device %s\n", ifname); return 1; }
  // Protocol 0: the sockets send only (nothing is queued to them for reading).
  int fd = socket(AF_PACKET, SOCK_DGRAM, 0);
  // PACKET_VNET_HDR needs SOCK_RAW; without a link header (a TUN device) the raw frame is the IP
  // packet, so the virtio frames go only there (with mac= there is an Ethernet header to write).
  int vfd = m == 0 && !has_mac ? socket(AF_PACKET, SOCK_RAW, 0) : -1;
  if (fd < 0) { perror("relgen: socket"); return 1; }
  int one = 1;
  if (vfd >= 0 && setsockopt(vfd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0) { close(vfd); vfd = -1; }

  static uint8_t frames[BATCH][FRAME];
  static struct sockaddr_ll addr[BATCH];
  static struct iovec iov[BATCH];
  static struct mmsghdr msg[BATCH];
  static int kind_of[BATCH];
  uint64_t kinds[NKINDS] = {0};
  uint64_t sent = 0, refused = 0;
  double t0 = now_s();
  while (!stop) {
    if (count && sent + refused >= count) break;
    double el = now_s() - t0;
    if (seconds > 0 && el >= seconds) break;
    int want = BATCH;
    if (count && count - sent - refused < (uint64_t)want) want = (int)(count - sent - refused);
    if (pps) {
      // Pace: never ahead of pps·elapsed; small batches at low rates keep the spacing even.
      double due = (double)(sent + refused) / (double)pps;
      if (due > el) {
        double d = due - el;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, 0);
        continue;
      }
      double behind = el * (double)pps - (double)(sent + refused) + 1;
      if (behind < want) want = behind < 1 ? 1 : (int)behind;
    }
    // Build: plain frames go in one sendmmsg, virtio ones one by one on the other socket.
    int nb = 0;
    for (int i = 0; i < want; i++) {
      uint16_t proto = ETH_P_IP;
      int len, k = -1;
      if (m == 0) {
        k = only_kind >= 0 ? only_kind : (int)rn(NKINDS);
        if (k == K_VNET) {
          if (vfd < 0) k = K_V4_TCP;
          else {
            len = vnet_frame(frames[nb], &proto);
            struct sockaddr_ll a = {.sll_family = AF_PACKET, .sll_protocol = htons(proto), .sll_ifindex = (int)idx};
            if (has_mac) { a.sll_halen = 6; memcpy(a.sll_addr, mac, 6); }
            if (sendto(vfd, frames[nb], (size_t)len, 0, (struct sockaddr *)&a, sizeof a) == len) sent++, kinds[K_VNET]++;
            else refused++;
            continue;
          }
        }
        len = fuzz(frames[nb], k, &proto);
      } else len = syn_frame(frames[nb], m, &proto);
      if (len <= 0) len = 1;
      addr[nb] = (struct sockaddr_ll){.sll_family = AF_PACKET, .sll_protocol = htons(proto), .sll_ifindex = (int)idx};
      if (has_mac) { addr[nb].sll_halen = 6; memcpy(addr[nb].sll_addr, mac, 6); }
      iov[nb] = (struct iovec){frames[nb], (size_t)len};
      msg[nb].msg_hdr = (struct msghdr){.msg_name = &addr[nb], .msg_namelen = sizeof addr[nb], .msg_iov = &iov[nb], .msg_iovlen = 1};
      kind_of[nb] = k;
      nb++;
    }
    int done = 0;
    while (done < nb) {
      int r = sendmmsg(fd, msg + done, (unsigned)(nb - done), 0);
      if (r < 0) {
        if (errno == EINTR && stop) break;
        refused++; // this one was refused (bad frame, or the queue was full): skip it
        done++;
        continue;
      }
      for (int i = done; i < done + r; i++) if (kind_of[i] >= 0) kinds[kind_of[i]]++;
      sent += (uint64_t)r;
      done += r;
    }
  }
  double ms = (now_s() - t0) * 1000;
  printf("{\"sent\":%llu,\"refused\":%llu,\"ms\":%.0f,\"vnet\":%s,\"kinds\":{", (unsigned long long)sent, (unsigned long long)refused, ms, vfd >= 0 ? "true" : "false");
  if (m == 0) for (int k = 0; k < NKINDS; k++) printf("%s\"%s\":%llu", k ? "," : "", KINDS[k], (unsigned long long)kinds[k]);
  printf("}}\n");
  return 0;
}
