/*
 * uvs TUN addon, io_uring I/O path: one ring per worker thread, raw syscalls (no liburing).
 *
 * Why: the poll path costs poll + read + read(EAGAIN) + write per request/response packet — four
 * syscalls where the minimal C forwarder (perf/peers/ctun.c) needs two. Here one io_uring_enter
 * submits the batch's writes, hands the consumed buffers back, waits for the next packets and
 * reaps them: one syscall per batch, so at most one per packet and fewer under load.
 *
 * How:
 *   - One multishot read (IORING_OP_READ_MULTISHOT, Linux 6.7) stays armed on the queue's fd.
 *     It picks its buffers from a provided-buffer ring (IORING_REGISTER_PBUF_RING) whose
 *     buffers are the worker's receive slots: slot i is buf[i*slot, (i+1)*slot). Each packet is
 *     one CQE naming its slot (buffer id). Reads run in this thread only, inside
 *     io_uring_enter (IORING_SETUP_DEFER_TASKRUN | SINGLE_ISSUER): a packet arriving wakes the
 *     waiting worker and is copied when it runs, never behind its back.
 *   - A slot is out of the buffer ring while the worker holds it (from its CQE to the next
 *     uringWait) and while any write from it (the slot itself, or its out slot
 *     outBase + i*outSlot) is in flight: a slot goes back only when both are over, so the kernel
 *     never reads into bytes a write still needs, and JS never rewrites an out slot in flight.
 *   - Writes are IORING_OP_WRITE, one per packet; their results come back as CQEs and are
 *     counted here (io[]), since they may complete after the call that queued them.
 *   - The wait asks for (writes in flight + 1) completions: the writes' own CQEs, posted during
 *     the same enter when the write completes inline, must not end the wait for packets.
 *
 * Exports (lb/tun.ts has the types):
 *   uringProbe() -> "" when this kernel gives this process all of the above, else the reason.
 *   uringOpen(fd, buf, lens, slots, io, slot, nbufs, outSlot) -> handle (throws UVS_ERR_TUN).
 *     io: Float64Array; write results are added to io[0] packets, io[1] bytes, io[2] errors (the
 *     caller takes and zeroes them); with a 4th element, every uringWait leaves the wall clock
 *     there (io[3], ms as Date.now()) — the worker's clock without a Date.now() per loop turn,
 *     which allocates a heap number each call (V8's runtime call), so a busy worker scavenged.
 *   uringWait(h, timeoutMs, wait) -> packets (packet k: slot slots[k], length lens[k]); −errno.
 *   uringWrite(h, offs, lens, count) -> writes queued (submitted by the next uringWait/Submit).
 *   uringSubmit(h) -> submits queued writes without waiting (before the worker yields).
 *   uringClose(h): cancels the read, waits for writes in flight, frees the ring. Also run by an
 *     env cleanup hook when the worker thread ends without it: the kernel must not write into a
 *     buffer after its ArrayBuffer is freed. The buffers are pinned by a reference until then.
 */
#include <node_api.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef IORING_OP_READ_MULTISHOT
#define IORING_OP_READ_MULTISHOT 49 /* Linux 6.7; the 6.1 uapi headers of Debian 12 lack it */
#endif

/* user_data: reads are RD_TAG, the cancel CANCEL_TAG; a write carries WR_BIT, its slot and length. */
#define RD_TAG 1ULL
#define CANCEL_TAG 2ULL
#define WR_BIT (1ULL << 63)
#define BGID 0

double uvs_wall_ms(void); /* tun.c */

typedef struct {
  int ring_fd;
  int fd;
  napi_env env;
  napi_ref buf_ref, lens_ref, slots_ref, io_ref;
  uint8_t *buf;
  size_t buf_bytes;
  int32_t *lens, *slots;
  double *io;
  /* io[3] is there: uringWait writes the wall clock into it. */
  bool io_clock;
  int32_t slot, nbufs, out_slot;
  size_t out_base;
  /* SQ */
  void *sq_map, *cq_map;
  size_t sq_map_sz, cq_map_sz;
  struct io_uring_sqe *sqes;
  size_t sqes_sz;
  unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
  unsigned sq_entries, sq_local_tail;
  /* CQ */
  unsigned *cq_head, *cq_tail, *cq_mask;
  unsigned cq_entries;
  struct io_uring_cqe *cqes;
  /* buffer ring */
  struct io_uring_buf_ring *br;
  unsigned br_entries, br_tail;
  /* slot state */
  uint8_t *held;
  int32_t *pending;
  int32_t inflight;
  int armed;
  int read_err;
  int closed;
} uring_t;

static int sys_setup(unsigned entries, struct io_uring_params *p) {
  return (int)syscall(__NR_io_uring_setup, entries, p);
}
static int sys_enter(int fd, unsigned submit, unsigned min, unsigned flags, void *arg, size_t argsz) {
  return (int)syscall(__NR_io_uring_enter, fd, submit, min, flags, arg, argsz);
}
static int sys_register(int fd, unsigned op, void *arg, unsigned n) {
  return (int)syscall(__NR_io_uring_register, fd, op, arg, n);
}

static napi_value ret_i32(napi_env env, int32_t v) {
  napi_value r;
  napi_create_int32(env, v, &r);
  return r;
}

static napi_value ret_str(napi_env env, const char *s) {
  napi_value r;
  napi_create_string_utf8(env, s, NAPI_AUTO_LENGTH, &r);
  return r;
}

static napi_value throw_msg(napi_env env, const char *msg) {
  napi_throw_error(env, "UVS_ERR_TUN", msg);
  return NULL;
}

/* Typed array data and byte length; kind: 1 = Uint8, 4 = Int32, 8 = Float64. */
static int typed(napi_env env, napi_value v, int kind, void **data, size_t *bytes) {
  napi_typedarray_type t;
  size_t len, off;
  napi_value ab;
  if (napi_get_typedarray_info(env, v, &t, &len, data, &ab, &off) != napi_ok) return 0;
  if (kind == 1 && t == napi_uint8_array) *bytes = len;
  else if (kind == 4 && t == napi_int32_array) *bytes = len * 4;
  else if (kind == 8 && t == napi_float64_array) *bytes = len * 8;
  else return 0;
  return 1;
}

static const unsigned SETUP_FLAGS = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE;

/* Checks what the ring needs: setup with these flags (seccomp, kernel.io_uring_disabled and
 * pre-6.1 kernels refuse), EXT_ARG (wait with a timeout), the ops, and buffer rings. */
static void probe(char *why, size_t n) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = SETUP_FLAGS;
  p.cq_entries = 8;
  int fd = sys_setup(4, &p);
  if (fd < 0) {
    snprintf(why, n, "io_uring_setup: %s", strerror(errno));
    return;
  }
  why[0] = 0;
  if (!(p.features & IORING_FEAT_EXT_ARG) || !(p.features & IORING_FEAT_NODROP)) {
    snprintf(why, n, "io_uring lacks IORING_FEAT_EXT_ARG/NODROP (Linux 5.11)");
    close(fd);
    return;
  }
  size_t psz = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
  struct io_uring_probe *pr = calloc(1, psz);
  if (!pr || sys_register(fd, IORING_REGISTER_PROBE, pr, 256) < 0) {
    snprintf(why, n, "IORING_REGISTER_PROBE: %s", strerror(pr ? errno : ENOMEM));
  } else {
    const int ops[] = { IORING_OP_READ_MULTISHOT, IORING_OP_WRITE, IORING_OP_ASYNC_CANCEL };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
      if (ops[i] > pr->last_op || !(pr->ops[ops[i]].flags & IO_URING_OP_SUPPORTED)) {
        snprintf(why, n, "io_uring op %d unsupported (READ_MULTISHOT needs Linux 6.7)", ops[i]);
        break;
      }
    }
  }
  free(pr);
  close(fd);
}

static napi_value uring_probe(napi_env env, napi_callback_info info) {
  char why[160];
  probe(why, sizeof why);
  return ret_str(env, why);
}

static void br_push(uring_t *u, int32_t s) {
  struct io_uring_buf *b = &u->br->bufs[u->br_tail & (u->br_entries - 1)];
  b->addr = (uint64_t)(uintptr_t)(u->buf + (size_t)s * (size_t)u->slot);
  b->len = (uint32_t)u->slot;
  b->bid = (uint16_t)s;
  u->br_tail++;
  __atomic_store_n(&u->br->tail, (uint16_t)u->br_tail, __ATOMIC_RELEASE);
}

static unsigned sq_space(uring_t *u) {
  return u->sq_entries - (u->sq_local_tail - __atomic_load_n(u->sq_head, __ATOMIC_ACQUIRE));
}

static unsigned sq_unsubmitted(uring_t *u) {
  return u->sq_local_tail - __atomic_load_n(u->sq_head, __ATOMIC_ACQUIRE);
}

/* Next free SQE, zeroed; submits what is queued first when the SQ is full (no wait). */
static struct io_uring_sqe *sqe_get(uring_t *u) {
  if (sq_space(u) == 0) {
    sys_enter(u->ring_fd, sq_unsubmitted(u), 0, 0, NULL, 0);
    if (sq_space(u) == 0) return NULL;
  }
  unsigned idx = u->sq_local_tail & *u->sq_mask;
  struct io_uring_sqe *e = &u->sqes[idx];
  memset(e, 0, sizeof *e);
  u->sq_array[idx] = idx;
  return e;
}

static void sqe_commit(uring_t *u) {
  u->sq_local_tail++;
  __atomic_store_n(u->sq_tail, u->sq_local_tail, __ATOMIC_RELEASE);
}

static void arm_read(uring_t *u) {
  struct io_uring_sqe *e = sqe_get(u);
  if (!e) return;
  e->opcode = IORING_OP_READ_MULTISHOT;
  e->fd = u->fd;
  e->flags = IOSQE_BUFFER_SELECT;
  e->buf_group = BGID;
  e->off = 0;
  e->len = 0; /* each read takes its buffer's length */
  e->user_data = RD_TAG;
  sqe_commit(u);
  u->armed = 1;
}

/* A slot goes back to the buffer ring once the worker let go of it and no write needs it. */
static void maybe_return(uring_t *u, int32_t s) {
  if (!u->held[s] && u->pending[s] == 0) br_push(u, s);
}

/* Reaps CQEs: packets into lens/slots (at most nbufs, which is all there can be), write results
 * into io[] (packets, bytes, errors). Returns packets. */
static int32_t reap(uring_t *u) {
  unsigned head = *u->cq_head;
  unsigned tail = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
  int32_t n = 0;
  while (head != tail) {
    struct io_uring_cqe *c = &u->cqes[head & *u->cq_mask];
    uint64_t ud = c->user_data;
    if (ud & WR_BIT) {
      int32_t s = (int32_t)((ud >> 32) & 0xffff);
      u->inflight--;
      if (c->res > 0) {
        u->io[0] += 1;
        u->io[1] += c->res;
      } else {
        u->io[2] += 1;
      }
      if (s < u->nbufs && --u->pending[s] == 0) maybe_return(u, s);
    } else if (ud == RD_TAG) {
      if (!(c->flags & IORING_CQE_F_MORE)) u->armed = 0;
      if (c->flags & IORING_CQE_F_BUFFER) {
        int32_t s = (int32_t)(c->flags >> IORING_CQE_BUFFER_SHIFT);
        if (s < u->nbufs) {
          if (c->res > 0 && n < u->nbufs) {
            u->held[s] = 1;
            u->lens[n] = c->res > u->slot ? u->slot : c->res;
            u->slots[n] = s;
            n++;
          } else {
            maybe_return(u, s);
          }
        }
      }
      /* Out of buffers (all held or in flight): re-armed when some come back. A cancel at close
       * is expected; anything else is the device's error, reported by uringWait. */
      if (c->res < 0 && c->res != -ENOBUFS && c->res != -ECANCELED && c->res != -EAGAIN && c->res != -EINTR) u->read_err = -c->res;
    }
    head++;
  }
  __atomic_store_n(u->cq_head, head, __ATOMIC_RELEASE);
  return n;
}

static void release_held(uring_t *u) {
  for (int32_t s = 0; s < u->nbufs; s++) {
    if (u->held[s]) {
      u->held[s] = 0;
      maybe_return(u, s);
    }
  }
}

static void free_ring(uring_t *u) {
  if (u->br) {
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof reg);
    reg.bgid = BGID;
    if (u->ring_fd >= 0) sys_register(u->ring_fd, IORING_UNREGISTER_PBUF_RING, &reg, 1);
    free(u->br);
    u->br = NULL;
  }
  if (u->sqes && u->sqes != MAP_FAILED) munmap(u->sqes, u->sqes_sz);
  if (u->cq_map && u->cq_map != MAP_FAILED && u->cq_map != u->sq_map) munmap(u->cq_map, u->cq_map_sz);
  if (u->sq_map && u->sq_map != MAP_FAILED) munmap(u->sq_map, u->sq_map_sz);
  u->sqes = NULL;
  u->sq_map = u->cq_map = NULL;
  if (u->ring_fd >= 0) close(u->ring_fd);
  u->ring_fd = -1;
  free(u->held);
  free(u->pending);
  u->held = NULL;
  u->pending = NULL;
}

/* Cancels the read and waits (bounded: 2 s) until nothing the kernel may still do touches buf. */
static void shutdown_ring(uring_t *u) {
  if (u->closed) return;
  u->closed = 1;
  if (u->ring_fd >= 0 && u->sqes) {
    struct io_uring_sqe *e = sqe_get(u);
    if (e) {
      e->opcode = IORING_OP_ASYNC_CANCEL;
      e->fd = -1;
      e->cancel_flags = IORING_ASYNC_CANCEL_ANY;
      e->user_data = CANCEL_TAG;
      sqe_commit(u);
    }
    for (int i = 0; i < 20 && (u->armed || u->inflight > 0); i++) {
      struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000000L };
      struct io_uring_getevents_arg a = { .sigmask = 0, .sigmask_sz = _NSIG / 8, .ts = (uint64_t)(uintptr_t)&ts };
      sys_enter(u->ring_fd, sq_unsubmitted(u), 1, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &a, sizeof a);
      reap(u);
    }
  }
  free_ring(u);
  if (u->env) {
    if (u->buf_ref) napi_delete_reference(u->env, u->buf_ref);
    if (u->lens_ref) napi_delete_reference(u->env, u->lens_ref);
    if (u->slots_ref) napi_delete_reference(u->env, u->slots_ref);
    if (u->io_ref) napi_delete_reference(u->env, u->io_ref);
  }
  u->buf_ref = u->lens_ref = u->slots_ref = u->io_ref = NULL;
}

static void cleanup_hook(void *arg) {
  uring_t *u = arg;
  shutdown_ring(u);
  u->env = NULL;
}

static void finalize(napi_env env, void *data, void *hint) {
  uring_t *u = data;
  if (!u->closed) {
    napi_remove_env_cleanup_hook(env, cleanup_hook, u);
    shutdown_ring(u);
  }
  free(u);
}

static int setup_ring(uring_t *u, unsigned entries, char *why, size_t n) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = SETUP_FLAGS;
  /* Every packet of a full buffer ring, every write in flight and the read's end fit at once. */
  p.cq_entries = 4 * entries;
  u->ring_fd = sys_setup(entries, &p);
  if (u->ring_fd < 0) {
    snprintf(why, n, "io_uring_setup: %s", strerror(errno));
    return 0;
  }
  u->sq_map_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  u->cq_map_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  if (p.features & IORING_FEAT_SINGLE_MMAP) {
    if (u->cq_map_sz > u->sq_map_sz) u->sq_map_sz = u->cq_map_sz;
  }
  u->sq_map = mmap(NULL, u->sq_map_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->ring_fd, IORING_OFF_SQ_RING);
  if (u->sq_map == MAP_FAILED) {
    snprintf(why, n, "mmap SQ ring: %s", strerror(errno));
    return 0;
  }
  if (p.features & IORING_FEAT_SINGLE_MMAP) {
    u->cq_map = u->sq_map;
  } else {
    u->cq_map = mmap(NULL, u->cq_map_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->ring_fd, IORING_OFF_CQ_RING);
    if (u->cq_map == MAP_FAILED) {
      snprintf(why, n, "mmap CQ ring: %s", strerror(errno));
      return 0;
    }
  }
  u->sqes_sz = p.sq_entries * sizeof(struct io_uring_sqe);
  u->sqes = mmap(NULL, u->sqes_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->ring_fd, IORING_OFF_SQES);
  if (u->sqes == MAP_FAILED) {
    snprintf(why, n, "mmap SQEs: %s", strerror(errno));
    return 0;
  }
  uint8_t *sq = u->sq_map, *cq = u->cq_map;
  u->sq_head = (unsigned *)(sq + p.sq_off.head);
  u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
  u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
  u->sq_array = (unsigned *)(sq + p.sq_off.array);
  u->sq_entries = p.sq_entries;
  u->sq_local_tail = *u->sq_tail;
  u->cq_head = (unsigned *)(cq + p.cq_off.head);
  u->cq_tail = (unsigned *)(cq + p.cq_off.tail);
  u->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
  u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
  u->cq_entries = p.cq_entries;

  /* The buffer ring: a power of two of entries, page aligned, every receive slot in it. */
  u->br_entries = 1;
  while (u->br_entries < (unsigned)u->nbufs) u->br_entries <<= 1;
  size_t brsz = u->br_entries * sizeof(struct io_uring_buf);
  long page = sysconf(_SC_PAGESIZE);
  if (brsz < (size_t)page) brsz = (size_t)page;
  if (posix_memalign((void **)&u->br, (size_t)page, brsz) != 0) {
    u->br = NULL;
    snprintf(why, n, "buffer ring: out of memory");
    return 0;
  }
  memset(u->br, 0, brsz);
  struct io_uring_buf_reg reg;
  memset(&reg, 0, sizeof reg);
  reg.ring_addr = (uint64_t)(uintptr_t)u->br;
  reg.ring_entries = u->br_entries;
  reg.bgid = BGID;
  if (sys_register(u->ring_fd, IORING_REGISTER_PBUF_RING, &reg, 1) < 0) {
    snprintf(why, n, "IORING_REGISTER_PBUF_RING: %s", strerror(errno));
    free(u->br);
    u->br = NULL;
    return 0;
  }
  u->br_tail = 0;
  for (int32_t s = 0; s < u->nbufs; s++) br_push(u, s);
  return 1;
}

static napi_value uring_open(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  int32_t fd, slot, nbufs, out_slot;
  void *buf, *lens, *slots, *io;
  size_t buf_bytes, lens_bytes, slots_bytes, io_bytes;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 8 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || !typed(env, argv[1], 1, &buf, &buf_bytes) ||
      !typed(env, argv[2], 4, &lens, &lens_bytes) || !typed(env, argv[3], 4, &slots, &slots_bytes) ||
      !typed(env, argv[4], 8, &io, &io_bytes) || napi_get_value_int32(env, argv[5], &slot) != napi_ok ||
      napi_get_value_int32(env, argv[6], &nbufs) != napi_ok || napi_get_value_int32(env, argv[7], &out_slot) != napi_ok ||
      slot <= 0 || nbufs <= 0 || nbufs > 32768 || out_slot <= 0 || lens_bytes / 4 < (size_t)nbufs ||
      slots_bytes / 4 < (size_t)nbufs || io_bytes / 8 < 3 || (size_t)nbufs * (size_t)slot > buf_bytes) {
    return throw_msg(env, "uringOpen(fd, buf, lens, slots, io, slot, nbufs, outSlot): bad arguments");
  }
  uring_t *u = calloc(1, sizeof *u);
  if (!u) return throw_msg(env, "uringOpen: out of memory");
  u->ring_fd = -1;
  u->fd = fd;
  u->env = env;
  u->buf = buf;
  u->buf_bytes = buf_bytes;
  u->lens = lens;
  u->slots = slots;
  u->io = io;
  u->io_clock = io_bytes / 8 >= 4;
  u->slot = slot;
  u->nbufs = nbufs;
  u->out_slot = out_slot;
  u->out_base = (size_t)nbufs * (size_t)slot;
  u->held = calloc((size_t)nbufs, 1);
  u->pending = calloc((size_t)nbufs, sizeof(int32_t));
  char why[200];
  snprintf(why, sizeof why, "out of memory");
  /* SQ: the read, a batch of writes and their segments before the SQ has to be flushed. */
  unsigned entries = 64;
  while (entries < 2 * (unsigned)nbufs) entries <<= 1;
  if (!u->held || !u->pending || !setup_ring(u, entries, why, sizeof why)) {
    free_ring(u);
    free(u);
    char msg[240];
    snprintf(msg, sizeof msg, "uringOpen: %s", why);
    return throw_msg(env, msg);
  }
  /* Pin the memory the kernel and this struct point into until the ring is gone. */
  napi_create_reference(env, argv[1], 1, &u->buf_ref);
  napi_create_reference(env, argv[2], 1, &u->lens_ref);
  napi_create_reference(env, argv[3], 1, &u->slots_ref);
  napi_create_reference(env, argv[4], 1, &u->io_ref);
  napi_add_env_cleanup_hook(env, cleanup_hook, u);
  arm_read(u);
  napi_value ext;
  if (napi_create_external(env, u, finalize, NULL, &ext) != napi_ok) {
    napi_remove_env_cleanup_hook(env, cleanup_hook, u);
    shutdown_ring(u);
    free(u);
    return throw_msg(env, "uringOpen: napi_create_external failed");
  }
  return ext;
}

static uring_t *handle(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok || !p) return NULL;
  uring_t *u = p;
  return u->closed ? NULL : u;
}

static napi_value uring_wait(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t timeout;
  bool wait = true;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  uring_t *u = argc >= 3 ? handle(env, argv[0]) : NULL;
  if (!u || napi_get_value_int32(env, argv[1], &timeout) != napi_ok || napi_get_value_bool(env, argv[2], &wait) != napi_ok) {
    return throw_msg(env, "uringWait(handle, timeoutMs, wait): bad arguments");
  }
  release_held(u);
  if (!u->armed) {
    u->read_err = 0;
    arm_read(u);
  }
  struct __kernel_timespec ts = { .tv_sec = timeout / 1000, .tv_nsec = (long)(timeout % 1000) * 1000000L };
  struct io_uring_getevents_arg a = { .sigmask = 0, .sigmask_sz = _NSIG / 8, .ts = (uint64_t)(uintptr_t)&ts };
  unsigned min = wait && timeout != 0 ? (unsigned)u->inflight + 1 : 0;
  /* A batch of tunnelled super-packets can queue more writes (up to 128 segments each) than the
   * CQ holds: wait for a full CQ at most, reap, and wait again. */
  if (min > u->cq_entries) min = u->cq_entries;
  int r = sys_enter(u->ring_fd, sq_unsubmitted(u), min, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &a, sizeof a);
  int e = errno;
  if (u->io_clock) u->io[3] = uvs_wall_ms();
  if (r < 0 && e != ETIME && e != EINTR && e != EBUSY && e != EAGAIN) {
    reap(u);
    return ret_i32(env, -e);
  }
  int32_t n = reap(u);
  if (n == 0 && u->read_err) return ret_i32(env, -u->read_err);
  return ret_i32(env, n);
}

static napi_value uring_write(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  int32_t count;
  int32_t *offs, *lens;
  size_t offs_bytes, lens_bytes;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  uring_t *u = argc >= 4 ? handle(env, argv[0]) : NULL;
  if (!u || !typed(env, argv[1], 4, (void **)&offs, &offs_bytes) || !typed(env, argv[2], 4, (void **)&lens, &lens_bytes) ||
      napi_get_value_int32(env, argv[3], &count) != napi_ok) {
    return throw_msg(env, "uringWrite(handle, offs, lens, count): bad arguments");
  }
  if ((size_t)count > offs_bytes / 4) count = (int32_t)(offs_bytes / 4);
  if ((size_t)count > lens_bytes / 4) count = (int32_t)(lens_bytes / 4);
  int32_t queued = 0;
  for (int32_t i = 0; i < count; i++) {
    int32_t off = offs[i], len = lens[i];
    if (off < 0 || len <= 0 || (size_t)off + (size_t)len > u->buf_bytes) {
      u->io[2] += 1;
      continue;
    }
    /* The slot that owns these bytes: a receive slot, or the out slot of one. */
    size_t o = (size_t)off;
    int32_t s = o < u->out_base ? (int32_t)(o / (size_t)u->slot) : (int32_t)((o - u->out_base) / (size_t)u->out_slot);
    if (s >= u->nbufs) s = u->nbufs - 1;
    struct io_uring_sqe *e = sqe_get(u);
    if (!e) {
      u->io[2] += 1;
      continue;
    }
    e->opcode = IORING_OP_WRITE;
    e->fd = u->fd;
    e->addr = (uint64_t)(uintptr_t)(u->buf + o);
    e->len = (uint32_t)len;
    e->off = 0;
    e->user_data = WR_BIT | ((uint64_t)(uint32_t)s << 32) | (uint32_t)len;
    sqe_commit(u);
    u->pending[s]++;
    u->inflight++;
    queued++;
  }
  return ret_i32(env, queued);
}

static napi_value uring_submit(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  uring_t *u = argc >= 1 ? handle(env, argv[0]) : NULL;
  if (!u) return throw_msg(env, "uringSubmit(handle): bad arguments");
  unsigned n = sq_unsubmitted(u);
  if (n == 0) return ret_i32(env, 0);
  int r = sys_enter(u->ring_fd, n, 0, 0, NULL, 0);
  return ret_i32(env, r < 0 ? -errno : r);
}

static napi_value uring_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  void *p = NULL;
  if (argc < 1 || napi_get_value_external(env, argv[0], &p) != napi_ok || !p) return throw_msg(env, "uringClose(handle): bad arguments");
  uring_t *u = p;
  if (!u->closed) {
    napi_remove_env_cleanup_hook(env, cleanup_hook, u);
    shutdown_ring(u);
  }
  return ret_i32(env, 0);
}

void uvs_uring_init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "uringProbe", NULL, uring_probe, NULL, NULL, NULL, napi_default, NULL },
    { "uringOpen", NULL, uring_open, NULL, NULL, NULL, napi_default, NULL },
    { "uringWait", NULL, uring_wait, NULL, NULL, NULL, napi_default, NULL },
    { "uringWrite", NULL, uring_write, NULL, NULL, NULL, napi_default, NULL },
    { "uringSubmit", NULL, uring_submit, NULL, NULL, NULL, napi_default, NULL },
    { "uringClose", NULL, uring_close, NULL, NULL, NULL, napi_default, NULL },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
