#!/usr/bin/env python3
"""Memory per route and backend, snirelay against HAProxy, measured from outside.

Issue 42's fifth shape: N routes, each with two names and a backend of its
own (one address each), against HAProxy 2.6 with N backends of one server
each, chosen by `use_backend %[req.ssl_sni,lower,map(sni.map)]` over a
2N-line map. For each proxy (one thread each), in alternating order each
round, on the N-route config and on the same shape with one route:

1. start the proxy;
2. wait (bounded) until it accepts on its port: the start time;
3. read VmRSS from /proc once it has stopped moving (a second after).

Printed per round and as medians: RSS with one route and with N, the
bytes per route and backend above one route, the ratio snirelay /
HAProxy, and the start time; the CPU model, transparent huge pages'
setting and the page size beside them. Python's standard library only;
nothing is sent through either proxy.

    scripts/routes-rss.py --relay target/release/snirelay --routes 20000 --rounds 3

`--heaptrack BIN` instead runs BIN (the `sysalloc` example: snirelay on the
system allocator, which heaptrack hooks) under heaptrack on the N-route
config, stops it a second after it accepts, and prints the call sites that
hold the most memory at that moment (heaptrack_print's leaks: what was
still allocated).
"""

import argparse
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import free_port, rss_kib


def names(i):
    return (f"a{i}.routes.example.com", f"b{i}.routes.example.com")


def backend_port(i):
    return 10000 + i % 50000


def snirelay_config(port, routes):
    parts = [
        f'[global]\nthreads = 1\n\n[[listener]]\nname = "bench"\nlisten = ["127.0.0.1:{port}"]\n'
    ]
    for i in range(routes):
        a, b = names(i)
        parts.append(
            f'\n[[route]]\nname = "r{i}"\nsni = ["{a}", "{b}"]\nbackend = "b{i}"\n'
        )
    for i in range(routes):
        parts.append(f'\n[backend.b{i}]\naddresses = ["127.0.0.1:{backend_port(i)}"]\n')
    return "".join(parts)


def haproxy_config(port, routes, map_path):
    parts = [
        "global\n    nbthread 1\n    maxconn 1000\n\n"
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 5m\n"
        "    timeout server 5m\n\n"
        f"frontend bench\n    bind 127.0.0.1:{port}\n"
        "    tcp-request inspect-delay 5s\n"
        "    tcp-request content accept if { req.ssl_hello_type 1 }\n"
        f"    use_backend %[req.ssl_sni,lower,map({map_path})]\n"
    ]
    for i in range(routes):
        parts.append(f"\nbackend b{i}\n    server s1 127.0.0.1:{backend_port(i)}\n")
    return "".join(parts)


def haproxy_map(routes):
    return "".join(f"{n} b{i}\n" for i in range(routes) for n in names(i))


def wait_accepting(port, proc, bound=60.0):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the proxy exited ({proc.returncode}) before accepting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.01)
    raise RuntimeError(f"not accepting on {port} within {bound} s")


def settled_rss(pid, bound=10.0):
    """VmRSS once two reads a second apart agree (within 64 KiB)."""
    time.sleep(1.0)
    last = rss_kib(pid)
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_kib(pid)
        if abs(now - last) <= 64:
            return now
        last = now
    return last


def command(proxy, args, workdir, port, routes):
    if proxy == "snirelay":
        path = workdir / f"snirelay-{routes}.toml"
        path.write_text(snirelay_config(port, routes))
        return [args.relay, "run", "--config", str(path), "--log-level", "warn"]
    map_path = workdir / f"sni-{routes}.map"
    map_path.write_text(haproxy_map(routes))
    path = workdir / f"haproxy-{routes}.cfg"
    path.write_text(haproxy_config(port, routes, map_path))
    return [args.haproxy, "-db", "-f", str(path)]


def measure(proxy, args, workdir, routes):
    port = free_port()
    argv = command(proxy, args, workdir, port, routes)
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_accepting(port, proc)
        start = time.monotonic() - started
        return settled_rss(proc.pid), start
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def heaptrack(args, workdir):
    port = free_port()
    path = workdir / "snirelay-heap.toml"
    path.write_text(snirelay_config(port, args.routes))
    trace = workdir / "trace"
    proc = subprocess.Popen(
        ["heaptrack", "-o", str(trace), args.heaptrack, "run", "--config", str(path),
         "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_accepting(port, proc, bound=300.0)
    time.sleep(1.0)
    # The relay itself (heaptrack's child): SIGKILL it, so what heaptrack
    # reports as leaked is what was allocated at that moment.
    child = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                           text=True).stdout.split()
    target = [int(p) for p in child] or [proc.pid]
    relay = next((p for p in target if "sysalloc" in Path(f"/proc/{p}/cmdline").read_text()), None)
    if relay is None:
        relay = int(subprocess.run(["pgrep", "-n", "-f", f"{args.heaptrack} run --config {path}"],
                                   capture_output=True, text=True).stdout.split()[0])
    os.kill(relay, signal.SIGKILL)
    proc.wait(timeout=120)
    out = subprocess.run(
        ["heaptrack_print", "-f", f"{trace}.zst", "--print-leaks", "1", "--print-peaks", "0",
         "--print-allocators", "0", "--print-temporary", "0",
         "-n", "4", "-s", "12"],
        capture_output=True, text=True).stdout
    # One line per call site: bytes still held, allocations, and the first
    # frame in snirelay's own source.
    lines = out.splitlines()
    for n, line in enumerate(lines):
        if "leaked over" not in line:
            continue
        frame = next((l.strip() for l in lines[n + 1:n + 60] if l.strip().startswith("at src/")),
                     None)
        if line.rstrip().endswith("from:") and frame:
            print(f"{line.strip()[:-len(' from:')]:45} {frame}")
        elif not line.rstrip().endswith("from:"):
            print(f"total: {line.strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--relay", default="target/release/snirelay")
    parser.add_argument("--haproxy", default="/usr/sbin/haproxy")
    parser.add_argument("--routes", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heaptrack", metavar="BIN",
                        help="profile BIN (the sysalloc example) under heaptrack instead")
    args = parser.parse_args()
    tools = [args.heaptrack, "/usr/bin/heaptrack"] if args.heaptrack else [args.relay, args.haproxy]
    for tool in tools:
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: build it (cargo build --release) or install it "
                     "(apt-get install haproxy heaptrack)")
    with tempfile.TemporaryDirectory(prefix="routes-rss-") as tmp:
        workdir = Path(tmp)
        if args.heaptrack:
            heaptrack(args, workdir)
            return
        figures = {p: {"one": [], "many": [], "start": []} for p in ("snirelay", "haproxy")}
        for n in range(args.rounds):
            order = ["snirelay", "haproxy"] if n % 2 == 0 else ["haproxy", "snirelay"]
            for proxy in order:
                one, _ = measure(proxy, args, workdir, 1)
                many, start = measure(proxy, args, workdir, args.routes)
                figures[proxy]["one"].append(one)
                figures[proxy]["many"].append(many)
                figures[proxy]["start"].append(start)
                per = (many - one) * 1024 / args.routes
                print(f"round {n + 1} {proxy:8} RSS 1 route {one} KiB, {args.routes} routes "
                      f"{many} KiB: {per:.0f} bytes per route and backend; start {start:.2f} s",
                      flush=True)
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor())
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    print(f"\nCPU {cpu}; THP {thp}; page size {os.sysconf('SC_PAGE_SIZE')} B; "
          f"medians of {args.rounds}")
    print("| | RSS 1 route | RSS N routes | per route and backend | start |")
    print("|---|---|---|---|---|")
    per = {}
    for proxy, f in figures.items():
        one, many = statistics.median(f["one"]), statistics.median(f["many"])
        per[proxy] = (many - one) * 1024 / args.routes
        print(f"| {proxy} | {one / 1024:.1f} MB | {many / 1024:.1f} MB | "
              f"{per[proxy]:,.0f} bytes | {statistics.median(f['start']):.2f} s |")
    print(f"\nsnirelay / HAProxy per route and backend: {per['snirelay'] / per['haproxy']:.2f}")


if __name__ == "__main__":
    main()
