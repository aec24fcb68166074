#!/usr/bin/env python3
"""Capture a real TLS ClientHello from one client connection.

Usage: capture_hello.py OUTFILE [PORT]   (PORT default 0 = ephemeral)

Listens on 127.0.0.1, prints "PORT <n>" to stdout (flushed) once listening,
accepts exactly one connection, reads TLS records until the ClientHello
handshake message (type 1) is complete, writes exactly those bytes (all
records carrying it, headers included, nothing after) to OUTFILE, closes.
"""
import socket
import sys


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def main():
    out = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    srv.settimeout(60)
    print("PORT %d" % srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    srv.close()
    conn.settimeout(30)
    raw = b""          # exact bytes received (records incl. headers)
    hs = b""           # reassembled handshake payload
    nrec = 0
    while True:
        hdr = recv_exact(conn, 5)
        ctype, length = hdr[0], int.from_bytes(hdr[3:5], "big")
        if ctype != 22:
            raise ValueError("record content type %d is not handshake" % ctype)
        body = recv_exact(conn, length)
        raw += hdr + body
        hs += body
        nrec += 1
        if len(hs) >= 4:
            if hs[0] != 1:
                raise ValueError("handshake type %d is not ClientHello" % hs[0])
            need = 4 + int.from_bytes(hs[1:4], "big")
            if len(hs) >= need:
                if len(hs) != need:
                    print("warning: %d trailing handshake bytes in last record"
                          % (len(hs) - need), file=sys.stderr)
                break
    with open(out, "wb") as f:
        f.write(raw)
    conn.close()
    print("wrote %s: %d bytes, %d records" % (out, len(raw), nrec), flush=True)


if __name__ == "__main__":
    main()
