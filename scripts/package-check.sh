#!/usr/bin/env bash
# Package check: builds the static binary and the .deb exactly as docs/operations.md's
# "Install" section does, and checks them without booting anything. Run by
# .ci/run after the tests, and by scripts/field-test.sh before it boots a VM.
# Run as root (chroot) from anywhere in the repository:
#
#   scripts/package-check.sh
#
# 1. The static binary: `RUSTFLAGS="-C target-feature=+crt-static" cargo
#    build --release --locked --target x86_64-unknown-linux-gnu --bin
#    snirelay`; `file` must say static-pie linked and `ldd` statically
#    linked (or not a dynamic executable).
# 2. An empty chroot holding only the binary and a config (no libc, no
#    /etc, no /dev, no /proc): `snirelay check` prints `ok`; `snirelay run`
#    on the packaged config (ports moved to 127.0.0.1:0) logs `ready`
#    within 60 s, then SIGTERM to its PID: it logs `stopped` and exits 0
#    within 60 s.
# 3. The .deb: `cargo deb --no-build --target x86_64-unknown-linux-gnu
#    --strip`. `dpkg-deb -c` lists exactly the files docs/operations.md says the
#    package installs (EXPECTED_FILES below, no more, no fewer);
#    `dpkg-deb -I` names /etc/snirelay/snirelay.toml as its one conffile,
#    carries postinst, prerm and postrm, and depends on no library package.
# 4. The binary inside the .deb, extracted: static-pie linked and stripped,
#    and it reports the same `--version` as the binary built in step 1.
#
# Prints one line per check, then the .deb's path on a line `deb: PATH`;
# exits 1 naming the first check that failed, or a missing tool. Installs
# nothing: .ci/install-deps and scripts/field-test.sh install `file` and
# cargo-deb.
set -euo pipefail
cd "$(dirname "$0")/.."
triple=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
bin=$CARGO_TARGET_DIR/$triple/release/snirelay
work=$(mktemp -d /tmp/snirelay-package.XXXXXX)
relay_pid=""
cleanup() {
    if [ -n "$relay_pid" ] && kill -0 "$relay_pid" 2>/dev/null; then kill -9 "$relay_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
checks=0
pass() { checks=$((checks + 1)); echo "  [PASS] $1: $2"; }
fail() { echo "  [FAIL] $1: $2" >&2; echo "package check failed at $1" >&2; exit 1; }

# What docs/operations.md's "Install" section says the package installs, as dpkg-deb -c
# lists it (cargo-deb adds the copyright file and the units from packaging/).
EXPECTED_FILES="\
./etc/snirelay/snirelay.toml
./usr/bin/snirelay
./usr/lib/systemd/system/snirelay-h3.socket
./usr/lib/systemd/system/snirelay-tls.socket
./usr/lib/systemd/system/snirelay.service
./usr/libexec/snirelay/snirelay-reload
./usr/sbin/snirelay-upgrade
./usr/share/doc/snirelay/README.md
./usr/share/doc/snirelay/copyright
./usr/share/doc/snirelay/docs/admission.md
./usr/share/doc/snirelay/docs/backends.md
./usr/share/doc/snirelay/docs/commands.md
./usr/share/doc/snirelay/docs/config-keys.md
./usr/share/doc/snirelay/docs/configuration.md
./usr/share/doc/snirelay/docs/design.md
./usr/share/doc/snirelay/docs/fingerprints.md
./usr/share/doc/snirelay/docs/migrating-from-haproxy.md
./usr/share/doc/snirelay/docs/operations.md
./usr/share/doc/snirelay/docs/pangolin.md
./usr/share/doc/snirelay/docs/proxy-protocol.md
./usr/share/doc/snirelay/docs/quic.md
./usr/share/doc/snirelay/examples/cloud-init.yaml
./usr/share/doc/snirelay/examples/grafana-dashboard.json
./usr/share/man/man1/snirelay-certs.1.gz
./usr/share/man/man1/snirelay-check.1.gz
./usr/share/man/man1/snirelay-ctl.1.gz
./usr/share/man/man1/snirelay-import-haproxy.1.gz
./usr/share/man/man1/snirelay-probe.1.gz
./usr/share/man/man1/snirelay-run.1.gz
./usr/share/man/man1/snirelay.1.gz
./usr/share/man/man5/snirelay.toml.5.gz
./usr/share/man/man8/snirelay-upgrade.8.gz"

for tool in cargo cargo-deb file ldd chroot dpkg-deb timeout; do
    command -v "$tool" >/dev/null || fail tools "$tool is not installed (.ci/install-deps installs it)"
done
[ "$(id -u)" = 0 ] || fail tools "run as root: the chroot check needs it"

# --- 1. The static binary, as docs/operations.md builds it --------------------
t=$(date +%s)
# docs/operations.md's command, word for word (tests/it/packaging.rs compares them).
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
    --target x86_64-unknown-linux-gnu --bin snirelay
build_seconds=$(($(date +%s) - t))
version=$("$bin" --version)
pass build "$version, $(du -h "$bin" | cut -f1) unstripped, built in ${build_seconds} s"
file_out=$(file -b "$bin")
ldd_out=$(ldd "$bin" 2>&1 || true)
[[ "$file_out" == *"static-pie linked"* ]] || fail static_binary "file says: $file_out"
[[ "$ldd_out" == *"statically linked"* || "$ldd_out" == *"not a dynamic executable"* ]] ||
    fail static_binary "ldd says: $ldd_out"
pass static_binary "file: ${file_out%%, BuildID*}; ldd: $(echo "$ldd_out" | tr -d '\t')"

# --- 2. An empty chroot: the binary and its config, nothing else --------------------
root=$work/chroot
mkdir -p "$root/etc/snirelay"
cp "$bin" "$root/snirelay"
cp packaging/snirelay.toml "$root/etc/snirelay/snirelay.toml"
check_out=$(chroot "$root" /snirelay check --config /etc/snirelay/snirelay.toml 2>"$work/check.err") ||
    fail chroot_check "snirelay check exited non-zero: $check_out $(cat "$work/check.err")"
[ "$check_out" = ok ] || fail chroot_check "snirelay check printed: $check_out"
# stderr: nothing, or the descriptor warning, which is about this machine's
# RLIMIT_NOFILE (the packaged unit sets LimitNOFILE=1048576).
check_err=$(cat "$work/check.err")
case "$check_err" in
    "" | "warning: [global] max_connections = "*" needs "*" descriptors"*) ;;
    *) fail chroot_check "snirelay check wrote to stderr: $check_err" ;;
esac
pass chroot_check "in an empty chroot ($(cd "$root" && find . -type f | sort | tr '\n' ' ')) check says '$check_out'${check_err:+ (and, for the descriptor limit here: $check_err)}"
# The packaged config on ports nobody else holds.
sed -e 's/0\.0\.0\.0:443/127.0.0.1:0/; s/, "\[::\]:443"//; s/127\.0\.0\.1:9901/127.0.0.1:0/' \
    packaging/snirelay.toml >"$root/etc/snirelay/run.toml"
grep -q '127.0.0.1:0' "$root/etc/snirelay/run.toml" || fail chroot_run "could not move the packaged ports"
chroot "$root" /snirelay run --config /etc/snirelay/run.toml --log-format json >"$work/run.log" 2>&1 &
relay_pid=$!
t=$(date +%s%N)
ready=no
for _ in $(seq 600); do # 60 s at most
    grep -q '"message":"ready"' "$work/run.log" && { ready=yes; break; }
    kill -0 "$relay_pid" 2>/dev/null || break
    sleep 0.1
done
ready_ms=$((($(date +%s%N) - t) / 1000000))
[ "$ready" = yes ] || fail chroot_run "no ready line within 60 s (pid $relay_pid); log: $(tail -5 "$work/run.log")"
kill -TERM "$relay_pid"
stopped=no
for _ in $(seq 600); do # 60 s at most
    kill -0 "$relay_pid" 2>/dev/null || { stopped=yes; break; }
    sleep 0.1
done
[ "$stopped" = yes ] || fail chroot_run "still running 60 s after SIGTERM to pid $relay_pid"
rc=0
wait "$relay_pid" || rc=$?
relay_pid=""
[ "$rc" = 0 ] || fail chroot_run "exit status $rc after SIGTERM; log: $(tail -5 "$work/run.log")"
grep -q '"message":"stopped"' "$work/run.log" || fail chroot_run "no stopped line after SIGTERM; log: $(tail -5 "$work/run.log")"
pass chroot_run "run logged ready in ${ready_ms} ms; after SIGTERM it logged stopped and exited 0"

# --- 3. The .deb, as docs/operations.md builds it -----------------------------
t=$(date +%s)
# docs/operations.md's command, word for word; it prints the package's path.
deb=$(cargo deb --no-build --target x86_64-unknown-linux-gnu --strip)
[ -f "$deb" ] || fail deb "cargo deb printed no package path: $deb"
pass deb "$(basename "$deb"), $(du -h "$deb" | cut -f1), packed in $(($(date +%s) - t)) s"
listed=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort)
if [ "$listed" != "$EXPECTED_FILES" ]; then
    fail deb_contents "dpkg-deb -c differs from docs/operations.md's list (< expected, > in the package):
$(diff <(echo "$EXPECTED_FILES") <(echo "$listed") | grep '^[<>]')"
fi
pass deb_contents "$(echo "$listed" | wc -l) files, exactly those docs/operations.md names"
info=$(dpkg-deb -I "$deb")
conffiles=$(dpkg-deb -I "$deb" conffiles 2>/dev/null || true)
[ "$conffiles" = /etc/snirelay/snirelay.toml ] || fail deb_control "conffiles: '$conffiles'"
for script in postinst prerm postrm; do
    grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? *$script( |$)" <<<"$info" || fail deb_control "no $script in: $info"
done
depends=$(dpkg-deb -f "$deb" Depends)
[ -z "$depends" ] || fail deb_control "the static binary needs no library package, yet Depends: $depends"
pass deb_control "Package $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version); conffile $conffiles; postinst, prerm, postrm; no Depends"

# --- 4. The packaged binary is the static one ---------------------------------
mkdir "$work/deb"
dpkg-deb -x "$deb" "$work/deb"
packaged=$work/deb/usr/bin/snirelay
packaged_file=$(file -b "$packaged")
[[ "$packaged_file" == *"static-pie linked"* && "$packaged_file" == *", stripped"* ]] ||
    fail deb_binary "file says: $packaged_file"
packaged_version=$("$packaged" --version)
[ "$packaged_version" = "$version" ] || fail deb_binary "reports '$packaged_version', the build '$version'"
pass deb_binary "/usr/bin/snirelay: ${packaged_file%%, BuildID*}, stripped, $(du -h "$packaged" | cut -f1); reports '$packaged_version'"

echo "package check: $checks checks passed in $(($(date +%s) - started)) s"
echo "deb: $deb"
