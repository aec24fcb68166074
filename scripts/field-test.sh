#!/usr/bin/env bash
# Field test: the package, the unit, the upgrade and the cloud-init example
# proven on a booted Debian 12 system. Run as root from the repository:
#
#   scripts/field-test.sh
#
# Run by hand, not in CI: measured on a 2-core machine without VMX (so under
# TCG), 586 s with the image cached and the dependencies built (build 223 s,
# boot to power-off 362 s); from a clean clone the release build (10 min)
# and the first debootstrap (8 min) come on top.
#
# 1. Builds the static release binary (crt-static, gnu target) and two .deb
#    packages of it with cargo-deb (revision 1, then "next": revision 2);
#    checks the binary with file/ldd, runs it in an empty chroot holding only
#    the binary and a config, and runs lintian on the package.
# 2. Makes (once, cached in $SNIRELAY_FIELD_CACHE, default
#    /var/cache/snirelay-field) a Debian 12 root file system with debootstrap
#    from deb.debian.org, with Debian's kernel package, cloud-init and
#    openssh-server, as one raw ext4 image. Each run boots a copy-on-write
#    overlay of it, so the image stays fresh.
# 3. Boots it with QEMU, with KVM when the CPU offers it, else with QEMU's
#    emulation (TCG) (user networking; 443, 22 and 8080 forwarded from
#    host loopback) and a NoCloud seed whose user-data is
#    packaging/cloud-init.yaml with only its documented placeholders filled:
#    SNIRELAY_DEB_URL (the revision-1 package, served over HTTP from the host
#    at 10.0.2.2) and SNIRELAY_DEB_SHA256. A second disk (label FIELDTEST)
#    carries scripts/field/guest.sh, loader.py and the revision-2 package; the
#    image's field-runner.service runs guest.sh after cloud-init and powers
#    off. guest.sh's results come back on the second serial port.
# 4. When the guest says so, probes 443 (answers TLS), 22 (SSH only from the
#    management prefix: no banner for the host) and 8080 (a listener the
#    firewall must hide) from the host.
# 5. Prints one table of every check and exits 1 if any failed or is missing.
#
# Without KVM it emulates rather than falling back to `systemd-nspawn
# --boot`, which would share the host's kernel and nftables and could show
# neither the kernel package booting nor the firewall. Every wait is bounded
# (SNIRELAY_FIELD_TIMEOUT seconds for the whole guest, default 1800); the VM
# and the HTTP server are killed by PID on every exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache=${SNIRELAY_FIELD_CACHE:-/var/cache/snirelay-field}
guest_timeout=${SNIRELAY_FIELD_TIMEOUT:-1800}
triple=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
work=$(mktemp -d /tmp/snirelay-field.XXXXXX)
started=$(date +%s)
qemu_pid=""
http_pid=""

results=()
record() { # name PASS|FAIL detail
    results+=("$1|$2|$3")
    echo "  [$2] $1: $3"
}
ok_if() {
    local name=$1 detail=$2
    shift 2
    if "$@"; then record "$name" PASS "$detail"; else record "$name" FAIL "$detail"; fi
}
cleanup() {
    [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null || true
    [ -n "$http_pid" ] && kill "$http_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
phase() { echo "== $(($(date +%s) - started)) s: $*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- 1. Build ----------------------------------------------------------------
# Its own Debian packages (not the test suite's: .ci/install-deps leaves
# them out, CI does not boot VMs).
needed=()
for pair in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils debootstrap:debootstrap \
    genisoimage:genisoimage lintian:lintian; do
    command -v "${pair%%:*}" >/dev/null || needed+=("${pair#*:}")
done
if [ ${#needed[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${needed[@]}" >/dev/null
fi
command -v cargo-deb >/dev/null || cargo install --locked --quiet cargo-deb
phase "building the static binary and the packages"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet \
    --target "$triple" --bin snirelay
bin=$CARGO_TARGET_DIR/$triple/release/snirelay
cargo deb --no-build --target "$triple" --strip --quiet --output "$work/snirelay_1.deb" >/dev/null
cargo deb --no-build --target "$triple" --strip --quiet --deb-revision 2 --output "$work/snirelay_next.deb" >/dev/null
version1=$(dpkg-deb -f "$work/snirelay_1.deb" Version)
version2=$(dpkg-deb -f "$work/snirelay_next.deb" Version)
record build PASS "$(basename "$bin") $(du -h "$bin" | cut -f1); packages $version1 and $version2 ($(du -h "$work/snirelay_1.deb" | cut -f1))"

file_out=$(file -b "$bin")
ldd_out=$(ldd "$bin" 2>&1 || true)
ok_if static_binary "file: ${file_out%%, BuildID*}; ldd: $ldd_out" \
    bash -c '[[ "$1" == *"static"* ]] && { [[ "$2" == *"statically linked"* ]] || [[ "$2" == *"not a dynamic executable"* ]]; }' _ "$file_out" "$ldd_out"
# An empty root: the binary, its config, nothing else (no libc, no /etc).
chroot_dir=$work/chroot
mkdir -p "$chroot_dir/etc/snirelay"
cp "$bin" "$chroot_dir/snirelay"
cp packaging/snirelay.toml "$chroot_dir/etc/snirelay/snirelay.toml"
check_out=$(chroot "$chroot_dir" /snirelay check --config /etc/snirelay/snirelay.toml 2>&1 || true)
sed -e 's/0\.0\.0\.0:443/127.0.0.1:0/; s/, "\[::\]:443"//; s/127\.0\.0\.1:9901/127.0.0.1:0/' \
    packaging/snirelay.toml >"$chroot_dir/etc/snirelay/run.toml"
run_out=$(timeout 5 chroot "$chroot_dir" /snirelay run --config /etc/snirelay/run.toml --log-format json 2>&1 || true)
ok_if static_chroot "in an empty chroot: check says '$check_out'; run logs $(echo "$run_out" | grep -c '"ready"') ready line(s) before the 5 s timeout stops it" \
    bash -c '[ "$1" = ok ] && [[ "$2" == *"\"message\":\"ready\""* ]]' _ "$check_out" "$run_out"
ls -A "$chroot_dir" >/dev/null

if command -v lintian >/dev/null; then
    lintian_out=$(lintian --no-tag-display-limit "$work/snirelay_1.deb" 2>&1 || true)
    lintian_tags=$(echo "$lintian_out" | grep -E '^[EWIPX]: ' | awk '{print $1 $3}' | sort | uniq -c | awk '{printf "%s%s", sep, $2; sep=", "}')
    # The findings explained in packaging/debian/README are expected; any
    # other error fails.
    expected=$(sed -n 's/^- \([a-z0-9-]*\):.*/\1/p' packaging/debian/README | paste -sd'|')
    unexpected=$(echo "$lintian_out" | grep '^E:' | grep -v -E "${expected:-^$}" || true)
    ok_if lintian "${lintian_tags:-clean}" [ -z "$unexpected" ]
else
    record lintian FAIL "lintian is not installed (apt-get install lintian)"
fi

# --- 2. The image --------------------------------------------------------------
# KVM when the CPU exposes VMX/SVM and /dev/kvm is usable; otherwise QEMU's
# own emulation (TCG): the same VM, kernel and checks, only slower.
if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
    accel=(-accel kvm -cpu host)
    accel_name="KVM"
else
    accel=(-accel tcg,thread=multi -cpu max)
    accel_name="TCG emulation (no VMX/SVM in /proc/cpuinfo, so /dev/kvm cannot run a guest)"
fi
mkdir -p "$cache"
image=$cache/debian12.img
if [ ! -e "$image" ]; then
    phase "debootstrap (once; cached in $cache)"
    rootfs=$cache/rootfs.tmp
    if [ ! -e "$rootfs/.complete" ]; then
        rm -rf "$rootfs"
        debootstrap --variant=minbase \
            --include=linux-image-amd64,systemd-sysv,udev,dbus,cloud-init,python3-cffi-backend,nftables,curl,ca-certificates,openssh-server,ifupdown,isc-dhcp-client,python3,openssl,iproute2,netbase,procps,kmod,util-linux \
            bookworm "$rootfs" http://deb.debian.org/debian >"$cache/debootstrap.log"
        touch "$rootfs/.complete"
    fi
    # (python3-cffi-backend is named because debootstrap does not resolve
    # the virtual package python3-cryptography needs.) Undo what debootstrap
    # may leave behind when interrupted: services must start in the guest.
    if [ -e "$rootfs/sbin/start-stop-daemon.REAL" ]; then
        mv "$rootfs/sbin/start-stop-daemon.REAL" "$rootfs/sbin/start-stop-daemon"
    fi
    rm -f "$rootfs/usr/sbin/policy-rc.d" "$rootfs/etc/resolv.conf"
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    # The test harness's one addition: run guest.sh from the FIELDTEST disk
    # after cloud-init, send its output to the second serial port, power off.
    install -m 755 /dev/stdin "$rootfs/usr/local/sbin/field-runner" <<'RUNNER'
#!/bin/sh
stty -F /dev/ttyS1 raw -echo 115200 2>/dev/null
mkdir -p /mnt/field
dev=$(blkid -L FIELDTEST) && mount -o ro "$dev" /mnt/field && timeout 1500 bash /mnt/field/guest.sh >/dev/ttyS1 2>&1
echo "RUNNER-END" >/dev/ttyS1
systemctl poweroff
RUNNER
    cat >"$rootfs/etc/systemd/system/field-runner.service" <<'UNIT'
[Unit]
Description=snirelay field test runner (guest.sh waits for cloud-init itself)
[Service]
Type=simple
ExecStart=/usr/local/sbin/field-runner
[Install]
WantedBy=multi-user.target
UNIT
    ln -sf /etc/systemd/system/field-runner.service "$rootfs/etc/systemd/system/multi-user.target.wants/field-runner.service"
    # What a cloud image's vendor config says: minbase has no generated
    # en_US.UTF-8, cloud-init's default locale; C.UTF-8 is built into glibc.
    echo "locale: C.UTF-8" >"$rootfs/etc/cloud/cloud.cfg.d/90-image-locale.cfg"
    echo "debian" >"$rootfs/etc/hostname"
    echo "/dev/vda / ext4 defaults 0 1" >"$rootfs/etc/fstab"
    cp -L "$rootfs/vmlinuz" "$cache/vmlinuz"
    cp -L "$rootfs/initrd.img" "$cache/initrd.img"
    rm -f "$rootfs/.complete"
    mkfs.ext4 -q -L root -d "$rootfs" "$image.tmp" 3G
    mv "$image.tmp" "$image"
    rm -rf "$rootfs"
fi

# --- 3. Boot ---------------------------------------------------------------------
phase "booting"
qemu-img create -q -f qcow2 -F raw -b "$image" "$work/overlay.qcow2"
mkdir -p "$work/seed" "$work/field" "$work/www"
cp "$work/snirelay_1.deb" "$work/www/snirelay.deb"
http_port=$(free_port)
python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$http_port" >"$work/http.log" 2>&1 &
http_pid=$!
sha=$(sha256sum "$work/www/snirelay.deb" | cut -d' ' -f1)
# The operator's file, with its two documented placeholders filled.
sed -e "s|SNIRELAY_DEB_URL|http://10.0.2.2:$http_port/snirelay.deb|; s|SNIRELAY_DEB_SHA256|$sha|" \
    packaging/cloud-init.yaml >"$work/seed/user-data"
diff <(grep -v -e SNIRELAY_DEB_URL -e SNIRELAY_DEB_SHA256 packaging/cloud-init.yaml) \
    <(grep -v -e "10.0.2.2:$http_port" -e "$sha" "$work/seed/user-data") >/dev/null
printf 'instance-id: snirelay-field-%s\nlocal-hostname: edge\n' "$(date +%s)" >"$work/seed/meta-data"
genisoimage -quiet -output "$work/seed.iso" -volid cidata -joliet -rock "$work/seed/user-data" "$work/seed/meta-data"
cp scripts/field/guest.sh scripts/field/loader.py "$work/field/"
cp "$work/snirelay_next.deb" "$work/field/snirelay_next.deb"
genisoimage -quiet -output "$work/field.iso" -volid FIELDTEST -joliet -rock "$work/field"
p443=$(free_port); p22=$(free_port); p8080=$(free_port)
boot_started=$(date +%s)
qemu-system-x86_64 "${accel[@]}" -smp 2 -m 1536 -nodefaults -display none -no-reboot \
    -kernel "$cache/vmlinuz" -initrd "$cache/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 quiet" \
    -drive file="$work/overlay.qcow2",if=virtio,format=qcow2 \
    -drive file="$work/seed.iso",if=virtio,format=raw,readonly=on \
    -drive file="$work/field.iso",if=virtio,format=raw,readonly=on \
    -netdev user,id=net0,hostfwd=tcp:127.0.0.1:$p443-:443,hostfwd=tcp:127.0.0.1:$p22-:22,hostfwd=tcp:127.0.0.1:$p8080-:8080 \
    -device virtio-net-pci,netdev=net0 \
    -serial file:"$work/console.log" -serial file:"$work/results.log" &
qemu_pid=$!
record boot_method PASS "QEMU $(qemu-system-x86_64 --version | head -1 | awk '{print $4}') with $accel_name, $(uname -m), kernel $(file -b "$cache/vmlinuz" | grep -o 'version [^ ]*')"

# --- 4. Probes from outside, then wait for the guest -----------------------------
probed=no
deadline=$((boot_started + guest_timeout))
while kill -0 "$qemu_pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
    if [ "$probed" = no ] && grep -q PROBE-READY "$work/results.log" 2>/dev/null; then
        probed=yes
        phase "probing the guest's ports from the host"
        tls=$(timeout 10 openssl s_client -connect "127.0.0.1:$p443" -servername unknown.test </dev/null 2>&1 || true)
        ok_if outside_443 "openssl s_client with an unlisted name: $(echo "$tls" | grep -o -m1 'SSL alert number [0-9]*' || echo no alert)" \
            grep -q 'unrecognized name' <<<"$tls"
        ssh=$(timeout 6 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p22; head -c 8 <&3" 2>/dev/null || true)
        ok_if outside_22 "SSH from outside the management prefix: ${ssh:-no banner (dropped)}" [ -z "$ssh" ]
        other=$(timeout 6 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p8080; head -c 5 <&3" 2>/dev/null || true)
        ok_if outside_8080 "a listener on 8080 in the guest: ${other:-no answer (dropped)}" [ -z "$other" ]
    fi
    sleep 1
done
if kill -0 "$qemu_pid" 2>/dev/null; then
    record guest_finished FAIL "no power-off within ${guest_timeout}s; killing pid $qemu_pid"
    kill "$qemu_pid"
    sleep 1
    kill -9 "$qemu_pid" 2>/dev/null || true
else
    wait "$qemu_pid" || true
fi
qemu_pid=""
guest_seconds=$(($(date +%s) - boot_started))
[ "$probed" = yes ] || record outside_probes FAIL "the guest never asked for them"
tr -d '\r' <"$work/results.log" >"$work/results.txt"
while IFS='|' read -r tag name status detail; do
    [ "$tag" = CHECK ] && record "$name" "$status" "$detail"
done <"$work/results.txt"
grep '^LOG ' "$work/results.txt" | sed 's/^LOG /  guest: /' || true
ok_if guest_finished "boot to power-off ${guest_seconds} s" grep -q '^DONE' "$work/results.txt"
for expected in cloud_init package_installed active_ready readyz firewall_rules reload_route reload_broken \
    upgrade_deb upgrade_zero_refused upgrade_in_journal conffile_kept upgraded_serves upgrade_script \
    restart_socket journal_access security_exposure sandbox_writes purge; do
    grep -q "^CHECK|$expected|" "$work/results.txt" || record "$expected" FAIL "not reported by the guest"
done
if ! grep -q '^DONE' "$work/results.txt"; then
    echo "--- guest output"; tail -40 "$work/results.txt"
    echo "--- console"; tail -40 "$work/console.log" | tr -d '\r'
fi

# --- 5. Summary --------------------------------------------------------------------
echo
printf '%-22s %-5s %s\n' CHECK RESULT DETAIL
failed=0
for row in "${results[@]}"; do
    IFS='|' read -r name status detail <<<"$row"
    printf '%-22s %-5s %s\n' "$name" "$status" "$detail"
    [ "$status" = PASS ] || failed=$((failed + 1))
done
echo "field test: ${#results[@]} checks, $failed failed, $(($(date +%s) - started)) s in all (guest ${guest_seconds} s)"
[ "$failed" = 0 ]
