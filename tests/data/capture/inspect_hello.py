#!/usr/bin/env python3
"""Parse captured TLS ClientHello byte streams and print their facts.

Usage: inspect_hello.py FILE...
"""
import sys

GROUP_NAMES = {0x001d: "x25519", 0x0017: "secp256r1", 0x0018: "secp384r1",
               0x0019: "secp521r1", 0x001e: "x448", 0x11ec: "X25519MLKEM768",
               0x6399: "X25519Kyber768Draft00"}


def is_grease(v):
    return (v & 0x0f0f) == 0x0a0a and (v >> 8) == (v & 0xff)


class R:
    def __init__(self, b):
        self.b, self.i = b, 0

    def take(self, n):
        if self.i + n > len(self.b):
            raise ValueError("truncated")
        v = self.b[self.i:self.i + n]
        self.i += n
        return v

    def u(self, n):
        return int.from_bytes(self.take(n), "big")

    def vec(self, lenbytes):
        return self.take(self.u(lenbytes))

    def done(self):
        return self.i == len(self.b)


def inspect(data):
    # records
    records, hs, i = [], b"", 0
    while i < len(data):
        if i + 5 > len(data):
            raise ValueError("truncated record header")
        ctype = data[i]
        ver = int.from_bytes(data[i + 1:i + 3], "big")
        ln = int.from_bytes(data[i + 3:i + 5], "big")
        if ctype != 22:
            raise ValueError("non-handshake record")
        body = data[i + 5:i + 5 + ln]
        if len(body) != ln:
            raise ValueError("truncated record body")
        records.append((ver, ln))
        hs += body
        i += 5 + ln
    if hs[0] != 1:
        raise ValueError("not a ClientHello")
    hlen = int.from_bytes(hs[1:4], "big")
    if len(hs) != 4 + hlen:
        raise ValueError("handshake length %d != payload %d" % (4 + hlen, len(hs)))
    r = R(hs[4:])
    legacy_version = r.u(2)
    r.take(32)
    sid = r.vec(1)
    suites = r.vec(2)
    comp = r.vec(1)
    exts = []
    if not r.done():
        er = R(r.vec(2))
        while not er.done():
            t = er.u(2)
            exts.append((t, er.vec(2)))
    if not r.done():
        raise ValueError("trailing bytes in ClientHello body")
    info = {
        "total_bytes": len(data), "records": len(records),
        "record_lengths": [l for _, l in records],
        "record_versions": ["0x%04x" % v for v, _ in records],
        "clienthello_len": hlen, "handshake_msg_len": 4 + hlen,
        "legacy_version": "0x%04x" % legacy_version,
        "session_id_len": len(sid), "cipher_suites": len(suites) // 2,
        "ext_types": ["0x%04x" % t for t, _ in exts],
        "sni": None, "alpn": None, "key_share_groups": [],
        "has_11ec_keyshare": False, "has_fe0d": False,
        "supported_versions": None,
    }
    for t, body in exts:
        if t == 0x0000:
            er = R(body)
            lr = R(er.vec(2))
            names = []
            while not lr.done():
                nt = lr.u(1)
                n = lr.vec(2)
                if nt == 0:
                    names.append(n.decode("ascii"))
            info["sni"] = names[0] if len(names) == 1 else names
        elif t == 0x0010:
            er = R(body)
            lr = R(er.vec(2))
            protos = []
            while not lr.done():
                protos.append(lr.vec(1).decode("ascii", "replace"))
            info["alpn"] = protos
        elif t == 0x0033:
            er = R(body)
            lr = R(er.vec(2))
            while not lr.done():
                g = lr.u(2)
                ke = lr.vec(2)
                name = "GREASE" if is_grease(g) else GROUP_NAMES.get(g, "?")
                info["key_share_groups"].append("0x%04x(%s,%dB)" % (g, name, len(ke)))
                if g == 0x11ec:
                    info["has_11ec_keyshare"] = True
        elif t == 0xfe0d:
            info["has_fe0d"] = True
            info["fe0d_len"] = len(body)
        elif t == 0x002b:
            er = R(body)
            lr = R(er.vec(1))
            vs = []
            while not lr.done():
                vs.append("0x%04x" % lr.u(2))
            info["supported_versions"] = vs
    return info


def main():
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            data = f.read()
        print("== %s" % path)
        for k, v in inspect(data).items():
            print("  %s: %s" % (k, v))


if __name__ == "__main__":
    main()
