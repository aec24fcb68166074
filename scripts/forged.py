"""Forged UDP datagrams from many loopback source addresses, through one
raw socket that writes each source into its IPv4 header: the flood of the
forged-source scripts (forged-sources.py, full-table-latency.py), imported
by each, not a script of its own.

Not here: starting the relay, reading its metrics or timing anything.
Needs root (a raw socket); sends only to 127.0.0.1.
"""

import ipaddress
import socket
import struct
import time

# One QUIC v1 long-header datagram of 1,200 bytes that parses as no
# Initial: it reaches the listener's admission gate (a new source each)
# and is dropped after it.
LONG_HEADER = bytes([0xC3]) + struct.pack("!I", 1) + bytes([8]) + bytes(1194)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def packet(source, port, payload):
    """An IPv4 + UDP packet from `source` to 127.0.0.1:`port` (UDP
    checksum 0: none, as IPv4 allows)."""
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
        source.packed, ipaddress.IPv4Address("127.0.0.1").packed,
    )
    header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    return header + udp


def flood(port, count, rate, first="127.16.0.1", payload=LONG_HEADER):
    """Sends `payload` from `count` consecutive addresses starting at
    `first` to 127.0.0.1:`port`, paced to `rate` datagrams a second (in
    steps of 1,000, so that the relay's socket buffer is not simply
    overrun). Returns the seconds it took."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    start = int(ipaddress.IPv4Address(first))
    started = time.monotonic()
    try:
        for i in range(count):
            raw.sendto(packet(ipaddress.IPv4Address(start + i), port, payload), ("127.0.0.1", 0))
            if i % 1000 == 999:
                ahead = (i + 1) / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        raw.close()
    return time.monotonic() - started
