/*
 * ctun: the minimal C TUN forwarder that a TUN-based load balancer is measured against (the perf
 * harness's target `ctun`; issue 8: "LB CPU per packet within 2x of the C TUN forwarder").
 *
 * Stateless NAT for one VIP. A packet client -> VIP:vport gets its destination rewritten to one
 * of the service's real servers, chosen by a hash of (client address, client port), so a flow
 * sticks to one server with no table; a reply from RIP:rport (brought to the device by policy
 * rules, as for uvs) gets its source rewritten back to VIP:vport. IPv4 header and TCP/UDP
 * checksums are updated incrementally (RFC 1624, eqn. 3); a UDP checksum of 0 stays 0. Anything
 * else (fragments, other protocols, other addresses) is dropped. One packet per read() and per
 * write() of a 1500-byte buffer; one thread per queue of the TUN device (IFF_MULTI_QUEUE when
 * there are several). The device's address-less setup (up, MTU, routes, rules, sysctls) is the
 * harness's job; ctun only opens it.
 *
 *   ctun -d DEV -v VIP [-q QUEUES] PROTO:VPORT=RIP:RPORT[,RIP:RPORT...] ...
 *   e.g. ctun -d ctun0 -v 10.200.0.50 -q 2 tcp:80=10.200.11.2:8080,10.200.12.2:8080
 *
 * Prints "ready" on stdout once every queue is open; on SIGTERM/SIGINT prints its counters on
 * stderr and exits 0. Build: cc -O2 -pthread -o ctun ctun.c (no other dependency).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define BUF 1500
#define MAXSVC 16
#define MAXRS 32
#define MAXQ 64

struct rs { uint32_t addr; uint16_t port; };                      /* network byte order */
struct svc { uint8_t proto; uint16_t vport; int n; struct rs rs[MAXRS]; };

static struct svc svcs[MAXSVC];
static int nsvc, nq = 1, fds[MAXQ];
static uint32_t vip;
static unsigned long long in[MAXQ], out[MAXQ], dropped[MAXQ], werr[MAXQ];

static void die(const char *m) { fprintf(stderr, "ctun: %s\n", m); exit(2); }

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for one 16-bit word m -> m'. One's-complement sums
 * come out the same in either byte order, so the words are used as they lie in the packet. */
static void adj16(uint8_t *c, uint16_t m, uint16_t m2) {
  uint16_t hc;
  memcpy(&hc, c, 2);
  uint32_t s = (uint16_t)~hc + (uint32_t)(uint16_t)~m + m2;
  s = (s & 0xffff) + (s >> 16);
  s = (s & 0xffff) + (s >> 16);
  hc = (uint16_t)~s;
  memcpy(c, &hc, 2);
}
static void adj32(uint8_t *c, uint32_t m, uint32_t m2) { adj16(c, (uint16_t)m, (uint16_t)m2); adj16(c, m >> 16, m2 >> 16); }

/* Rewrites address a (at p+aoff) and port (at l4+poff) to na:np, fixing both checksums. */
static void rewrite(uint8_t *p, int aoff, uint8_t *l4, int poff, uint8_t *l4c, int udp, uint32_t na, uint16_t np) {
  uint32_t a; uint16_t port;
  memcpy(&a, p + aoff, 4);
  memcpy(&port, l4 + poff, 2);
  memcpy(p + aoff, &na, 4);
  memcpy(l4 + poff, &np, 2);
  adj32(p + 10, a, na);
  if (udp && !l4c[0] && !l4c[1]) return;                           /* no UDP checksum: stays 0 */
  adj32(l4c, a, na);
  adj16(l4c, port, np);
  if (udp && !l4c[0] && !l4c[1]) l4c[0] = l4c[1] = 0xff;            /* 0 means "none" in UDP */
}

static uint32_t flowhash(uint32_t a, uint16_t p) {
  uint32_t h = (a ^ ((uint32_t)p << 16 | p)) * 0x9e3779b1u;
  return h ^ (h >> 15);
}

/* 1: client -> server rewritten, 2: reply rewritten, 0: drop. */
static int nat(uint8_t *p, ssize_t len) {
  if (len < 20 || p[0] >> 4 != 4) return 0;
  int ihl = (p[0] & 15) * 4;
  uint8_t proto = p[9];
  if (ihl < 20 || (p[6] & 0x3f) || p[7] || (proto != 6 && proto != 17)) return 0; /* no fragments */
  if (len < ihl + (proto == 6 ? 20 : 8)) return 0;
  uint8_t *l4 = p + ihl, *l4c = l4 + (proto == 6 ? 16 : 6);
  int udp = proto == 17;
  uint32_t src, dst; uint16_t sport, dport;
  memcpy(&src, p + 12, 4); memcpy(&dst, p + 16, 4);
  memcpy(&sport, l4, 2); memcpy(&dport, l4 + 2, 2);
  for (int i = 0; i < nsvc; i++) {
    struct svc *s = &svcs[i];
    if (s->proto != proto) continue;
    if (dst == vip && dport == s->vport) {
      struct rs *r = &s->rs[flowhash(src, sport) % (uint32_t)s->n];
      rewrite(p, 16, l4, 2, l4c, udp, r->addr, r->port);
      return 1;
    }
    for (int k = 0; k < s->n; k++) {
      if (src == s->rs[k].addr && sport == s->rs[k].port) {
        rewrite(p, 12, l4, 0, l4c, udp, vip, s->vport);
        return 2;
      }
    }
  }
  return 0;
}

static void *loop(void *arg) {
  long q = (long)arg;
  uint8_t buf[BUF];
  for (;;) {
    ssize_t n = read(fds[q], buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      perror("ctun: read");
      exit(1);
    }
    int r = nat(buf, n);
    if (!r) { dropped[q]++; continue; }
    if (write(fds[q], buf, (size_t)n) != n) werr[q]++;
    else if (r == 1) in[q]++;
    else out[q]++;
  }
  return NULL;
}

static void parse_svc(char *a) {
  struct svc *s = &svcs[nsvc];
  char *eq = strchr(a, '='), *colon = strchr(a, ':');
  if (nsvc >= MAXSVC || !eq || !colon || colon > eq) die("service: PROTO:VPORT=RIP:RPORT[,RIP:RPORT...]");
  *colon = *eq = 0;
  if (!strcmp(a, "tcp")) s->proto = 6;
  else if (!strcmp(a, "udp")) s->proto = 17;
  else die("service protocol: tcp or udp");
  s->vport = htons((uint16_t)atoi(colon + 1));
  for (char *t = strtok(eq + 1, ","); t; t = strtok(NULL, ",")) {
    char *c = strchr(t, ':');
    struct in_addr ia;
    if (s->n >= MAXRS || !c) die("real server: RIP:RPORT");
    *c = 0;
    if (inet_pton(AF_INET, t, &ia) != 1) die("real server address");
    s->rs[s->n].addr = ia.s_addr;
    s->rs[s->n++].port = htons((uint16_t)atoi(c + 1));
  }
  if (!s->n) die("service without real servers");
  nsvc++;
}

int main(int argc, char **argv) {
  const char *dev = NULL;
  struct in_addr ia;
  int o;
  while ((o = getopt(argc, argv, "d:v:q:")) != -1) {
    if (o == 'd') dev = optarg;
    else if (o == 'v' && inet_pton(AF_INET, optarg, &ia) == 1) vip = ia.s_addr;
    else if (o == 'q') nq = atoi(optarg);
    else die("usage: ctun -d DEV -v VIP [-q QUEUES] PROTO:VPORT=RIP:RPORT[,RIP:RPORT...] ...");
  }
  if (!dev || !vip || nq < 1 || nq > MAXQ || optind >= argc) die("usage: ctun -d DEV -v VIP [-q QUEUES] PROTO:VPORT=RIP:RPORT[,RIP:RPORT...] ...");
  for (int i = optind; i < argc; i++) parse_svc(argv[i]);
  for (int q = 0; q < nq; q++) {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (nq > 1 ? IFF_MULTI_QUEUE : 0);
    strncpy(ifr.ifr_name, dev, IFNAMSIZ - 1);
    if ((fds[q] = open("/dev/net/tun", O_RDWR | O_CLOEXEC)) < 0 || ioctl(fds[q], TUNSETIFF, &ifr) < 0) {
      perror("ctun: /dev/net/tun");
      return 1;
    }
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);                         /* the threads inherit it */
  for (long q = 0; q < nq; q++) {
    pthread_t t;
    if (pthread_create(&t, NULL, loop, (void *)q)) die("pthread_create");
  }
  printf("ready %s %d queue(s) %d service(s)\n", dev, nq, nsvc);
  fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  unsigned long long ti = 0, to = 0, td = 0, te = 0;
  for (int q = 0; q < nq; q++) ti += in[q], to += out[q], td += dropped[q], te += werr[q];
  fprintf(stderr, "ctun: in %llu out %llu dropped %llu write-errors %llu\n", ti, to, td, te);
  return 0;
}
