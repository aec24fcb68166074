#!/usr/bin/env python3
"""Records the first flight of UDP datagrams a QUIC client sends.

Usage: capture-quic-initials.py OUTFILE PORTFILE

Binds 127.0.0.1 on an ephemeral port (written to PORTFILE so the caller can
point a client at it), waits up to 20 s for the first datagram, then keeps
every datagram that arrives within 150 ms of it (a client's first flight:
one or more Initial datagrams; its retransmissions come only after a probe
timeout of several hundred milliseconds, and are left out). Never answers.
OUTFILE gets one datagram per line, in arrival order, as lowercase hex.
"""

import socket
import sys
import time

FIRST_WAIT = 20.0
FLIGHT = 0.150
MAX_DATAGRAMS = 64

out, portfile = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
with open(portfile, "w") as f:
    f.write(str(sock.getsockname()[1]))
sock.settimeout(FIRST_WAIT)
first, _ = sock.recvfrom(65535)
datagrams = [first]
end = time.monotonic() + FLIGHT
while len(datagrams) < MAX_DATAGRAMS:
    left = end - time.monotonic()
    if left <= 0:
        break
    sock.settimeout(left)
    try:
        data, _ = sock.recvfrom(65535)
    except socket.timeout:
        break
    datagrams.append(data)
with open(out, "w") as f:
    for d in datagrams:
        f.write(d.hex() + "\n")
print(f"{out}: {len(datagrams)} datagrams, sizes {[len(d) for d in datagrams]}")
