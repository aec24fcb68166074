#!/usr/bin/env python3
"""JA4 and JA3 of TLS ClientHellos, written from the specifications alone
(FoxIO's technical_details/JA4.md, BSD-3-Clause; Salesforce's JA3 README),
sharing no code with snirelay: tests/it/fingerprint.rs runs it on the
captures in tests/data and compares its answers with snirelay's.

Usage: ja4.py FILE...   where FILE is a TLS record stream (`.bin`, the bytes
a client sent over TCP) or `quic:HEX`, a ClientHello handshake message as
QUIC's CRYPTO frames carry it. Prints one JSON object per input, in order:
{"ja4", "ja4_r", "ja3", "ja3_hash"}.
"""
import hashlib
import json
import struct
import sys

GREASE = {0x0A0A + 0x1010 * i for i in range(16)}  # RFC 8701


def records_to_message(stream):
    """Concatenates handshake record payloads until one message is whole."""
    payload = b""
    pos = 0
    while True:
        kind, _version, length = struct.unpack(">BHH", stream[pos:pos + 5])
        assert kind == 22, "not a handshake record"
        payload += stream[pos + 5:pos + 5 + length]
        pos += 5 + length
        if len(payload) >= 4:
            total = 4 + int.from_bytes(payload[1:4], "big")
            if len(payload) >= total:
                return payload[:total]


def read_hello(message):
    """The fields both fingerprints read, in the client's order, GREASE kept."""
    assert message[0] == 1, "not a ClientHello"
    body = message[4:]
    hello = {"legacy_version": int.from_bytes(body[0:2], "big")}
    pos = 2 + 32
    pos += 1 + body[pos]  # session id
    n = int.from_bytes(body[pos:pos + 2], "big")
    hello["ciphers"] = [int.from_bytes(body[i:i + 2], "big") for i in range(pos + 2, pos + 2 + n, 2)]
    pos += 2 + n
    pos += 1 + body[pos]  # compression methods
    hello["extensions"] = []
    hello["groups"] = []
    hello["point_formats"] = []
    hello["sigalgs"] = None
    hello["alpn"] = None
    hello["versions"] = None
    if pos < len(body):
        end = pos + 2 + int.from_bytes(body[pos:pos + 2], "big")
        pos += 2
        while pos < end:
            kind, length = struct.unpack(">HH", body[pos:pos + 4])
            data = body[pos + 4:pos + 4 + length]
            pos += 4 + length
            hello["extensions"].append(kind)
            if kind == 10:
                hello["groups"] = u16_list(data[2:])
            elif kind == 11:
                hello["point_formats"] = list(data[1:])
            elif kind == 13:
                hello["sigalgs"] = u16_list(data[2:])
            elif kind == 16:
                first_len = data[2]
                hello["alpn"] = data[3:3 + first_len]
            elif kind == 43:
                hello["versions"] = u16_list(data[1:])
    return hello


def u16_list(data):
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def version_code(version):
    return {0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10", 0x0300: "s3",
            0x0002: "s2", 0xFEFF: "d1", 0xFEFD: "d2", 0xFEFC: "d3"}.get(version, "00")


def alpn_code(value):
    if not value:
        return "00"
    first, last = chr(value[0]), chr(value[-1])
    if first.isascii() and first.isalnum() and last.isascii() and last.isalnum():
        return first + last
    hexed = value.hex()
    return hexed[0] + hexed[-1]


def sha12(text, empty):
    return "000000000000" if empty else hashlib.sha256(text.encode()).hexdigest()[:12]


def ja4(hello, proto):
    ciphers = [c for c in hello["ciphers"] if c not in GREASE]
    extensions = [e for e in hello["extensions"] if e not in GREASE]
    if hello["versions"] is not None:
        version = max(v for v in hello["versions"] if v not in GREASE)
    else:
        version = hello["legacy_version"]
    head = "%s%s%s%02d%02d%s" % (
        proto, version_code(version), "d" if 0 in extensions else "i",
        min(len(ciphers), 99), min(len(extensions), 99), alpn_code(hello["alpn"]))
    cipher_text = ",".join("%04x" % c for c in sorted(ciphers))
    sorted_ext = sorted(e for e in extensions if e not in (0x0000, 0x0010))
    ext_text = ",".join("%04x" % e for e in sorted_ext)
    if hello["sigalgs"] is not None:
        ext_text += "_" + ",".join("%04x" % s for s in hello["sigalgs"] if s not in GREASE)
    raw = "%s_%s_%s" % (head, cipher_text, ext_text)
    hashed = "%s_%s_%s" % (head, sha12(cipher_text, not ciphers), sha12(ext_text, not sorted_ext))
    return hashed, raw


def ja3(hello):
    def dashed(values):
        return "-".join(str(v) for v in values if v not in GREASE)
    text = ",".join([str(hello["legacy_version"]), dashed(hello["ciphers"]), dashed(hello["extensions"]),
                     dashed(hello["groups"]), dashed(hello["point_formats"])])
    return text, hashlib.md5(text.encode()).hexdigest()


def main():
    for arg in sys.argv[1:]:
        if arg.startswith("quic:"):
            message, proto = bytes.fromhex(arg[5:]), "q"
        else:
            with open(arg, "rb") as f:
                message, proto = records_to_message(f.read()), "t"
        hello = read_hello(message)
        hashed, raw = ja4(hello, proto)
        text, digest = ja3(hello)
        print(json.dumps({"ja4": hashed, "ja4_r": raw, "ja3": text, "ja3_hash": digest}))


if __name__ == "__main__":
    main()
