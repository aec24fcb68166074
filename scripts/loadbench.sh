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
#   scripts/loadbench.sh --only names   # 100,000 names (exact, and 10 %
#                                        # wildcards): RSS per name, start,
#                                        # check and reloads against HAProxy
#                                        # and nginx (and sozu with --sozu)
#                                        # (examples/namesbench.rs; alone)
#   scripts/loadbench.sh --only ceiling --runs 1
#                                        # the new-connection ceiling toward
#                                        # one backend address, 1 and 4
#                                        # egress source addresses (as root:
#                                        # a network namespace of its own)
#
# Needs haproxy (Debian: apt-get install haproxy); pass --haproxy none to
# measure snirelay alone.
#
# The anchors: Debian 12's HAProxy 2.6 (`haproxy`, the main table) and, each
# in the anchors' table with the version it answered, Debian 13's HAProxy
# 3.0 and nginx 1.26 (stream module, ssl_preread) and Debian 12's nginx 1.22.
# This script installs the Debian 13 builds itself, through
# .ci/install-trixie-tools (unpacked under /opt/snirelay-tools, or
# $SNIRELAY_TOOLS, beside the system's packages: root the first time, a
# fraction of a second once there), and passes them as `--anchor NAME=PATH`.
# The names phase runs namesbench once per HAProxy version, the nginx
# builds in the first. ANCHORS=0 in the environment, `--haproxy none` or
# `--only ceiling` leave the extra anchors out; `--proxy-v2` and `--threads N`
# (N > 1) leave nginx out (its stream proxy sends PROXY v1 only, and runs
# here as one process).
#
# sozu joins the rate, up, down, ping, idle and names phases only when
# asked (never in CI). When the path given to --sozu does not exist yet, this
# script installs sozu 2.3.3 from crates.io there (PATH's grandparent is
# cargo's --root; Debian's protobuf-compiler first, as root, if protoc is
# missing), which takes some minutes:
#   scripts/loadbench.sh --only rate,up,down,idle --sozu /opt/sozu/bin/sozu
#   scripts/loadbench.sh --only names --sozu /opt/sozu/bin/sozu
#
# The rate phase takes two ephemeral ports per connection (client to proxy,
# proxy to backend) at some 14,000 connections/s, and on loopback a port in
# TIME_WAIT is reused only after a second: Linux's default range
# (32768-60999) runs out about a second into each phase, and connect(2)
# then stalls every connection in flight for 30-60 ms. As root, this script
# widens net.ipv4.ip_local_port_range to 1024-65535 for the run and puts
# the old range back when it ends; otherwise loadbench warns.
#
# The ceiling phase runs in a network namespace this script makes, with the
# kernel's default port range and tcp_tw_reuse = 0, so that a port the
# relay closed first stays in TIME_WAIT for 60 s as on a real network
# (loopback in the host namespace reuses it after a second). The namespace
# is deleted when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
sozu_path=""
previous=""
for arg in "$@"; do
    [ "$previous" = "--sozu" ] && sozu_path=$arg
    previous=$arg
done
if [ -n "$sozu_path" ] && [ ! -x "$sozu_path" ]; then
    if ! command -v protoc >/dev/null; then
        apt-get install -y -q protobuf-compiler
    fi
    cargo install sozu --version =2.3.3 --locked --root "$(dirname "$(dirname "$sozu_path")")"
    [ -x "$sozu_path" ] || { echo "sozu did not install as $sozu_path" >&2; exit 1; }
fi
tools=${SNIRELAY_TOOLS:-/opt/snirelay-tools}
anchors=()
haproxy_3=""
case " $* " in
*" --haproxy none "* | *" ceiling "*) ;;
*)
    if [ "${ANCHORS:-1}" != 0 ]; then
        bash .ci/install-trixie-tools
        haproxy_3=$tools/bin/haproxy-3.0
        anchors+=(--anchor "haproxy-3.0=$haproxy_3")
        threads=1
        previous=""
        for arg in "$@"; do
            [ "$previous" = "--threads" ] && threads=$arg
            previous=$arg
        done
        case " $* " in
        *" --proxy-v2 "*) ;;
        *)
            if [ "$threads" = 1 ]; then
                anchors+=(--anchor "nginx-1.26=$tools/bin/nginx-1.26")
                [ -x /usr/sbin/nginx ] && anchors+=(--anchor nginx-1.22=/usr/sbin/nginx)
            fi
            ;;
        esac
    fi
    ;;
esac
case " $* " in
*" names "* | *",names"* | *"names,"*)
    # The names phase runs alone: processes started on 100,000 names, no
    # traffic (examples/namesbench.rs), once per HAProxy version.
    cargo build --release --bin snirelay --example namesbench
    haproxy_2=/usr/sbin/haproxy
    previous=""
    for arg in "$@"; do
        [ "$previous" = "--haproxy" ] && haproxy_2=$arg
        previous=$arg
    done
    [ "$haproxy_2" = none ] || echo "names phase against $("$haproxy_2" -v | sed -n 1p)"
    # nginx's rows come with the first run only: they do not depend on the
    # HAProxy version.
    nginx=()
    if [ -n "$haproxy_3" ]; then
        nginx+=(--nginx "nginx-1.26=$tools/bin/nginx-1.26")
        [ -x /usr/sbin/nginx ] && nginx+=(--nginx nginx-1.22=/usr/sbin/nginx)
    fi
    target/release/examples/namesbench --relay target/release/snirelay "$@" "${nginx[@]}"
    if [ -n "$haproxy_3" ]; then
        echo "names phase against $("$haproxy_3" -v | sed -n 1p)"
        target/release/examples/namesbench --relay target/release/snirelay "$@" --haproxy "$haproxy_3"
    fi
    exit
    ;;
esac
cargo build --release --bin snirelay --example loadbench
case " $* " in
*ceiling*)
    ns="snirelay-ceiling-$$"
    ip netns add "$ns"
    trap 'ip netns del "$ns"' EXIT
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_tw_reuse=0 net.ipv4.tcp_max_tw_buckets=1048576
    ip netns exec "$ns" target/release/examples/loadbench --relay target/release/snirelay --haproxy none "$@"
    exit
    ;;
esac
ports=/proc/sys/net/ipv4/ip_local_port_range
if [ -w "$ports" ]; then
    old_range=$(cat "$ports")
    trap 'echo "$old_range" > "$ports"' EXIT
    echo "1024 65535" > "$ports"
fi
target/release/examples/loadbench --relay target/release/snirelay "${anchors[@]}" "$@"
