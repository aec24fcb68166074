#!/usr/bin/env bash
# User-space instructions per new connection, snirelay and HAProxy, counted
# by callgrind (valgrind): a count, not a time, so it is the same from run to
# run whatever else the machine does, and it moves with every change to the
# per-connection path.
#
#   scripts/callgrind-rate.sh                    # build, then measure both
#   RELAY=/path/to/snirelay scripts/callgrind-rate.sh   # another binary
#
# Each proxy runs under callgrind through the load benchmark's rate phase
# (examples/loadbench.rs: 64 clients, the captured hello, a 1 KiB reply,
# the client closes first) twice, for 4 s and for 12 s. The figure is the
# difference of the two runs' instruction totals over the difference of
# their connection counts, so start-up (configuration, HAProxy's CA store)
# cancels out and only the marginal cost of a connection is left. Under
# valgrind both proxies serve 1,000-2,000 connections/s. Needs valgrind
# and haproxy (Debian: apt-get install valgrind haproxy). About 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${RELAY:-}" ]; then
    cargo build --release --bin snirelay --example loadbench
    RELAY=target/release/snirelay
fi
loadbench=target/release/examples/loadbench
[ -x "$loadbench" ] || cargo build --release --example loadbench
for tool in valgrind callgrind_annotate /usr/sbin/haproxy; do
    command -v "$tool" > /dev/null || { echo "needs $tool" >&2; exit 1; }
done
work=$(mktemp -d /tmp/snirelay-callgrind.XXXXXX)
trap 'rm -rf "$work"' EXIT

# loadbench ends a proxy with SIGKILL, which would lose callgrind's output:
# the wrapper keeps valgrind as its own child, so the kill takes only the
# wrapper, and the proxy is stopped below with the signal it stops on.
wrapper() { # name binary
    cat > "$work/$1.sh" <<EOF
#!/usr/bin/env bash
valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$work/\$CG_RUN.$1.out" \\
    "$2" "\$@" 2> "$work/\$CG_RUN.$1.log" &
echo \$! > "$work/\$CG_RUN.$1.pid"
wait
EOF
    chmod +x "$work/$1.sh"
}
wrapper snirelay "$(realpath "$RELAY")"
wrapper haproxy /usr/sbin/haproxy

stop() { # run name signal
    local pid
    pid=$(cat "$work/$1.$2.pid")
    kill "-$3" "$pid" 2> /dev/null || true
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2> /dev/null || return 0
        sleep 0.1
    done
    echo "$2 under callgrind did not stop" >&2
    kill -KILL "$pid"
    exit 1
}

# Instructions in the event loop and everything it runs: for snirelay the
# runtime's block_on, for HAProxy run_poll_loop (both leave out start-up
# outside the loop; what is inside it cancels in the difference).
loop_ir() { # out-file function
    callgrind_annotate --inclusive=yes "$1" 2> /dev/null |
        awk -v f="$2" '!found && index($0, f) { gsub(",", "", $1); print $1; found = 1 }'
}

for seconds in 4 12; do
    CG_RUN=$seconds "$loadbench" --relay "$work/snirelay.sh" --haproxy "$work/haproxy.sh" \
        --only rate --runs 1 --seconds "$seconds" > "$work/$seconds.txt" 2>&1
    stop "$seconds" snirelay TERM
    stop "$seconds" haproxy USR1
done

for proxy in snirelay haproxy; do
    case $proxy in
        snirelay) function='runtime::Runtime::block_on [' ;;
        haproxy) function='run_poll_loop' ;;
    esac
    conns() { grep -E "^run 0 $proxy +rate" "$work/$1.txt" | sed -E 's/.*\(([0-9]+) conns\).*/\1/'; }
    n4=$(conns 4)
    n12=$(conns 12)
    i4=$(loop_ir "$work/4.$proxy.out" "$function")
    i12=$(loop_ir "$work/12.$proxy.out" "$function")
    echo "$proxy: $(( (i12 - i4) / (n12 - n4) )) instructions per connection" \
        "(runs of $n4 and $n12 connections)"
done
