#!/usr/bin/env python3
"""Memory of the admission tables under a flood of forged sources, measured
from outside.

Starts the relay (a release build) with a quic listener whose limits are
`attempts_per_source = 30`, `attempts_period = "1h"` and
`connections_per_source = 50` (and `max_sources` as given, default the
relay's own), then sends one 1,200-byte QUIC long-header datagram from
each of N distinct loopback addresses (127.16.0.1 on), through a raw
socket that writes the forged source address into each IPv4 header, as a
flood from the internet arrives: no socket per source, and as fast as one
Python thread can write, paced to `--rate` datagrams a second so that the
relay's socket buffer is not simply overrun. Prints the relay's RSS before,
right after the flood and once the sweep (every 10 s) has run, with the
listener's `snirelay_admission_sources` and
`snirelay_admission_sources_evicted_total`, the datagrams the relay read
(`snirelay_connections_accepted_total`) and the CPU model.

Needs root (a raw socket). Traffic stays on loopback; every loop is
bounded; the relay it started is ended by PID.

    scripts/forged-sources.py --relay target/release/snirelay --sources 600000
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchproc import cpu_model, free_port, metrics, rss_kib, wait_ready
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
{max_sources}

[[route]]
sni = ["app.localhost"]
backend = "q"

[backend.q]
addresses = ["127.0.0.1:9"]
"""


# The listener's series this script prints.
SERIES = (
    'snirelay_admission_sources{listener="quic"}',
    'snirelay_admission_sources_evicted_total{listener="quic"}',
    'snirelay_connections_accepted_total{listener="quic",protocol="quic"}',
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relay", default="target/release/snirelay")
    parser.add_argument("--sources", type=int, default=600_000)
    parser.add_argument("--rate", type=int, default=40_000, help="datagrams a second")
    parser.add_argument("--max-sources", type=int, help="max_sources (default: the relay's)")
    parser.add_argument("--period", default="1h", help="attempts_period (a source is kept two periods)")
    args = parser.parse_args()

    port, admin = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="forged-sources-"))
    config = work / "snirelay.toml"
    max_sources = f"max_sources = {args.max_sources}" if args.max_sources else ""
    config.write_text(
        CONFIG.format(port=port, admin=admin, max_sources=max_sources, period=args.period)
    )
    relay = subprocess.Popen(
        [args.relay, "run", "--config", str(config), "--log-level", "warn"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(admin, relay, SERIES)
        time.sleep(1)  # let the start-up allocations settle before the base line
        before = rss_kib(relay.pid)
        took = flood(port, args.sources, args.rate)
        right_after = rss_kib(relay.pid)
        # One sweep (every 10 s) reports the tables; with a short period,
        # a second one has forgotten the sources.
        time.sleep(12 if args.period == "1h" else 22)
        swept = rss_kib(relay.pid)
        values = metrics(admin, SERIES)
        read = values.get("snirelay_connections_accepted_total", 0)
        print(f"CPU: {cpu_model()}")
        print(f"{args.sources} forged sources in {took:.1f} s ({args.sources / took:,.0f}/s), {read:,.0f} read by the relay")
        print(f"RSS before {before / 1024:.1f} MiB; right after +{(right_after - before) / 1024:.1f} MiB; after a sweep +{(swept - before) / 1024:.1f} MiB")
        print(f"tracked {values.get('snirelay_admission_sources', 0):,.0f}, evicted {values.get('snirelay_admission_sources_evicted_total', 0):,.0f}")
    finally:
        relay.terminate()
        try:
            relay.wait(timeout=40)
        except subprocess.TimeoutExpired:
            relay.kill()


if __name__ == "__main__":
    main()
