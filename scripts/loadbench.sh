#!/usr/bin/env bash
# Load benchmark: snirelay vs HAProxy vs no proxy, on loopback only.
# Builds the release binary and the loadbench example, then runs it; every
# phase is bounded in time (about 6 minutes with the defaults: 3 runs).
#
#   scripts/loadbench.sh                 # 3 runs, 10 s phases, 1 thread each
#   scripts/loadbench.sh --threads 2     # any loadbench flag passes through
#   scripts/loadbench.sh --only rate,ping --runs 5
#   scripts/loadbench.sh --only rate --pin 0,1 --closer backend
#                                        # proxy alone on CPU 0, load on
#                                        # CPU 1, with a per-connection census
#                                        # (needs taskset, ss, perf)
#   scripts/loadbench.sh --only rate --pin 0,1 --runs 1 --seconds 2 --slices 12
#                                        # the rate phase as 12 ABBA pairs of
#                                        # 2 s slices: per-pair ratios with a
#                                        # 95 % confidence interval
#
# Needs haproxy (Debian: apt-get install haproxy); pass --haproxy none to
# measure snirelay alone.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin snirelay --example loadbench
exec target/release/examples/loadbench --relay target/release/snirelay "$@"
