#!/usr/bin/env bash
# Field test: the package, the unit, the upgrade and the cloud-init example
# proven on a booted Debian 12 system. Run as root from the repository:
#
#   scripts/field-test.sh
#
# Run by hand, not in CI (CI runs step 1's scripts/package-check.sh, not
# the VM). Measured on a 2-core machine without VMX (so under TCG); see
# docs/operations.md's "Field test" paragraph for the figures of the last run.
#
# 1. Installs its Debian packages by name (QEMU's system emulator and
#    qemu-utils together, debootstrap, genisoimage, lintian, file) and the
#    cargo-deb that .ci/install-deps pins, then checks every tool it needs
#    and stops naming any that is missing. Runs scripts/package-check.sh
#    (the static binary and the .deb as docs/operations.md builds them: file/ldd, an
#    empty chroot, the package's contents and binary), then builds a second,
#    different package: the binary rebuilt with SNIRELAY_VERSION=<version>+next
#    and packed as <version>+next-1, so the upgrade in the guest goes from
#    one version to the next. Runs lintian on the first.
# 2. Makes (once, cached in $SNIRELAY_FIELD_CACHE, default
#    /var/cache/snirelay-field) a Debian 12 root file system with debootstrap
#    from the Debian mirror this machine's own apt sources name
#    (scripts/field/apt-mirror.py; SNIRELAY_FIELD_MIRROR overrides it), with
#    Debian's kernel package, cloud-init and openssh-server, as one raw ext4
#    image. Each run boots a copy-on-write overlay of it, so the image stays
#    fresh.
# 3. Boots it with QEMU, with KVM when the CPU offers it, else with QEMU's
#    emulation (TCG) (user networking; 443, 22 and 8080 forwarded from
#    host loopback) and a NoCloud seed whose user-data is
#    packaging/cloud-init.yaml with only its documented placeholders filled:
#    SNIRELAY_DEB_URL (the first package, served over HTTP from the host
#    at 10.0.2.2) and SNIRELAY_DEB_SHA256. A second disk (label FIELDTEST)
#    carries scripts/field/guest.sh, loader.py and the second package; the
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
# them out, CI does not boot VMs), installed by name and together, QEMU's
# two at the one version: on a machine whose image carried a newer
# qemu-utils (from backports) than the qemu-system-x86 its sources offer,
# installing qemu-system-x86 alone removed qemu-img, and installing both
# unpinned is refused (qemu-utils Breaks the older qemu-system-common), so
# qemu-utils is moved to qemu-system-x86's version (a downgrade there).
# Every tool is checked after the install, by command, and a missing one
# stops the run naming it.
packages=(qemu-system-x86 qemu-utils debootstrap genisoimage lintian file openssl python3 e2fsprogs)
installed() { dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null | sed -n 's/^install ok installed //p'; }
missing=()
for p in "${packages[@]}"; do
    [ -n "$(installed "$p")" ] || missing+=("$p")
done
qemu_utils_was=$(installed qemu-utils)
if [ ${#missing[@]} -gt 0 ] || [ "$qemu_utils_was" != "$(installed qemu-system-x86)" ]; then
    apt-get update -qq
    qemu_version=$(apt-cache policy qemu-system-x86 | sed -n 's/^ *Candidate: //p')
    [ -n "$qemu_version" ] && [ "$qemu_version" != "(none)" ] || {
        echo "field test: apt offers no qemu-system-x86 (apt-cache policy qemu-system-x86)" >&2
        exit 1
    }
    by_name=()
    for p in "${packages[@]}"; do
        case $p in qemu-*) by_name+=("$p=$qemu_version") ;; *) by_name+=("$p") ;; esac
    done
    phase "installing ${by_name[*]} (missing: ${missing[*]:-none}; qemu-utils was ${qemu_utils_was:-none})"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades "${by_name[@]}" >/dev/null
fi
# cargo-deb: the version .ci/install-deps pins.
cargo_deb_version=$(sed -n 's/^cargo_deb_version=//p' .ci/install-deps)
if [ "$(cargo deb --version 2>/dev/null | awk '{print $NF}')" != "$cargo_deb_version" ]; then
    cargo install --locked --quiet cargo-deb --version "$cargo_deb_version"
fi
for tool in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils debootstrap:debootstrap \
    genisoimage:genisoimage lintian:lintian file:file openssl:openssl python3:python3 \
    mkfs.ext4:e2fsprogs cargo-deb:"cargo install cargo-deb" cargo:"a Rust toolchain" \
    dpkg-deb:dpkg chroot:coreutils; do
    if ! command -v "${tool%%:*}" >/dev/null; then
        echo "field test: ${tool%%:*} is missing after the install (it comes from ${tool#*:})" >&2
        exit 1
    fi
done

# The Debian mirror: the one this machine's own apt sources name for its
# Debian release (one-line .list files and deb822 .sources files), so the
# repository names none. SNIRELAY_FIELD_MIRROR overrides it.
if [ -n "${SNIRELAY_FIELD_MIRROR:-}" ]; then
    mirror=$SNIRELAY_FIELD_MIRROR
elif ! mirror=$(python3 scripts/field/apt-mirror.py); then
    echo "field test: no Debian mirror found in this machine's apt sources; set SNIRELAY_FIELD_MIRROR" >&2
    exit 1
fi
record mirror PASS "debootstrap from $mirror ($( [ -n "${SNIRELAY_FIELD_MIRROR:-}" ] && echo SNIRELAY_FIELD_MIRROR || echo "this machine's apt sources"))"

# The first package: scripts/package-check.sh builds the static binary and
# the .deb as docs/operations.md does and checks them (static, the empty chroot, the
# package's contents and its binary).
phase "building and checking the static binary and the package (scripts/package-check.sh)"
t=$(date +%s)
if ! package_out=$(scripts/package-check.sh 2>&1); then
    echo "$package_out"
    echo "field test: scripts/package-check.sh failed; nothing to boot" >&2
    exit 1
fi
while read -r line; do
    if [[ "$line" =~ ^\[(PASS|FAIL)\]\ ([a-z_]+):\ (.*)$ ]]; then
        record "${BASH_REMATCH[2]}" "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]}"
    fi
done <<<"$package_out"
cp "$(sed -n 's/^deb: //p' <<<"$package_out")" "$work/snirelay_1.deb"
first_seconds=$(($(date +%s) - t))

# The second package: a different build with a visible version change. The
# binary is rebuilt with SNIRELAY_VERSION (read at build time: src/lib.rs's
# VERSION) and packed with the package version raised to match.
phase "building the second package (a visible version change)"
t=$(date +%s)
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
next_version="$crate_version+next"
SNIRELAY_VERSION=$next_version RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --quiet --target "$triple" --bin snirelay
cargo deb --no-build --target "$triple" --strip --quiet --deb-version "$next_version-1" \
    --output "$work/snirelay_next.deb" >/dev/null
version1=$(dpkg-deb -f "$work/snirelay_1.deb" Version)
version2=$(dpkg-deb -f "$work/snirelay_next.deb" Version)
mkdir "$work/first" "$work/next"
dpkg-deb -x "$work/snirelay_1.deb" "$work/first"
dpkg-deb -x "$work/snirelay_next.deb" "$work/next"
reports1=$("$work/first/usr/bin/snirelay" --version)
reports2=$("$work/next/usr/bin/snirelay" --version)
binary1=$(sha256sum "$work/first/usr/bin/snirelay" | cut -c1-12)
binary2=$(sha256sum "$work/next/usr/bin/snirelay" | cut -c1-12)
ok_if two_builds "package $version1 (binary $binary1, '$reports1') -> $version2 (binary $binary2, '$reports2'); first build with its checks ${first_seconds} s, second $(($(date +%s) - t)) s" \
    bash -c 'dpkg --compare-versions "$1" gt "$2" && [ "$3" != "$4" ] && [ "$5" = "snirelay $6" ] && [ "$7" = "snirelay $8" ]' _ \
    "$version2" "$version1" "$binary2" "$binary1" "$reports2" "$next_version" "$reports1" "$crate_version"

lintian_out=$(lintian --no-tag-display-limit "$work/snirelay_1.deb" 2>&1 || true)
lintian_tags=$(echo "$lintian_out" | grep -E '^[EWIPX]: ' | awk '{print $1 $3}' | sort | uniq -c | awk '{printf "%s%s", sep, $2; sep=", "}')
# The findings explained in packaging/debian/README are expected; any
# other error fails.
expected=$(sed -n 's/^- \([a-z0-9-]*\):.*/\1/p' packaging/debian/README | paste -sd'|')
unexpected=$(echo "$lintian_out" | grep '^E:' | grep -v -E "${expected:-^$}" || true)
ok_if lintian "${lintian_tags:-clean}" [ -z "$unexpected" ]

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
            bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log"
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
    upgrade_deb upgrade_version upgrade_zero_refused upgrade_in_journal conffile_kept upgraded_serves upgrade_script \
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
