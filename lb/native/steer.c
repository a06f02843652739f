/*
 * uvs TUN addon, queue steering: a small eBPF program (TUNSETSTEERINGEBPF) that picks the queue,
 * and so the worker, of every packet the kernel sends into the device.
 *
 * Why: without a program the device steers by its own flow table ("automq", drivers/net/tun.c
 * tun_automq_select_queue / tun_flow_update). That costs a flow dissection and a table lookup per
 * packet read, another dissection and a table update (an allocation for each new flow, a timer
 * to age it) per packet written, and it orders a new connection's first packets badly: the table
 * learns a flow only after the written packet has been delivered, so the answer generated during
 * that delivery (the server's SYN-ACK, the client's handshake ACK) is hashed onto any queue, and
 * the client's next packet, once learned, onto the other one. Two workers then race, and the
 * client's ACK can reach the server after its request (perf/LOG.md, 2026-12-01 and 2026-12-02).
 *
 * What the program does: it keys a packet on its *client's* endpoint, so that both directions of
 * a masq connection — client → VIP and real server → client — land on one queue, and every
 * packet of one direction always on the same queue:
 *   - TCP, UDP, SCTP (IPv4 unfragmented or first fragment; IPv6 without extension headers): the
 *     endpoint with the higher port (the client's ephemeral port against a service port); equal
 *     ports: both addresses (xor, so either direction) and the port.
 *   - anything else (ICMP, later fragments, extension headers, other protocols): both addresses
 *     (xor) — stateless, so one direction of a pair always shares a queue.
 *   - not IPv4 or IPv6: queue 0.
 * The key is mixed with a per-device random seed (two multiply-xor rounds), so nobody outside
 * can aim a flood at one queue by choosing ports. Any queue can serve any packet — the workers
 * share the connection table — so the key is an affinity, never a correctness condition.
 *
 * The kernel takes the program's value modulo the number of queues (u16 in older kernels): the
 * program returns the mixed hash's high 16 bits.
 *
 * Export (lb/tun.ts has the type):
 *   steerAttach(fd, seed) -> "" when the program is attached to the device of queue fd, else
 *   why not (no bpf() for this process, a kernel without TUNSETSTEERINGEBPF): the device then
 *   keeps its automatic steering.
 */
#include <node_api.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef TUNSETSTEERINGEBPF
#define TUNSETSTEERINGEBPF _IOR('T', 224, int) /* Linux 4.16 */
#endif

/* Instruction builders (the kernel's include/linux/filter.h macros, written out here). */
#define I(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
#define MOV64_REG(d, s) I(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV32_REG(d, s) I(BPF_ALU | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV32_IMM(d, v) I(BPF_ALU | BPF_MOV | BPF_K, d, 0, 0, v)
#define ALU32_IMM(op, d, v) I(BPF_ALU | (op) | BPF_K, d, 0, 0, v)
#define ALU32_REG(op, d, s) I(BPF_ALU | (op) | BPF_X, d, s, 0, 0)
/* r0 = packet[off] (network byte order converted to host), r1-r5 clobbered; out of bounds: exit 0. */
#define LD_ABS(size, off) I(BPF_LD | (size) | BPF_ABS, 0, 0, 0, off)
#define LD_IND(size, s, off) I(BPF_LD | (size) | BPF_IND, 0, s, 0, off)
#define EXIT() I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

/* Labels: a jump's offset is patched once its target is emitted. */
enum { L_V6, L_ADDR4, L_L4V4, L_PAIR4, L_SRC4, L_DST4, L_L4V6, L_PAIR6, L_SRC6, L_DST6, L_ADDR6, L_MIX, L_ZERO, L_N };

typedef struct {
  struct bpf_insn insn[160];
  int n;
  int at[L_N];
  struct {
    int pc, label;
  } fix[48];
  int nfix;
  int overflow;
} prog_t;

static void emit(prog_t *p, struct bpf_insn i) {
  if (p->n < (int)(sizeof p->insn / sizeof p->insn[0]))
    p->insn[p->n++] = i;
  else
    p->overflow = 1;
}
static void label(prog_t *p, int l) { p->at[l] = p->n; }
static void jump(prog_t *p, uint8_t op, int src_is_reg, int dst, int src_or_imm, int l) {
  if (p->nfix >= (int)(sizeof p->fix / sizeof p->fix[0])) {
    p->overflow = 1;
    return;
  }
  p->fix[p->nfix].pc = p->n;
  p->fix[p->nfix].label = l;
  p->nfix++;
  if (src_is_reg)
    emit(p, I(BPF_JMP | op | BPF_X, dst, src_or_imm, 0, 0));
  else
    emit(p, I(BPF_JMP | op | BPF_K, dst, 0, 0, src_or_imm));
}
#define JA(p, l) jump(p, BPF_JA, 0, 0, 0, l)

/* r8 = the four words of the IPv6 address at off, xor-folded (r8 ^= when acc). */
static void fold6(prog_t *p, int off, int acc) {
  for (int w = 0; w < 4; w++) {
    emit(p, LD_ABS(BPF_W, off + 4 * w));
    if (w == 0 && !acc)
      emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
    else
      emit(p, ALU32_REG(BPF_XOR, BPF_REG_8, BPF_REG_0));
  }
}

/* r0 holds the transport protocol: jump to l when it has ports (TCP, UDP, SCTP). */
static void if_ported(prog_t *p, int l) {
  jump(p, BPF_JEQ, 0, BPF_REG_0, 6, l);
  jump(p, BPF_JEQ, 0, BPF_REG_0, 17, l);
  jump(p, BPF_JEQ, 0, BPF_REG_0, 132, l);
}

/* r7 = source port, r9 = destination port: to l_src when the source's is higher, to l_dst when the
 * destination's, else (equal) to l_pair with r7 the port. */
static void by_ports(prog_t *p, int l_src, int l_dst, int l_pair) {
  jump(p, BPF_JGT, 1, BPF_REG_7, BPF_REG_9, l_src);
  jump(p, BPF_JGT, 1, BPF_REG_9, BPF_REG_7, l_dst);
  JA(p, l_pair);
}

/* Registers: r6 the skb (LD_ABS needs it there), r7 the key's port, r8 the key's address, r9 the
 * other port. LD_ABS/LD_IND leave their value in r0 and clobber r1-r5. */
static void build(prog_t *p, uint32_t seed) {
  memset(p, 0, sizeof *p);
  emit(p, MOV64_REG(BPF_REG_6, BPF_REG_1));
  emit(p, LD_ABS(BPF_B, 0));
  emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, 0xf0));
  jump(p, BPF_JEQ, 0, BPF_REG_0, 0x60, L_V6);
  jump(p, BPF_JNE, 0, BPF_REG_0, 0x40, L_ZERO);

  /* IPv4: a later fragment has no ports. */
  emit(p, LD_ABS(BPF_H, 6));
  emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, 0x1fff));
  jump(p, BPF_JNE, 0, BPF_REG_0, 0, L_ADDR4);
  emit(p, LD_ABS(BPF_B, 9));
  if_ported(p, L_L4V4);
  label(p, L_ADDR4);
  emit(p, MOV32_IMM(BPF_REG_7, 0));
  label(p, L_PAIR4);
  emit(p, LD_ABS(BPF_W, 12));
  emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
  emit(p, LD_ABS(BPF_W, 16));
  emit(p, ALU32_REG(BPF_XOR, BPF_REG_8, BPF_REG_0));
  JA(p, L_MIX);

  label(p, L_L4V4);
  emit(p, LD_ABS(BPF_B, 0));
  emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, 0x0f));
  emit(p, ALU32_IMM(BPF_LSH, BPF_REG_0, 2));
  emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
  emit(p, LD_IND(BPF_H, BPF_REG_8, 0));
  emit(p, MOV32_REG(BPF_REG_7, BPF_REG_0));
  emit(p, LD_IND(BPF_H, BPF_REG_8, 2));
  emit(p, MOV32_REG(BPF_REG_9, BPF_REG_0));
  by_ports(p, L_SRC4, L_DST4, L_PAIR4);
  label(p, L_SRC4);
  emit(p, LD_ABS(BPF_W, 12));
  emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
  JA(p, L_MIX);
  label(p, L_DST4);
  emit(p, LD_ABS(BPF_W, 16));
  emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
  emit(p, MOV32_REG(BPF_REG_7, BPF_REG_9));
  JA(p, L_MIX);

  /* IPv6: ports only when the transport header follows the fixed header. */
  label(p, L_V6);
  emit(p, LD_ABS(BPF_B, 6));
  if_ported(p, L_L4V6);
  label(p, L_ADDR6);
  emit(p, MOV32_IMM(BPF_REG_7, 0));
  label(p, L_PAIR6);
  fold6(p, 8, 0);
  fold6(p, 24, 1);
  JA(p, L_MIX);
  label(p, L_L4V6);
  emit(p, LD_ABS(BPF_H, 40));
  emit(p, MOV32_REG(BPF_REG_7, BPF_REG_0));
  emit(p, LD_ABS(BPF_H, 42));
  emit(p, MOV32_REG(BPF_REG_9, BPF_REG_0));
  by_ports(p, L_SRC6, L_DST6, L_PAIR6);
  label(p, L_SRC6);
  fold6(p, 8, 0);
  JA(p, L_MIX);
  label(p, L_DST6);
  fold6(p, 24, 0);
  emit(p, MOV32_REG(BPF_REG_7, BPF_REG_9));

  /* h = ((addr ^ seed) * φ ^ port) * murmur's c2; return h >> 16. */
  label(p, L_MIX);
  emit(p, ALU32_IMM(BPF_XOR, BPF_REG_8, (int32_t)seed));
  emit(p, ALU32_IMM(BPF_MUL, BPF_REG_8, (int32_t)0x9e3779b1u));
  emit(p, ALU32_REG(BPF_XOR, BPF_REG_8, BPF_REG_7));
  emit(p, ALU32_IMM(BPF_MUL, BPF_REG_8, (int32_t)0x85ebca6bu));
  emit(p, MOV32_REG(BPF_REG_0, BPF_REG_8));
  emit(p, ALU32_IMM(BPF_RSH, BPF_REG_0, 16));
  emit(p, EXIT());
  label(p, L_ZERO);
  emit(p, MOV32_IMM(BPF_REG_0, 0));
  emit(p, EXIT());

  for (int i = 0; i < p->nfix; i++) p->insn[p->fix[i].pc].off = (int16_t)(p->at[p->fix[i].label] - p->fix[i].pc - 1);
}

static int prog_load(const prog_t *p, char *log, size_t logsz) {
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  a.insns = (uint64_t)(uintptr_t)p->insn;
  a.insn_cnt = (uint32_t)p->n;
  a.license = (uint64_t)(uintptr_t) "GPL";
  a.log_buf = (uint64_t)(uintptr_t)log;
  a.log_size = (uint32_t)logsz;
  a.log_level = log ? 1 : 0;
  strncpy(a.prog_name, "uvs_steer", sizeof a.prog_name - 1);
  return (int)syscall(__NR_bpf, BPF_PROG_LOAD, &a, sizeof a);
}

/* "" on success, else the reason (why[n]). */
static void attach(int fd, uint32_t seed, char *why, size_t n) {
  prog_t p;
  build(&p, seed);
  if (p.overflow) {
    snprintf(why, n, "steering program does not fit its buffer");
    return;
  }
  int pfd = prog_load(&p, NULL, 0);
  if (pfd < 0) {
    int e = errno;
    /* Load again with the verifier's log for the reason (only on failure). */
    static char log[4096];
    log[0] = 0;
    if (e == EACCES || e == EINVAL) prog_load(&p, log, sizeof log);
    char *last = log;
    for (char *c = log; *c; c++)
      if (c[0] == '\n' && c[1]) last = c + 1;
    snprintf(why, n, "bpf(BPF_PROG_LOAD): %s%s%.120s", strerror(e), *last ? ": " : "", last);
    return;
  }
  if (ioctl(fd, TUNSETSTEERINGEBPF, &pfd) < 0) {
    snprintf(why, n, "ioctl(TUNSETSTEERINGEBPF): %s", strerror(errno));
    close(pfd);
    return;
  }
  /* The device holds its own reference to the program. */
  close(pfd);
  why[0] = 0;
}

static napi_value steer_attach(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], r;
  int32_t fd;
  uint32_t seed;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_uint32(env, argv[1], &seed) != napi_ok) {
    napi_throw_error(env, "UVS_ERR_TUN", "steerAttach(fd, seed): bad arguments");
    return NULL;
  }
  char why[240];
  attach(fd, seed, why, sizeof why);
  napi_create_string_utf8(env, why, NAPI_AUTO_LENGTH, &r);
  return r;
}

void uvs_steer_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "steerAttach", NULL, steer_attach, NULL, NULL, NULL, napi_default, NULL },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
