#!/usr/bin/env python3
"""A real client's hello-to-backend time while the listener's source table
is full, against an empty one: end to end, from outside the relay.

Starts the relay (a release build) afresh for each case, with a quic
listener whose limits are `attempts_per_source = 30`,
`connections_per_source = 50` and `max_sources` as the case has it, and a
route for `aioquic.example.com` to a UDP socket of this script's. The
client's hello is the captured aioquic Initial (tests/data/quic/
aioquic_v1.hex, one complete, routable 1,200-byte datagram). A probe sends
it from a loopback address of its own (127.200.x.y, a new source each
time, so each probe enters the table, and in a full table evicts its least
recently used source) and times it until the backend socket receives the
relayed datagram. Probes are sequential, `--probes` of them at `--rate` a
second, after `--warm-up` unmeasured ones.

The cases, each run `--rounds` times in alternation so that the machine's
noise falls on all of them alike:
- `empty`: nothing before the probes;
- `full 100k`: the default `max_sources` (100,000), filled by 120,000
  forged sources (one long-header datagram each, through a raw socket, as
  scripts/forged-sources.py sends them) before the probes;
- `full 1M`: `max_sources = 1000000`, filled by 1,050,000 forged sources;
- `expiring 100k`: as `full 100k` with `attempts_period = "10s"` (a source
  is kept two periods), so that the sweeper (every 10 s) forgets the
  forged sources, 512 a lock hold, while the probes run (filled to 90 %:
  the first forged sources may expire before the last are sent); the
  tracked count before and after the probes shows it.

Prints per case and round p50 / p90 / p99 / p99.9 in microseconds and the
tracked and evicted sources, then the medians over rounds and each case's
p99 as a ratio of `empty`'s, with the CPU model. Needs root (a raw
socket). Traffic stays on loopback; every loop is bounded; each relay it
started is ended by PID.

    scripts/full-table-latency.py --relay target/release/snirelay
"""

import argparse
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchproc import cpu_model, free_port, metrics, wait_ready
from forged import flood

CONFIG = """
[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:{port}"]
client_hello_timeout = "1s"

[listener.limits]
connections_per_source = 50
attempts_per_source = 30
attempts_period = "{period}"
max_sources = {max_sources}

[[route]]
sni = ["aioquic.example.com"]
backend = "q"

[backend.q]
addresses = ["127.0.0.1:{backend}"]
"""

SERIES = (
    'snirelay_admission_sources{listener="quic"}',
    'snirelay_admission_sources_evicted_total{listener="quic"}',
)

# name, max_sources, forged sources before the probes, attempts_period
CASES = (
    ("empty", 100_000, 0, "1h"),
    ("full 100k", 100_000, 120_000, "1h"),
    ("full 1M", 1_000_000, 1_050_000, "1h"),
    ("expiring 100k", 100_000, 120_000, "10s"),
)

INITIAL = bytes.fromhex(
    (Path(__file__).resolve().parent.parent / "tests/data/quic/aioquic_v1.hex")
    .read_text()
    .split()[0]
)


def probe_address(i):
    return f"127.200.{i // 250 % 250 + 1}.{i % 250 + 1}"


def probes(port, backend, count, rate, first):
    """Sends the Initial `count` times, each from a new address, and returns
    the hello-to-backend times in ns (a probe not relayed within 1 s is
    counted apart, as None)."""
    times = []
    started = time.monotonic()
    for n in range(count):
        # Whatever an earlier probe's flow still sent is not this one's.
        backend.setblocking(False)
        try:
            while True:
                backend.recv(2048)
        except BlockingIOError:
            pass
        backend.setblocking(True)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.bind((probe_address(first + n), 0))
            sent = time.perf_counter_ns()
            client.sendto(INITIAL, ("127.0.0.1", port))
            try:
                backend.recv(2048)
                times.append(time.perf_counter_ns() - sent)
            except socket.timeout:
                times.append(None)
        ahead = (n + 1) / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    return times


def fill(admin, port, forged, target, rate):
    """Floods `forged` sources, then again from new addresses until the
    sweeper (every 10 s) reports at least `target` tracked (at most four
    more passes: a datagram the kernel drops from a full socket buffer
    never reaches the table)."""
    first = 0x7F100001  # 127.16.0.1
    sent = 0
    for attempt in range(5):
        count = forged if attempt == 0 else max(10_000, int(target - tracked) * 2)
        flood(port, count, rate, first=socket.inet_ntoa((first + sent).to_bytes(4, "big")))
        sent += count
        tracked = swept(admin)
        if tracked >= target:
            return
    raise SystemExit(f"the table never filled: {tracked:,.0f} of {target:,} tracked after {sent:,} forged sources")


def swept(admin):
    """The tracked sources once the sweeper has reported them anew (it does
    every 10 s; waits at most 25 s)."""
    name = "snirelay_admission_sources"
    first = metrics(admin, SERIES).get(name, 0)
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = metrics(admin, SERIES).get(name, 0)
        if now != first:
            return now
    return first


def percentile(sorted_times, p):
    return sorted_times[min(len(sorted_times) - 1, int(len(sorted_times) * p))] / 1000


def run_case(args, case, round_number):
    name, max_sources, forged, period = case
    port, admin = free_port(), free_port()
    backend = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    backend.bind(("127.0.0.1", 0))
    backend.settimeout(1.0)
    work = Path(tempfile.mkdtemp(prefix="full-table-latency-"))
    config = work / "snirelay.toml"
    config.write_text(CONFIG.format(
        port=port, admin=admin, backend=backend.getsockname()[1],
        max_sources=max_sources, period=period,
    ))
    relay = subprocess.Popen(
        [args.relay, "run", "--config", str(config), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(admin, relay, SERIES)
        if forged:
            target = min(forged, max_sources) * (9 if period == "10s" else 10) // 10
            fill(admin, port, forged, target, args.flood_rate)
        # The warm-up's probes use addresses of their own (from 60,000 on).
        probes(port, backend, args.warm_up, args.rate, 60_000)
        before = metrics(admin, SERIES)
        times = probes(port, backend, args.probes, args.rate, round_number * args.probes)
        after = metrics(admin, SERIES)
    finally:
        relay.terminate()
        try:
            relay.wait(timeout=40)
        except subprocess.TimeoutExpired:
            relay.kill()
        backend.close()
    relayed = sorted(t for t in times if t is not None)
    row = {
        "p50": percentile(relayed, 0.50),
        "p90": percentile(relayed, 0.90),
        "p99": percentile(relayed, 0.99),
        "p99.9": percentile(relayed, 0.999),
        "lost": len(times) - len(relayed),
        "tracked": (
            before.get("snirelay_admission_sources", 0),
            after.get("snirelay_admission_sources", 0),
        ),
        "evicted": after.get("snirelay_admission_sources_evicted_total", 0),
    }
    print(
        f"round {round_number + 1} {name:>14}: p50 {row['p50']:7.1f} p90 {row['p90']:7.1f} "
        f"p99 {row['p99']:7.1f} p99.9 {row['p99.9']:8.1f} us; not relayed {row['lost']}; "
        f"tracked {row['tracked'][0]:,.0f} -> {row['tracked'][1]:,.0f}, evicted {row['evicted']:,.0f}",
        flush=True,
    )
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relay", default="target/release/snirelay")
    parser.add_argument("--probes", type=int, default=2000)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--rate", type=int, default=100, help="probes a second")
    parser.add_argument("--flood-rate", type=int, default=25_000, help="forged datagrams a second")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES),
                        help="comma-separated case names")
    args = parser.parse_args()
    wanted = [c for c in CASES if c[0] in args.cases.split(",")]

    print(f"CPU: {cpu_model()}; {args.probes} probes a case at {args.rate}/s, {args.rounds} rounds")
    rows = {case[0]: [] for case in wanted}
    for round_number in range(args.rounds):
        for case in wanted:
            rows[case[0]].append(run_case(args, case, round_number))
    print("medians over rounds (us):")
    base = statistics.median(r["p99"] for r in rows["empty"]) if "empty" in rows else None
    for name, runs in rows.items():
        medians = {k: statistics.median(r[k] for r in runs) for k in ("p50", "p90", "p99", "p99.9")}
        ratio = f"; p99 {medians['p99'] / base:.2f}x empty's" if base else ""
        print(
            f"{name:>14}: p50 {medians['p50']:.1f} p90 {medians['p90']:.1f} p99 {medians['p99']:.1f} "
            f"p99.9 {medians['p99.9']:.1f}{ratio}"
        )


if __name__ == "__main__":
    main()
