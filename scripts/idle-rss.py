#!/usr/bin/env python3
"""Idle memory per relayed connection, measured from outside.

A plain measure beside `loadbench --only idle` (benches/README.md), written
apart from it so the two can check each other: Python's standard library
only, its own backend and clients, and no warm-up connection. For each
proxy (snirelay and HAProxy, one thread each, the proxy pinned to one CPU
and this script to another), in alternating order each round:

1. start the proxy on a fresh config (the same route in both: one name,
   one backend);
2. read its RSS (VmRSS in /proc/PID/status) once it accepts;
3. open N connections through it, each sending a real client's captured
   ClientHello (tests/data/openssl_sni.bin), and wait until the backend
   holds all N and the proxy's RSS stops moving;
4. read its RSS again: (after - before) / N is the figure;
5. close everything and stop the proxy.

Printed per round and as medians, with the ratio snirelay / HAProxy, the
CPU model, transparent huge pages' setting and the page size (both move
RSS: mimalloc takes 2 MiB pages where THP allows them, so the figure
moves in steps of 2 MiB / N; `--small-pages` measures snirelay's heap in
4 KiB pages). Every wait is bounded; traffic stays on loopback.

    scripts/idle-rss.py --relay target/release/snirelay --conns 8000 --rounds 3
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import free_port, rss_kib

ROOT = Path(__file__).resolve().parent.parent
HELLO = (ROOT / "tests/data/openssl_sni.bin").read_bytes()
NAME = "www.example.com"


def snirelay_config(port, backend):
    return f"""[global]
max_connections = 9000
threads = 1

[[listener]]
name = "bench"
listen = ["127.0.0.1:{port}"]
backlog = 4096
client_hello_timeout = "5s"
idle_timeout = "5m"

[listener.limits]
connections_per_source = false

[[route]]
sni = ["{NAME}"]
backend = "b"

[backend.b]
addresses = ["127.0.0.1:{backend}"]
connect_timeout = "5s"
"""


def haproxy_config(port, backend):
    return f"""global
    nbthread 1
    maxconn 9000

defaults
    mode tcp
    maxconn 9000
    timeout connect 5s
    timeout client 5m
    timeout server 5m

frontend bench
    bind 127.0.0.1:{port} backlog 4096
    tcp-request inspect-delay 5s
    tcp-request content accept if {{ req.ssl_hello_type 1 }}
    use_backend b if {{ req.ssl_sni -i {NAME} }}

backend b
    server s1 127.0.0.1:{backend}
"""


class Backend:
    """Accepts and holds connections, reading what they send."""

    def __init__(self):
        self.open = 0
        self.writers = []

    async def handle(self, reader, writer):
        self.open += 1
        self.writers.append(writer)
        try:
            while await reader.read(65536):
                pass
        finally:
            self.open -= 1
            writer.close()


async def wait_until(what, check, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def accepting(port, seconds=10.0):
    deadline = time.monotonic() + seconds
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing accepts on {port}")
            await asyncio.sleep(0.02)


async def settled_rss(pid, seconds=10.0):
    """RSS once two reads 250 ms apart agree (bounded)."""
    deadline = time.monotonic() + seconds
    last = rss_kib(pid)
    while True:
        await asyncio.sleep(0.25)
        now = rss_kib(pid)
        if now == last or time.monotonic() > deadline:
            return now
        last = now


async def measure(kind, args, backend, backend_port, workdir):
    port = free_port()
    if kind == "snirelay":
        path = workdir / "snirelay.toml"
        path.write_text(snirelay_config(port, backend_port))
        command = [args.relay, "run", "--config", str(path), "--log-level", "warn"]
    else:
        path = workdir / "haproxy.cfg"
        path.write_text(haproxy_config(port, backend_port))
        command = [args.haproxy, "-db", "-f", str(path)]
    if args.pin is not None:
        command = ["taskset", "-c", str(args.pin[0])] + command
    log = open(workdir / f"{kind}.log", "w")
    env = dict(os.environ)
    if kind == "snirelay" and args.small_pages:
        # mimalloc backs its heap with 2 MiB pages where THP allows
        # (`madvise` or `always`); this measures it in 4 KiB pages.
        env["MIMALLOC_ALLOW_THP"] = "0"
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    try:
        # The probe connection sends nothing: both close it at their
        # hello timeout, after `before` is read.
        await accepting(port)
        before = await settled_rss(proc.pid)
        conns = []
        for _ in range(args.conns):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(HELLO)
            conns.append((r, w))
        await wait_until(f"{args.conns} connections at the backend",
                         lambda: backend.open >= args.conns)
        after = await settled_rss(proc.pid)
        for _, w in conns:
            w.close()
        await wait_until("the backend's connections to close", lambda: backend.open == 0)
        return (after - before) * 1024 / args.conns, before, after
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def machine():
    model = "unknown CPU"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    return f"{model}; {os.cpu_count()} CPUs; THP {thp}; page {os.sysconf('SC_PAGE_SIZE')} B"


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--relay", default=str(ROOT / "target/release/snirelay"))
    parser.add_argument("--haproxy", default="/usr/sbin/haproxy")
    parser.add_argument("--conns", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pin", default="0,1",
                        help="CPU for the proxy, CPU for this script ('none': unpinned)")
    parser.add_argument("--small-pages", action="store_true",
                        help="snirelay's heap in 4 KiB pages (MIMALLOC_ALLOW_THP=0)")
    args = parser.parse_args()
    args.pin = None if args.pin == "none" else [int(c) for c in args.pin.split(",")]
    for tool in (args.relay, args.haproxy):
        if not os.access(tool, os.X_OK):
            sys.exit(f"idle-rss: {tool} is missing (build with `cargo build --release`, "
                     "install haproxy)")
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin[1]})
    backend = Backend()
    server = await asyncio.start_server(backend.handle, "127.0.0.1", 0, backlog=4096)
    backend_port = server.sockets[0].getsockname()[1]
    print(f"idle-rss: {args.conns} idle connections, {args.rounds} rounds, "
          f"pin {args.pin or 'none'}; {machine()}"
          f"{'; snirelay MIMALLOC_ALLOW_THP=0' if args.small_pages else ''}")
    figures = {"snirelay": [], "haproxy": []}
    with tempfile.TemporaryDirectory(prefix="idle-rss-") as d:
        for n in range(args.rounds):
            order = ["snirelay", "haproxy"] if n % 2 == 0 else ["haproxy", "snirelay"]
            for kind in order:
                per_conn, before, after = await measure(kind, args, backend, backend_port, Path(d))
                figures[kind].append(per_conn)
                print(f"round {n + 1} {kind:8} RSS {before} -> {after} KiB: "
                      f"{per_conn:.0f} bytes per connection")
    server.close()
    s, h = (statistics.median(figures[k]) for k in ("snirelay", "haproxy"))
    print(f"median: snirelay {s:.0f}, HAProxy {h:.0f} bytes per connection: ratio {s / h:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
