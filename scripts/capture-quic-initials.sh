#!/bin/sh
# Captures the first flight of real QUIC clients into tests/data/quic/*.hex
# (one datagram per line, hex). Needs: chromium, ngtcp2-client (its `client`
# example is installed as /usr/bin/gtlsclient), and a Python with aioquic
# (PYTHON, default python3; e.g. a venv with `pip install aioquic`).
# Loopback only; every client runs under `timeout`.
set -eu
cd "$(dirname "$0")/.."
out=tests/data/quic
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# capture NAME CLIENT-COMMAND... (PORT in the command is replaced)
capture() {
    name=$1; shift
    rm -f "$tmp/port"
    python3 scripts/capture-quic-initials.py "$out/$name.hex" "$tmp/port" &
    catcher=$!
    i=0
    while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    port=$(cat "$tmp/port")
    cmd=$(printf '%s\n' "$*" | sed "s/PORT/$port/g")
    sh -c "timeout 10 $cmd" >/dev/null 2>&1 </dev/null || true
    wait "$catcher"
}

capture chromium "chromium --headless --no-sandbox --disable-gpu --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir=$tmp/chromium --enable-quic --origin-to-force-quic-on=chrome.example.com:PORT \
  --host-resolver-rules='MAP chrome.example.com 127.0.0.1' https://chrome.example.com:PORT/"

# ngtcp2's GnuTLS example client sends its host argument as SNI, and
# "localhost" for a numeric one (its --sni is not applied then).
capture ngtcp2 "gtlsclient --quiet --exit-on-first-stream-close --timeout=2s \
  127.0.0.1 PORT https://localhost:PORT/"

capture aioquic_v1 "$py scripts/aioquic-client.py PORT aioquic.example.com 1"
capture aioquic_v2 "$py scripts/aioquic-client.py PORT aioquic-v2.example.com 2"
