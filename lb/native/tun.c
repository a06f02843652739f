/*
 * uvs TUN addon: the few syscalls Node lacks for a multi-queue TUN dataplane.
 *
 * openQueue(name, offload)             -> fd of one queue of TUN device `name`
 *   IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE, O_NONBLOCK. Each call attaches one more queue; the
 *   device exists while at least one queue fd is open, so a crashed daemon leaves no device.
 *   offload: IFF_VNET_HDR with TUNSETOFFLOAD(CSUM | TSO4 | TSO6 | TSO_ECN): every packet read or
 *   written carries a 10-byte struct virtio_net_hdr first, checksums may be left partial and TCP
 *   arrives as GSO super-packets of up to 64 KB — one read, one lookup and one write per 64 KB
 *   instead of per 1500 bytes. All queues of a device share these flags.
 * readBatch(fd, buf, lens, maxPkts, slot, timeoutMs, pollFirst) -> packets read (0 on timeout)
 *   poll()s up to timeoutMs, then reads packets back to back into `buf`, each at offset
 *   i*slot, length in lens[i] (a packet longer than the slot reports the slot's length, so the
 *   caller sees its IP length exceed what was read and drops it as truncated). One poll per batch, so an idle worker costs nothing and a busy
 *   one pays one poll per up to maxPkts packets. Returns -errno on a hard error.
 * clockInto(f64, i) -> writes the wall clock into f64[i] (ms as Date.now(), whole): a clock for
 *   the worker loop that allocates nothing (Date.now() makes a heap number on every call).
 * writeBatch(fd, buf, offs, lens, count) -> packets written; -errno on a hard error.
 *   EAGAIN (queue full) drops the packet, like a NIC ring; the caller counts it from the
 *   difference. A packet that was not written has its lens[i] set to 0.
 *
 * openSend(family, mark) -> fd of a raw socket (IPPROTO_RAW: the caller writes the IP header)
 *   whose packets carry fwmark `mark` (SO_MARK), so a policy rule can route them whatever their
 *   addresses say. sendPacket(fd, buf, len) sends the whole IPv4/IPv6 packet at buf[0, len) to the
 *   destination its header names: bytes, or −errno.
 *
 * No allocation per packet: buffers are the caller's typed arrays.
 */
#include <node_api.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <stdbool.h>
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, "UVS_ERR_TUN", msg);
  return NULL;
}

static int get_i32(napi_env env, napi_value v, int32_t *out) {
  return napi_get_value_int32(env, v, out) == napi_ok;
}

static int get_ta(napi_env env, napi_value v, void **data, size_t *bytes) {
  napi_typedarray_type t;
  size_t len, off;
  napi_value ab;
  if (napi_get_typedarray_info(env, v, &t, &len, data, &ab, &off) != napi_ok) return 0;
  switch (t) {
    case napi_uint8_array: case napi_int8_array: *bytes = len; break;
    case napi_int32_array: case napi_uint32_array: *bytes = len * 4; break;
    default: return 0;
  }
  return 1;
}

static napi_value ret_i32(napi_env env, int32_t v) {
  napi_value r;
  napi_create_int32(env, v, &r);
  return r;
}

static napi_value open_queue(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  char name[IFNAMSIZ];
  size_t n;
  bool offload = false;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || napi_get_value_string_utf8(env, argv[0], name, sizeof name, &n) != napi_ok || n == 0) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "openQueue(name, offload): name must be a non-empty string");
    return NULL;
  }
  if (argc >= 2 && napi_get_value_bool(env, argv[1], &offload) != napi_ok) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "openQueue(name, offload): offload must be a boolean");
    return NULL;
  }
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, "open /dev/net/tun", errno);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE | (offload ? IFF_VNET_HDR : 0);
  strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    int e = errno;
    close(fd);
    return throw_errno(env, "TUNSETIFF", e);
  }
  if (offload) {
    int hsz = (int)sizeof(struct virtio_net_hdr);
    if (ioctl(fd, TUNSETVNETHDRSZ, &hsz) < 0) {
      int e = errno;
      close(fd);
      return throw_errno(env, "TUNSETVNETHDRSZ", e);
    }
    if (ioctl(fd, TUNSETOFFLOAD, (unsigned long)(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN)) < 0) {
      int e = errno;
      close(fd);
      return throw_errno(env, "TUNSETOFFLOAD", e);
    }
  }
  return ret_i32(env, fd);
}

static napi_value close_fd(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || !get_i32(env, argv[0], &fd)) return ret_i32(env, -EINVAL);
  return ret_i32(env, close(fd) == 0 ? 0 : -errno);
}

static napi_value read_batch(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  int32_t fd, max_pkts, slot, timeout;
  bool poll_first = false;
  uint8_t *buf;
  int32_t *lens;
  size_t buf_bytes, lens_bytes;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 6 || !get_i32(env, argv[0], &fd) || !get_ta(env, argv[1], (void **)&buf, &buf_bytes) ||
      !get_ta(env, argv[2], (void **)&lens, &lens_bytes) || !get_i32(env, argv[3], &max_pkts) ||
      !get_i32(env, argv[4], &slot) || !get_i32(env, argv[5], &timeout) || slot <= 0) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "readBatch(fd, buf, lens, maxPkts, slot, timeoutMs): bad arguments");
    return NULL;
  }
  /* pollFirst: the caller's last batch ended on an empty queue, so start with the wait (one read
   * that would only say EAGAIN saved per wake-up); data that came meanwhile wakes poll at once. */
  if (argc >= 7) napi_get_value_bool(env, argv[6], &poll_first);
  if ((size_t)max_pkts > lens_bytes / 4) max_pkts = (int32_t)(lens_bytes / 4);
  if (poll_first && timeout != 0) {
    struct pollfd p = { .fd = fd, .events = POLLIN, .revents = 0 };
    int pr = poll(&p, 1, timeout);
    if (pr == 0) return ret_i32(env, 0);
    if (pr < 0 && errno != EINTR) return ret_i32(env, -errno);
    timeout = 0;
  }
  if ((size_t)max_pkts * (size_t)slot > buf_bytes) max_pkts = (int32_t)(buf_bytes / (size_t)slot);
  int32_t n = 0;
  while (n < max_pkts) {
    ssize_t r = read(fd, buf + (size_t)n * slot, (size_t)slot);
    if (r >= 0) { lens[n++] = r > slot ? slot : (int32_t)r; continue; }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return ret_i32(env, n > 0 ? n : -errno);
    if (n > 0 || timeout == 0) break;
    struct pollfd p = { .fd = fd, .events = POLLIN, .revents = 0 };
    int pr = poll(&p, 1, timeout);
    if (pr == 0) break;
    if (pr < 0 && errno != EINTR) return ret_i32(env, -errno);
    timeout = 0; /* after one wake-up, take what is there and return */
  }
  return ret_i32(env, n);
}

static napi_value write_batch(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  int32_t fd, count;
  uint8_t *buf;
  int32_t *offs, *lens;
  size_t buf_bytes, offs_bytes, lens_bytes;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 5 || !get_i32(env, argv[0], &fd) || !get_ta(env, argv[1], (void **)&buf, &buf_bytes) ||
      !get_ta(env, argv[2], (void **)&offs, &offs_bytes) || !get_ta(env, argv[3], (void **)&lens, &lens_bytes) ||
      !get_i32(env, argv[4], &count)) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "writeBatch(fd, buf, offs, lens, count): bad arguments");
    return NULL;
  }
  if ((size_t)count > offs_bytes / 4) count = (int32_t)(offs_bytes / 4);
  if ((size_t)count > lens_bytes / 4) count = (int32_t)(lens_bytes / 4);
  int32_t done = 0;
  for (int32_t i = 0; i < count; i++) {
    if (offs[i] < 0 || lens[i] <= 0 || (size_t)offs[i] + (size_t)lens[i] > buf_bytes) {
      lens[i] = 0;
      continue;
    }
    ssize_t w;
    do { w = write(fd, buf + offs[i], (size_t)lens[i]); } while (w < 0 && errno == EINTR);
    if (w >= 0) done++;
    else if (errno != EAGAIN && errno != EINVAL && errno != EIO) return ret_i32(env, done > 0 ? done : -errno);
    else lens[i] = 0;
  }
  return ret_i32(env, done);
}

/*
 * openRaw(protocol, family) -> fd of a non-blocking raw socket receiving that IP protocol — for
 * `uvs decap`, the userspace tunnel decapsulator of real servers whose kernel has no ipip/ip6_tunnel
 * driver. family 4: whole IPv4 packets, outer header included; family 6: the payload after the
 * outer IPv6 header (raw IPv6 sockets never pass the header). readBatch() reads from it like from a
 * TUN queue. openRaw(protocol, family, peer): connected to `peer` (an address of that family), so
 * the kernel delivers only packets from it (raw_v4_match / raw_v6_match compare a connected raw
 * socket's remote address) — the only way to know an IPv6 packet's outer source here.
 */
static napi_value open_raw(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t proto, family = 4;
  char peer[64] = "";
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc >= 3) {
    size_t n = 0;
    if (napi_get_value_string_utf8(env, argv[2], peer, sizeof peer, &n) != napi_ok) {
      napi_throw_type_error(env, "UVS_ERR_TUN", "openRaw(protocol, family, peer): peer an address string");
      return NULL;
    }
  }
  if (argc < 1 || !get_i32(env, argv[0], &proto) || (argc >= 2 && (!get_i32(env, argv[1], &family) || (family != 4 && family != 6)))) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "openRaw(protocol, family): protocol a number, family 4 or 6");
    return NULL;
  }
  int fd = socket(family == 6 ? AF_INET6 : AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
  if (fd < 0) return throw_errno(env, family == 6 ? "socket(AF_INET6, SOCK_RAW)" : "socket(AF_INET, SOCK_RAW)", errno);
  if (peer[0]) {
    struct sockaddr_storage sa;
    socklen_t len;
    memset(&sa, 0, sizeof sa);
    int ok;
    if (family == 6) {
      struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
      s6->sin6_family = AF_INET6;
      ok = inet_pton(AF_INET6, peer, &s6->sin6_addr);
      len = sizeof *s6;
    } else {
      struct sockaddr_in *s4 = (struct sockaddr_in *)&sa;
      s4->sin_family = AF_INET;
      ok = inet_pton(AF_INET, peer, &s4->sin_addr);
      len = sizeof *s4;
    }
    if (ok != 1) {
      close(fd);
      napi_throw_type_error(env, "UVS_ERR_TUN", "openRaw: peer is not an address of that family");
      return NULL;
    }
    if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
      int e = errno;
      close(fd);
      return throw_errno(env, "connect(raw socket, peer)", e);
    }
  }
  return ret_i32(env, fd);
}

double uvs_wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec * 1000.0 + (double)(t.tv_nsec / 1000000L);
}

static napi_value clock_into(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  void *data;
  int32_t i;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_typedarray_type type;
  size_t len;
  if (argc < 2 || napi_get_typedarray_info(env, argv[0], &type, &len, &data, NULL, NULL) != napi_ok || type != napi_float64_array ||
      napi_get_value_int32(env, argv[1], &i) != napi_ok || i < 0 || (size_t)i >= len) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "clockInto(f64, i): bad arguments");
    return NULL;
  }
  ((double *)data)[i] = uvs_wall_ms();
  return NULL;
}

static napi_value open_send(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t family;
  uint32_t mark;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2 || !get_i32(env, argv[0], &family) || (family != 4 && family != 6) || napi_get_value_uint32(env, argv[1], &mark) != napi_ok) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "openSend(family, mark): family 4 or 6, mark a number");
    return NULL;
  }
  /* IPPROTO_RAW: IP_HDRINCL for IPv4, IPV6_HDRINCL implied for IPv6 (inet6_create). */
  int fd = socket(family == 6 ? AF_INET6 : AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd < 0) return throw_errno(env, "socket(SOCK_RAW, IPPROTO_RAW)", errno);
  if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) < 0) {
    int e = errno;
    close(fd);
    return throw_errno(env, "setsockopt(SO_MARK)", e);
  }
  /* Never read: an IPPROTO_RAW socket also receives protocol-255 packets; keep its buffer minimal. */
  int zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &zero, sizeof zero);
  return ret_i32(env, fd);
}

static napi_value send_packet(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t fd, len;
  uint8_t *buf;
  size_t bytes;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || !get_i32(env, argv[0], &fd) || !get_ta(env, argv[1], (void **)&buf, &bytes) || !get_i32(env, argv[2], &len) ||
      len <= 0 || (size_t)len > bytes) {
    napi_throw_type_error(env, "UVS_ERR_TUN", "sendPacket(fd, buf, len): bad arguments");
    return NULL;
  }
  struct sockaddr_storage sa;
  socklen_t salen;
  memset(&sa, 0, sizeof sa);
  if ((buf[0] >> 4) == 6 && len >= 40) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
    s6->sin6_family = AF_INET6;
    memcpy(&s6->sin6_addr, buf + 24, 16);
    salen = sizeof *s6;
  } else if ((buf[0] >> 4) == 4 && len >= 20) {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&sa;
    s4->sin_family = AF_INET;
    memcpy(&s4->sin_addr, buf + 16, 4);
    salen = sizeof *s4;
  } else {
    return ret_i32(env, -EINVAL);
  }
  ssize_t w;
  do { w = sendto(fd, buf, (size_t)len, 0, (struct sockaddr *)&sa, salen); } while (w < 0 && errno == EINTR);
  return ret_i32(env, w < 0 ? -errno : (int32_t)w);
}

void uvs_uring_init(napi_env env, napi_value exports); /* uring.c */
void uvs_steer_init(napi_env env, napi_value exports); /* steer.c */

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    { "openQueue", NULL, open_queue, NULL, NULL, NULL, napi_default, NULL },
    { "closeFd", NULL, close_fd, NULL, NULL, NULL, napi_default, NULL },
    { "readBatch", NULL, read_batch, NULL, NULL, NULL, napi_default, NULL },
    { "writeBatch", NULL, write_batch, NULL, NULL, NULL, napi_default, NULL },
    { "clockInto", NULL, clock_into, NULL, NULL, NULL, napi_default, NULL },
    { "openRaw", NULL, open_raw, NULL, NULL, NULL, napi_default, NULL },
    { "openSend", NULL, open_send, NULL, NULL, NULL, napi_default, NULL },
    { "sendPacket", NULL, send_packet, NULL, NULL, NULL, napi_default, NULL },
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  uvs_uring_init(env, exports);
  uvs_steer_init(env, exports);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
