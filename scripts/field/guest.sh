#!/bin/bash
# The checks of scripts/field-test.sh, run as root inside the booted guest
# (started by the image's field-runner.service once cloud-init has finished,
# from the FIELDTEST disk that also holds loader.py and the next .deb).
# Prints "CHECK|name|PASS or FAIL|detail" lines, free-form "LOG" lines and,
# at the end, "DONE". Every wait is bounded.
set -u
here=$(cd "$(dirname "$0")" && pwd)
loader="python3 $here/loader.py"
conf=/etc/snirelay/snirelay.toml
t0=$(date +%s)

check() { # name PASS|FAIL detail
    echo "CHECK|$1|$2|$3"
}
ok_if() { # name detail command...
    local name=$1 detail=$2
    shift 2
    if "$@"; then check "$name" PASS "$detail"; else check "$name" FAIL "$detail"; fi
}
log() { echo "LOG $*"; }
mainpid() { systemctl show -p MainPID --value snirelay; }
# Waits up to $1 seconds for the journal of this boot to have a line
# matching $2 (a grep -E pattern) after cursor file $3.
journal_wait() {
    local i=0
    while [ "$i" -lt $(($1 * 5)) ]; do
        journalctl -u snirelay -o cat --no-pager --after-cursor="$(cat "$3")" 2>/dev/null | grep -qE "$2" && return 0
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}
cursor() { journalctl -u snirelay -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p' >"$1"; }
# A load (seconds, workers) in the background; its JSON lands in file $3.
load_bg() {
    timeout $(($1 + 30)) $loader load "$1" "$2" >"$3" 2>&1 &
    load_pid=$!
}
clean_load() { # json-file -> true when ok > 0 and nothing refused/reset/timed out
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if c["ok"]>0 and c["refused"]==0 and c["reset"]==0 and c["timeout"]==0 and c["other"]==0 else 1)' "$1"
}

# --- 1. The cloud-init boot -------------------------------------------------
# boot-finished is written at the very end of cloud-final (runcmd included);
# `cloud-init status --wait` returns as soon as any stage reports an error.
for _ in $(seq 1200); do
    [ -e /var/lib/cloud/instance/boot-finished ] && break
    sleep 1
done
status=$(timeout 60 cloud-init status --long 2>&1)
first=$(echo "$status" | sed -n 's/^status: //p')
ok_if cloud_init "status $first; $(echo "$status" | grep -m1 -i 'detail' -A1 | tail -1 | tr -s ' ')" [ "$first" = done ]
log "boot to cloud-init done: $(cut -d' ' -f1 /proc/uptime) s of uptime"
v1=$(dpkg-query -W -f='${Version}' snirelay 2>/dev/null)
ok_if package_installed "snirelay $v1" [ -n "$v1" ]
active=$(systemctl is-active snirelay)
status_text=$(systemctl show -p StatusText --value snirelay)
ok_if active_ready "is-active=$active, sd_notify STATUS=\"$status_text\" (Type=notify: active means READY=1 arrived)" \
    [ "$active" = active -a "$status_text" = serving ]
ok_if readyz "$(curl -fsS -m 5 http://127.0.0.1:9901/readyz 2>&1)" curl -fsS -m 5 -o /dev/null http://127.0.0.1:9901/readyz
rules=$(nft list chain inet filter input 2>&1)
accepts=$(echo "$rules" | grep -E 'dport .* accept' | sed 's/^[[:space:]]*//' | tr '\n' ';')
ok_if firewall_rules "input policy drop; port accepts: $accepts" \
    bash -c '[[ "$1" == *"policy drop;"* ]] && [ "$2" = "tcp dport 443 accept;ip saddr 198.51.100.0/24 tcp dport 22 accept;" ]' _ "$rules" "$accepts"
log "listening TCP sockets: $(ss -Htln | awk '{print $4}' | sort -u | tr '\n' ' ')"

# --- 2. Probes from outside (the host): 443 answers, 22 and 8080 do not ---
timeout 60 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(16); s.settimeout(60)
while True:
    c, _ = s.accept(); c.sendall(b"OPEN\n"); c.close()
' >/dev/null 2>&1 &
probe_listener=$!
sleep 1
echo "PROBE-READY"
sleep 20
kill "$probe_listener" 2>/dev/null

# --- 3. Reload: a changed route applies, a broken file is rejected --------
for port_label in "9001 A" "9002 B"; do
    set -- $port_label
    timeout 1500 $loader backend "$1" "$2" >/dev/null 2>&1 &
done
field_config() { # backend port
    cat <<CONF
# Field test: the cloud-init configuration with a local origin.
[global]
max_connections = 20000
drain_timeout = "5s"

[admin]
listen = "127.0.0.1:9901"

[[listener]]
name = "tls"
listen = ["0.0.0.0:443", "[::]:443"]
client_hello_timeout = "5s"
idle_timeout = "5m"
no_sni = "reject"

[[route]]
name = "origin"
sni = ["example.com", "*.example.com"]
backend = "origin"

[backend.origin]
addresses = ["127.0.0.1:$1"]
connect_timeout = "5s"
CONF
}
sleep 1
cursor /tmp/c0
field_config 9001 >"$conf"
systemctl reload snirelay
journal_wait 10 '"reload applied"' /tmp/c0
first_label=$($loader once example.com)
cursor /tmp/c1
field_config 9002 >"$conf"
reload_rc=0
systemctl reload snirelay || reload_rc=$?
journal_wait 10 '"reload applied"' /tmp/c1
second_label=$($loader once example.com)
ok_if reload_route "systemctl reload rc=$reload_rc; origin 9001 answered $first_label, after the route changed to 9002: $second_label" \
    [ "$first_label" = A -a "$second_label" = B ]
cursor /tmp/c2
printf '[global]\nbogus = 1\n' >"$conf"
systemctl reload snirelay
if journal_wait 10 'reload rejected' /tmp/c2; then rejected=yes; else rejected=no; fi
after=$($loader once example.com)
ok_if reload_broken "journal 'reload rejected': $rejected; is-active=$(systemctl is-active snirelay); still serving: $after" \
    [ "$rejected" = yes -a "$after" = B -a "$(systemctl is-active snirelay)" = active ]
field_config 9002 >"$conf"
systemctl reload snirelay
sleep 1
conf_sum=$(sha256sum "$conf" | cut -d' ' -f1)

# --- 4. Package upgrade under load: postinst runs snirelay-upgrade --------
old=$(mainpid)
# The version the installed binary reports and the one the running process
# reports (its snirelay_build_info metric), before and after.
running_version() { curl -fsS -m 5 http://127.0.0.1:9901/metrics | sed -n 's/^snirelay_build_info{version="\([^"]*\)"}.*/\1/p'; }
file_before=$(snirelay --version)
running_before=$(running_version)
cursor /tmp/c3

load_bg 20 16 /tmp/load-upgrade
sleep 5
apt_out=$(DEBIAN_FRONTEND=noninteractive timeout 120 apt-get install -y "$here"/snirelay_next.deb </dev/null 2>&1)
apt_rc=$?
wait "$load_pid"
new=$(mainpid)
v2=$(dpkg-query -W -f='${Version}' snirelay)
gone=no
for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || { gone=yes; break; }; sleep 0.1; done
log "apt-get install: $(echo "$apt_out" | grep -E 'snirelay-upgrade|Setting up|conffile' | tr '\n' ' ')"
clean() { clean_load "$1" && echo yes || echo no; }
all_yes() { for v in "$@"; do [ "$v" = yes ] || return 1; done; }
yn() { "$@" && echo yes || echo no; }
ok_if upgrade_deb "apt-get install rc=$apt_rc, $v1 -> $v2, MainPID $old -> $new, old pid exited: $gone, is-active=$(systemctl is-active snirelay)" \
    all_yes "$(yn [ "$apt_rc" = 0 ])" "$(yn [ "$old" != "$new" ])" "$gone" "$(yn systemctl is-active --quiet snirelay)" "$(yn [ "$v1" != "$v2" ])"
file_after=$(snirelay --version)
running_after=$(running_version)
ok_if upgrade_version "snirelay --version '$file_before' -> '$file_after'; the running relay's snirelay_build_info version '$running_before' -> '$running_after'" \
    all_yes "$(yn [ -n "$running_before" ])" "$(yn [ "$file_before" != "$file_after" ])" "$(yn [ "$running_before" != "$running_after" ])" \
    "$(yn [ "$file_after" = "snirelay $running_after" ])" "$(yn [ "$file_before" = "snirelay $running_before" ])"
ok_if upgrade_zero_refused "load during the upgrade: $(cat /tmp/load-upgrade)" clean_load /tmp/load-upgrade
ok_if upgrade_in_journal "journal: new process took over, old one drained, both under the unit" \
    journal_wait 5 'took over the listening sockets' /tmp/c3
ok_if conffile_kept "/etc/snirelay/snirelay.toml sha256 ${conf_sum:0:12} before, $(sha256sum "$conf" | cut -c1-12) after" \
    [ "$conf_sum" = "$(sha256sum "$conf" | cut -d' ' -f1)" ]
ok_if upgraded_serves "$($loader once example.com)" [ "$($loader once example.com)" = B ]

# --- 5. snirelay-upgrade by hand, under load ------------------------------
old=$(mainpid)
load_bg 15 16 /tmp/load-upgrade2
sleep 4
up_out=$(timeout 120 snirelay-upgrade 2>&1)
up_rc=$?
wait "$load_pid"
new=$(mainpid)
ok_if upgrade_script "snirelay-upgrade rc=$up_rc ($(echo "$up_out" | tr '\n' ' ')); MainPID $old -> $new; load $(cat /tmp/load-upgrade2)" \
    all_yes "$(yn [ "$up_rc" = 0 ])" "$(yn [ "$old" != "$new" ])" "$(clean /tmp/load-upgrade2)"

# --- 6. Restart with the socket unit: nothing refused ---------------------
systemctl stop snirelay
systemctl start snirelay-tls.socket
systemctl start snirelay
sleep 1
activated=$(journalctl -u snirelay -o cat --no-pager -n 50 | grep -c '"socket":"activated')
load_bg 15 16 /tmp/load-restart
sleep 4
restart_start=$(date +%s%N)
systemctl restart snirelay
restart_rc=$?
restart_ms=$((($(date +%s%N) - restart_start) / 1000000))
wait "$load_pid"
ok_if restart_socket "socket unit active=$(systemctl is-active snirelay-tls.socket), activated listeners logged: $activated, restart rc=$restart_rc in ${restart_ms} ms; load $(cat /tmp/load-restart)" \
    all_yes "$(yn [ "$restart_rc" = 0 ])" "$(yn [ "$activated" -gt 0 ])" "$(clean /tmp/load-restart)" "$(yn systemctl is-active --quiet snirelay)"

# --- 7. Logs and sandbox ---------------------------------------------------
access=$(journalctl -u snirelay -o cat --no-pager | grep -c '"conn_id"')
sample=$(journalctl -u snirelay -o cat --no-pager | grep '"conn_id"' | tail -1)
ok_if journal_access "$access access lines; last: $sample" [ "$access" -gt 0 ]
exposure=$(systemd-analyze security snirelay 2>&1 | sed -n 's/.*Overall exposure level for snirelay.service: //p')
ok_if security_exposure "systemd-analyze security snirelay: $exposure" \
    awk -v e="${exposure%% *}" 'BEGIN { exit !(e != "" && e + 0 <= 2.0) }'
pid=$(mainpid)
uid=$(awk '/^Uid:/ {print $2}' /proc/"$pid"/status)
gid=$(awk '/^Gid:/ {print $2}' /proc/"$pid"/status)
writes=""
bad=0
# Writable: the runtime directory (takeover socket, upgrade requests) and
# the state directory (pushed local names); nothing else.
writable() { [ "$1" = /run/snirelay/x ] || [ "$1" = /var/lib/snirelay/x ]; }
for target in /etc/snirelay/x /usr/bin/x /var/lib/x /var/log/x /var/cache/x /root/x /home/x /run/x /run/snirelay/x /var/lib/snirelay/x; do
    if nsenter -t "$pid" -m -S "$uid" -G "$gid" sh -c "echo > $target" 2>/dev/null; then
        writes="$writes $target:written"
        writable "$target" || bad=1
        nsenter -t "$pid" -m sh -c "rm -f $target"
    else
        writes="$writes $target:denied"
        ! writable "$target" || bad=1
    fi
done
ok_if sandbox_writes "as uid $uid in the relay's mount namespace:$writes" [ "$bad" = 0 ]

# --- 8. Purge --------------------------------------------------------------
purge_out=$(DEBIAN_FRONTEND=noninteractive timeout 120 apt-get purge -y snirelay </dev/null 2>&1)
purge_rc=$?
left=$(ls -d /etc/snirelay /usr/bin/snirelay /usr/sbin/snirelay-upgrade /usr/libexec/snirelay /usr/lib/systemd/system/snirelay* /etc/systemd/system/*/snirelay* /run/snirelay /var/lib/private/snirelay /var/lib/snirelay 2>/dev/null | tr '\n' ' ')
state=$(dpkg-query -W -f='${db:Status-Abbrev}' snirelay 2>/dev/null)
ok_if purge "apt-get purge rc=$purge_rc; dpkg state '${state:-none}'; left behind: ${left:-nothing}; 443 listening: $(ss -Htln 'sport = :443' | wc -l)" \
    all_yes "$(yn [ "$purge_rc" = 0 ])" "$(yn [ -z "$left" ])" "$(yn [ -z "$state" -o "$state" = "un " ])" "$(yn [ "$(ss -Htln 'sport = :443' | wc -l)" = 0 ])"
journalctl -u snirelay -o cat --no-pager | grep -v '"conn_id"' | tail -12 | sed 's/^/LOG journal: /'
log "guest checks took $(($(date +%s) - t0)) s"
echo DONE
