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
 * What the program does (lb/steering.ts is its specification, docs/steering.md the why): it keys
 * a packet on its *client's* endpoint, so that both directions of a masq connection — client →
 * VIP and real server → client — land on one queue, and every packet of one direction always on
 * the same queue:
 *   - TCP, UDP, SCTP (IPv4 unfragmented or first fragment; IPv6 without extension headers):
 *       to a VIP range: the source endpoint (a client's packet);
 *       to a full-NAT pool address: the whole 4-tuple (a real server's reply: the worker that
 *         opened the connection chose the pool port for it, lb/xmit.ts steeredPort);
 *       else (a masq reply, routed in by its real server's rule): the destination endpoint.
 *   - anything else (ICMP, later fragments, extension headers, other protocols): both addresses
 *     (xor) — stateless, so one direction of a pair always shares a queue.
 *   - not IPv4 or IPv6: queue 0.
 * The key's words — every address word, nothing folded — are hashed with HalfSipHash-1-3 under a
 * 64-bit key drawn at each start, so nobody who does not know it can choose sources that share
 * a queue. Any queue can serve any packet — the workers share the connection table — so the key
 * is an affinity, never a correctness condition.
 *
 * The kernel takes the program's value modulo the number of queues (a u16: tun_ebpf_select_queue):
 * the program returns the hash's high 16 bits.
 *
 * Exports (lb/tun.ts has the types):
 *   steerAttach(fd, k0, k1, table) -> "" when the program is attached to the device of queue fd,
 *     else why not (no bpf() for this process, a kernel without TUNSETSTEERINGEBPF, too many
 *     ranges): the device then keeps its automatic steering. table: STEER_ENTRY words per VIP
 *     range or pool address (lb/steering.ts steeringTable).
 *   steerLoad(k0, k1, table) -> the program's fd, not attached (tests and perf: steerRun).
 *   steerRun(progFd, packet, repeat) -> [value, ns]: the program run `repeat` times on the IP
 *     packet by the kernel (BPF_PROG_TEST_RUN), its value and the mean time of one run.
 */
#include <node_api.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef TUNSETSTEERINGEBPF
#define TUNSETSTEERINGEBPF _IOR('T', 224, int) /* Linux 4.16 */
#endif

/* Instruction builders (the kernel's include/linux/filter.h macros, written out here). */
#define I(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
#define MOV32_REG(d, s) I(BPF_ALU | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_REG(d, s) I(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV32_IMM(d, v) I(BPF_ALU | BPF_MOV | BPF_K, d, 0, 0, v)
#define ALU32_IMM(op, d, v) I(BPF_ALU | (op) | BPF_K, d, 0, 0, v)
#define ALU32_REG(op, d, s) I(BPF_ALU | (op) | BPF_X, d, s, 0, 0)
/* r0 = packet[off] (network byte order converted to host), r1-r5 clobbered; out of bounds: exit 0. */
#define LD_ABS(size, off) I(BPF_LD | (size) | BPF_ABS, 0, 0, 0, off)
#define LD_IND(size, s, off) I(BPF_LD | (size) | BPF_IND, 0, s, 0, off)
/* 32-bit stack slots: *(u32 *)(r10 + off) = s, d = *(u32 *)(r10 + off). */
#define STX_W(off, s) I(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, s, off, 0)
#define LDX_W(d, off) I(BPF_LDX | BPF_MEM | BPF_W, d, BPF_REG_10, off, 0)
#define EXIT() I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

/*
 * The table steerAttach takes: STEER_ENTRY uint32 words per VIP range or full-NAT pool address —
 * kind (STEER_VIP, STEER_POOL), family (4, 6), the network's four words, the mask's four (IPv4:
 * word 0 only), in network order as numbers. At most STEER_MAX entries: each costs the program
 * up to 17 instructions, and the verifier walks them all for every path.
 */
#define STEER_ENTRY 10
#define STEER_VIP 1
#define STEER_POOL 2
#define STEER_MAX 256

/*
 * Stack slots (offsets from r10): the source and destination address words, then the message
 * the hash absorbs — up to 9 words, always ending at M(8) — and its final word (the message's
 * length in bytes << 24 | the port, HalfSipHash's last block).
 */
#define S_SA(i) (-4 * (1 + (i)))
#define S_DA(i) (-4 * (5 + (i)))
#define S_M(i) (-4 * (9 + (i)))
#define S_B (-4 * 18)

/* Labels: a jump's offset is patched once its target is emitted. Ranges get labels of their own. */
enum {
  L_V6, L_ADDR4, L_L4V4, L_SRC4, L_TUPLE4, L_L4V6, L_SRC6, L_TUPLE6,
  L_HASH, L_ABS0, L_ZERO = L_ABS0 + 9, L_FIXED
};

typedef struct {
  struct bpf_insn *insn;
  int n, cap;
  int *at; /* label -> instruction index */
  int nlabels;
  struct {
    int pc, label;
  } *fix;
  int nfix, capfix;
  int overflow;
} prog_t;

static void emit(prog_t *p, struct bpf_insn i) {
  if (p->n < p->cap)
    p->insn[p->n++] = i;
  else
    p->overflow = 1;
}
static void label(prog_t *p, int l) { p->at[l] = p->n; }
static void jump(prog_t *p, uint8_t op, int src_is_reg, int dst, int src_or_imm, int l) {
  if (p->nfix >= p->capfix) {
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

/* r0 holds the transport protocol: jump to l when it has ports (TCP, UDP, SCTP). */
static void if_ported(prog_t *p, int l) {
  jump(p, BPF_JEQ, 0, BPF_REG_0, 6, l);
  jump(p, BPF_JEQ, 0, BPF_REG_0, 17, l);
  jump(p, BPF_JEQ, 0, BPF_REG_0, 132, l);
}

/* Stack slot from <- slot to, through r0. */
static void copy(prog_t *p, int to, int from) {
  emit(p, LDX_W(BPF_REG_0, from));
  emit(p, STX_W(to, BPF_REG_0));
}

/* B = (len << 24) | port register (0 when port < 0), and r9 = the message's words. */
static void finish_key(prog_t *p, int len, int port, int words) {
  if (port < 0)
    emit(p, MOV32_IMM(BPF_REG_0, len << 24));
  else {
    emit(p, MOV32_REG(BPF_REG_0, port));
    emit(p, ALU32_IMM(BPF_OR, BPF_REG_0, len << 24));
  }
  emit(p, STX_W(S_B, BPF_REG_0));
  emit(p, MOV32_IMM(BPF_REG_9, words));
  JA(p, L_HASH);
}

/* d = rotl(d, k), through r5. */
static void rotl(prog_t *p, int d, int k) {
  emit(p, MOV32_REG(BPF_REG_5, d));
  emit(p, ALU32_IMM(BPF_LSH, d, k));
  emit(p, ALU32_IMM(BPF_RSH, BPF_REG_5, 32 - k));
  emit(p, ALU32_REG(BPF_OR, d, BPF_REG_5));
}

/* HalfSipHash's round (net/siphash.ts HSIPROUND) on v0..v3 = r1..r4: 32 instructions. */
static void sipround(prog_t *p) {
  const int v0 = BPF_REG_1, v1 = BPF_REG_2, v2 = BPF_REG_3, v3 = BPF_REG_4;
  emit(p, ALU32_REG(BPF_ADD, v0, v1));
  rotl(p, v1, 5);
  emit(p, ALU32_REG(BPF_XOR, v1, v0));
  rotl(p, v0, 16);
  emit(p, ALU32_REG(BPF_ADD, v2, v3));
  rotl(p, v3, 8);
  emit(p, ALU32_REG(BPF_XOR, v3, v2));
  emit(p, ALU32_REG(BPF_ADD, v0, v3));
  rotl(p, v3, 7);
  emit(p, ALU32_REG(BPF_XOR, v3, v0));
  emit(p, ALU32_REG(BPF_ADD, v2, v1));
  rotl(p, v1, 13);
  emit(p, ALU32_REG(BPF_XOR, v1, v2));
  rotl(p, v2, 16);
}

/* Jumps to `to` when the address in slots S_DA matches table entry e (network & mask). */
static void if_dest_in(prog_t *p, const uint32_t *e, int to) {
  int words = e[1] == 6 ? 4 : 1;
  int next = p->nlabels++, compared = 0;
  for (int w = 0; w < words; w++) {
    uint32_t mask = e[6 + w];
    if (mask == 0) continue;
    compared = 1;
    emit(p, LDX_W(BPF_REG_0, S_DA(w)));
    if (mask != 0xffffffffu) emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, (int32_t)mask));
    /* A 64-bit compare: the constant zero-extended in a register (an immediate is sign-extended). */
    emit(p, MOV32_IMM(BPF_REG_1, (int32_t)(e[2 + w] & mask)));
    jump(p, BPF_JNE, 1, BPF_REG_0, BPF_REG_1, next);
  }
  if (compared)
    JA(p, to);
  else {
    /* A /0 takes every address, but an unconditional jump would leave what follows unreachable,
     * which the verifier refuses: a conditional one that is always taken. */
    emit(p, MOV32_IMM(BPF_REG_0, 0));
    jump(p, BPF_JEQ, 0, BPF_REG_0, 0, to);
  }
  label(p, next);
}

/* The table's entries of one family and kind, each a jump to `to` when the destination matches: how many. */
static int dest_rules(prog_t *p, const uint32_t *table, int entries, uint32_t family, uint32_t kind, int to) {
  int n = 0;
  for (int i = 0; i < entries; i++) {
    const uint32_t *e = table + i * STEER_ENTRY;
    if (e[0] == kind && e[1] == family) {
      if_dest_in(p, e, to);
      n++;
    }
  }
  return n;
}

/*
 * Registers: r6 the skb (LD_ABS needs it there), r7 the source port, r8 the destination port,
 * r9 the message's length in words; r1-r4 the hash's state, r5 a scratch. LD_ABS/LD_IND leave
 * their value in r0 and clobber r1-r5, so every packet word goes to the stack first.
 */
static void build(prog_t *p, uint32_t k0, uint32_t k1, const uint32_t *table, int entries) {
  p->n = p->nfix = p->overflow = 0;
  p->nlabels = L_FIXED;
  emit(p, MOV64_REG(BPF_REG_6, BPF_REG_1));
  emit(p, LD_ABS(BPF_B, 0));
  emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, 0xf0));
  jump(p, BPF_JEQ, 0, BPF_REG_0, 0x60, L_V6);
  jump(p, BPF_JNE, 0, BPF_REG_0, 0x40, L_ZERO);

  /* IPv4: a later fragment has no ports. */
  emit(p, LD_ABS(BPF_W, 12));
  emit(p, STX_W(S_SA(0), BPF_REG_0));
  emit(p, LD_ABS(BPF_W, 16));
  emit(p, STX_W(S_DA(0), BPF_REG_0));
  emit(p, LD_ABS(BPF_H, 6));
  emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, 0x1fff));
  jump(p, BPF_JNE, 0, BPF_REG_0, 0, L_ADDR4);
  emit(p, LD_ABS(BPF_B, 9));
  if_ported(p, L_L4V4);
  label(p, L_ADDR4);
  emit(p, LDX_W(BPF_REG_0, S_SA(0)));
  emit(p, LDX_W(BPF_REG_1, S_DA(0)));
  emit(p, ALU32_REG(BPF_XOR, BPF_REG_0, BPF_REG_1));
  emit(p, STX_W(S_M(8), BPF_REG_0));
  finish_key(p, 6, -1, 1);

  label(p, L_L4V4);
  emit(p, LD_ABS(BPF_B, 0));
  emit(p, ALU32_IMM(BPF_AND, BPF_REG_0, 0x0f));
  emit(p, ALU32_IMM(BPF_LSH, BPF_REG_0, 2));
  emit(p, MOV32_REG(BPF_REG_9, BPF_REG_0));
  emit(p, LD_IND(BPF_H, BPF_REG_9, 0));
  emit(p, MOV32_REG(BPF_REG_7, BPF_REG_0));
  emit(p, LD_IND(BPF_H, BPF_REG_9, 2));
  emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
  int vip4 = dest_rules(p, table, entries, 4, STEER_VIP, L_SRC4);
  int pool4 = dest_rules(p, table, entries, 4, STEER_POOL, L_TUPLE4);
  /* Neither: a masq reply, keyed on its destination, the client. */
  copy(p, S_M(8), S_DA(0));
  finish_key(p, 6, BPF_REG_8, 1);
  /* Only where something jumps to it: the verifier refuses unreachable instructions. */
  if (vip4) {
    label(p, L_SRC4);
    copy(p, S_M(8), S_SA(0));
    finish_key(p, 6, BPF_REG_7, 1);
  }
  if (pool4) {
    label(p, L_TUPLE4);
    copy(p, S_M(6), S_SA(0));
    copy(p, S_M(7), S_DA(0));
    emit(p, MOV32_REG(BPF_REG_0, BPF_REG_7));
    emit(p, ALU32_IMM(BPF_LSH, BPF_REG_0, 16));
    emit(p, ALU32_REG(BPF_OR, BPF_REG_0, BPF_REG_8));
    emit(p, STX_W(S_M(8), BPF_REG_0));
    finish_key(p, 12, -1, 3);
  }

  /* IPv6: ports only when the transport header follows the fixed header. */
  label(p, L_V6);
  for (int w = 0; w < 4; w++) {
    emit(p, LD_ABS(BPF_W, 8 + 4 * w));
    emit(p, STX_W(S_SA(w), BPF_REG_0));
    emit(p, LD_ABS(BPF_W, 24 + 4 * w));
    emit(p, STX_W(S_DA(w), BPF_REG_0));
  }
  emit(p, LD_ABS(BPF_B, 6));
  if_ported(p, L_L4V6);
  for (int w = 0; w < 4; w++) {
    emit(p, LDX_W(BPF_REG_0, S_SA(w)));
    emit(p, LDX_W(BPF_REG_1, S_DA(w)));
    emit(p, ALU32_REG(BPF_XOR, BPF_REG_0, BPF_REG_1));
    emit(p, STX_W(S_M(5 + w), BPF_REG_0));
  }
  finish_key(p, 18, -1, 4);
  label(p, L_L4V6);
  emit(p, LD_ABS(BPF_H, 40));
  emit(p, MOV32_REG(BPF_REG_7, BPF_REG_0));
  emit(p, LD_ABS(BPF_H, 42));
  emit(p, MOV32_REG(BPF_REG_8, BPF_REG_0));
  int vip6 = dest_rules(p, table, entries, 6, STEER_VIP, L_SRC6);
  int pool6 = dest_rules(p, table, entries, 6, STEER_POOL, L_TUPLE6);
  for (int w = 0; w < 4; w++) copy(p, S_M(5 + w), S_DA(w));
  finish_key(p, 18, BPF_REG_8, 4);
  if (vip6) {
    label(p, L_SRC6);
    for (int w = 0; w < 4; w++) copy(p, S_M(5 + w), S_SA(w));
    finish_key(p, 18, BPF_REG_7, 4);
  }
  if (pool6) {
    label(p, L_TUPLE6);
    for (int w = 0; w < 4; w++) {
      copy(p, S_M(w), S_SA(w));
      copy(p, S_M(4 + w), S_DA(w));
    }
    emit(p, MOV32_REG(BPF_REG_0, BPF_REG_7));
    emit(p, ALU32_IMM(BPF_LSH, BPF_REG_0, 16));
    emit(p, ALU32_REG(BPF_OR, BPF_REG_0, BPF_REG_8));
    emit(p, STX_W(S_M(8), BPF_REG_0));
    finish_key(p, 36, -1, 9);
  }

  /*
   * HalfSipHash-1-3 (net/siphash.ts HalfSipHash) of the message M(9 - r9) .. M(8), then B: the
   * state from the key, one round per word (entered at the message's first word), B absorbed as
   * the last block and three finalization rounds; the value is the hash's high 16 bits.
   */
  label(p, L_HASH);
  emit(p, MOV32_IMM(BPF_REG_1, (int32_t)k0));
  emit(p, MOV32_IMM(BPF_REG_2, (int32_t)k1));
  emit(p, MOV32_IMM(BPF_REG_3, (int32_t)(0x6c796765u ^ k0)));
  emit(p, MOV32_IMM(BPF_REG_4, (int32_t)(0x74656462u ^ k1)));
  jump(p, BPF_JEQ, 0, BPF_REG_9, 1, L_ABS0 + 8);
  jump(p, BPF_JEQ, 0, BPF_REG_9, 3, L_ABS0 + 6);
  jump(p, BPF_JEQ, 0, BPF_REG_9, 4, L_ABS0 + 5);
  for (int m = 0; m < 9; m++) {
    label(p, L_ABS0 + m);
    emit(p, LDX_W(BPF_REG_0, S_M(m)));
    emit(p, ALU32_REG(BPF_XOR, BPF_REG_4, BPF_REG_0));
    sipround(p);
    emit(p, ALU32_REG(BPF_XOR, BPF_REG_1, BPF_REG_0));
  }
  emit(p, LDX_W(BPF_REG_0, S_B));
  emit(p, ALU32_REG(BPF_XOR, BPF_REG_4, BPF_REG_0));
  sipround(p);
  emit(p, ALU32_REG(BPF_XOR, BPF_REG_1, BPF_REG_0));
  emit(p, ALU32_IMM(BPF_XOR, BPF_REG_3, 0xff));
  sipround(p);
  sipround(p);
  sipround(p);
  emit(p, MOV32_REG(BPF_REG_0, BPF_REG_2));
  emit(p, ALU32_REG(BPF_XOR, BPF_REG_0, BPF_REG_4));
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

/* Builds the program for (k0, k1, table) and loads it: its fd, or -1 with the reason in why[n]. */
static int load(uint32_t k0, uint32_t k1, const uint32_t *table, int entries, char *why, size_t n) {
  if (entries < 0 || entries > STEER_MAX) {
    snprintf(why, n, "steering program: %d VIP ranges and full-NAT addresses, at most %d", entries, STEER_MAX);
    return -1;
  }
  prog_t p;
  memset(&p, 0, sizeof p);
  p.cap = 800 + 17 * entries;
  p.capfix = 64 + 6 * entries;
  p.insn = calloc((size_t)p.cap, sizeof *p.insn);
  p.fix = calloc((size_t)p.capfix, sizeof *p.fix);
  p.at = calloc((size_t)(L_FIXED + entries), sizeof *p.at);
  int pfd = -1;
  if (!p.insn || !p.fix || !p.at) {
    snprintf(why, n, "steering program: out of memory");
    goto out;
  }
  build(&p, k0, k1, table, entries);
  if (p.overflow) {
    snprintf(why, n, "steering program does not fit its buffer");
    goto out;
  }
  pfd = prog_load(&p, NULL, 0);
  if (pfd < 0) {
    int e = errno;
    /* Load again with the verifier's log for the reason (only on failure). */
    static char log[4096];
    log[0] = 0;
    if (e == EACCES || e == EINVAL) prog_load(&p, log, sizeof log);
    /* The reason is the last line before the verifier's statistics ("processed N insns ..."). */
    char *last = log, *line = log;
    for (char *c = log;; c++) {
      if (*c == '\n' || !*c) {
        if (c > line && strncmp(line, "processed ", 10) != 0) last = line;
        if (!*c) break;
        line = c + 1;
      }
    }
    int len = (int)strcspn(last, "\n");
    snprintf(why, n, "bpf(BPF_PROG_LOAD): %s%s%.*s", strerror(e), len ? ": " : "", len < 120 ? len : 120, last);
  }
out:
  free(p.insn);
  free(p.fix);
  free(p.at);
  return pfd;
}

/* "" on success, else the reason (why[n]). */
static void attach(int fd, uint32_t k0, uint32_t k1, const uint32_t *table, int entries, char *why, size_t n) {
  int pfd = load(k0, k1, table, entries, why, n);
  if (pfd < 0) return;
  if (ioctl(fd, TUNSETSTEERINGEBPF, &pfd) < 0) {
    snprintf(why, n, "ioctl(TUNSETSTEERINGEBPF): %s", strerror(errno));
    close(pfd);
    return;
  }
  /* The device holds its own reference to the program. */
  close(pfd);
  why[0] = 0;
}

/* (k0, k1, table) from argv[at..at+2]: 0 when they are not two numbers and a Uint32Array of whole entries. */
static int key_args(napi_env env, napi_value *argv, uint32_t *k0, uint32_t *k1, const uint32_t **table, int *entries) {
  napi_typedarray_type t;
  size_t len, off;
  void *data;
  napi_value ab;
  if (napi_get_value_uint32(env, argv[0], k0) != napi_ok || napi_get_value_uint32(env, argv[1], k1) != napi_ok) return 0;
  if (napi_get_typedarray_info(env, argv[2], &t, &len, &data, &ab, &off) != napi_ok || t != napi_uint32_array) return 0;
  if (len % STEER_ENTRY) return 0;
  *table = data;
  *entries = (int)(len / STEER_ENTRY);
  return 1;
}

static napi_value steer_attach(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], r;
  int32_t fd;
  uint32_t k0, k1;
  const uint32_t *table;
  int entries;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || !key_args(env, argv + 1, &k0, &k1, &table, &entries)) {
    napi_throw_error(env, "UVS_ERR_TUN", "steerAttach(fd, k0, k1, table): bad arguments");
    return NULL;
  }
  char why[240];
  attach(fd, k0, k1, table, entries, why, sizeof why);
  napi_create_string_utf8(env, why, NAPI_AUTO_LENGTH, &r);
  return r;
}

static napi_value steer_load(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], r;
  uint32_t k0, k1;
  const uint32_t *table;
  int entries;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || !key_args(env, argv, &k0, &k1, &table, &entries)) {
    napi_throw_error(env, "UVS_ERR_TUN", "steerLoad(k0, k1, table): bad arguments");
    return NULL;
  }
  char why[240];
  int pfd = load(k0, k1, table, entries, why, sizeof why);
  if (pfd < 0) {
    napi_throw_error(env, "UVS_ERR_TUN", why);
    return NULL;
  }
  napi_create_int32(env, pfd, &r);
  return r;
}

/* [value, ns]: the program of progFd run `repeat` times on the IP packet (BPF_PROG_TEST_RUN). */
static napi_value steer_run(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], r, x;
  int32_t pfd;
  uint32_t repeat;
  napi_typedarray_type t;
  size_t len, off;
  void *data;
  napi_value ab;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || napi_get_value_int32(env, argv[0], &pfd) != napi_ok ||
      napi_get_typedarray_info(env, argv[1], &t, &len, &data, &ab, &off) != napi_ok || t != napi_uint8_array || len < 1 ||
      len > 2048 || napi_get_value_uint32(env, argv[2], &repeat) != napi_ok) {
    napi_throw_error(env, "UVS_ERR_TUN", "steerRun(progFd, packet, repeat): bad arguments");
    return NULL;
  }
  /* The kernel builds the skb from an Ethernet frame and pulls the header (eth_type_trans), so
   * the program sees the IP header at offset 0, as on the device. */
  uint8_t frame[14 + 2048];
  memset(frame, 0, 14);
  frame[12] = (((const uint8_t *)data)[0] >> 4) == 6 ? 0x86 : 0x08;
  frame[13] = frame[12] == 0x86 ? 0xdd : 0x00;
  memcpy(frame + 14, data, len);
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.test.prog_fd = (uint32_t)pfd;
  a.test.data_in = (uint64_t)(uintptr_t)frame;
  a.test.data_size_in = (uint32_t)(14 + len);
  a.test.repeat = repeat;
  if (syscall(__NR_bpf, BPF_PROG_TEST_RUN, &a, sizeof a) < 0) {
    char msg[120];
    snprintf(msg, sizeof msg, "bpf(BPF_PROG_TEST_RUN): %s", strerror(errno));
    napi_throw_error(env, "UVS_ERR_TUN", msg);
    return NULL;
  }
  napi_create_array_with_length(env, 2, &r);
  napi_create_uint32(env, a.test.retval, &x);
  napi_set_element(env, r, 0, x);
  napi_create_uint32(env, a.test.duration, &x);
  napi_set_element(env, r, 1, x);
  return r;
}

void uvs_steer_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "steerAttach", NULL, steer_attach, NULL, NULL, NULL, napi_default, NULL },
    { "steerLoad", NULL, steer_load, NULL, NULL, NULL, napi_default, NULL },
    { "steerRun", NULL, steer_run, NULL, NULL, NULL, napi_default, NULL },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
