#!/usr/bin/env bash
# A one-node Slurm on this machine, for the Slurm integration tests (tests/slurm_*.rs) and for
# trying `phasekv reproduce --emit-slurm` without a cluster. Installs Debian's munge, slurmctld,
# slurmd and slurm-client, writes a munge key and a minimal slurm.conf (proctrack/linuxproc,
# task/none, no accounting, this node's real CPU count and memory from `slurmd -C`), then starts
# munged, slurmctld and slurmd. Idempotent: a Slurm that already answers is left running; a
# half-installed or stopped one is completed and started. Needs root (CI runs as root).
#
#   scripts/slurm-local.sh          # install if needed, configure, start; prints `sinfo`
#   scripts/slurm-local.sh --stop   # stop the daemons this script starts
#
# Everything it writes: /etc/munge/munge.key (only if missing), /etc/slurm/slurm.conf (a
# previous one is kept as slurm.conf.phasekv-old if it differs), /var/spool/slurm{ctld,d},
# /var/log/slurm. Exits non-zero with a one-line reason when Slurm cannot be started.
set -euo pipefail

die() { echo "slurm-local: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts daemons)"

conf_dir=/etc/slurm
conf=$conf_dir/slurm.conf
log_dir=/var/log/slurm

# A daemon of ours runs (its pid file names a live process, not a zombie).
alive() {
    local pid
    pid=$(cat "/run/$1.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/status" ] && ! grep -q '^State:.*Z' "/proc/$pid/status"
}

stop() {
    for d in slurmd slurmctld; do
        if alive "$d"; then
            kill "$(cat "/run/$d.pid")"
        fi
    done
    for _ in $(seq 100); do
        alive slurmd || alive slurmctld || return 0
        sleep 0.1
    done
}

if [ "${1:-}" = "--stop" ]; then
    stop
    exit 0
fi

# Both daemons run, Slurm answers and the node takes jobs.
up() {
    command -v sinfo >/dev/null 2>&1 || return 1
    alive slurmctld && alive slurmd || return 1
    scontrol ping 2>/dev/null | grep -q "is UP" || return 1
    sinfo -h -N -o "%t" 2>/dev/null | grep -Eq "^(idle|mix|alloc)$"
}

t0=$(date +%s)
need=()
for p in munge slurmctld slurmd slurm-client; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "slurm-local: installing ${need[*]}"
    # No init system starts services inside a container; stop the packages' scripts from trying
    # (the daemons are started below), and restore whatever policy was there.
    policy=/usr/sbin/policy-rc.d
    saved=""
    if [ -e "$policy" ]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    restore() { if [ -n "$saved" ]; then mv "$saved" "$policy"; else rm -f "$policy"; fi; }
    trap restore EXIT
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
    restore
    trap - EXIT
fi
t_install=$(( $(date +%s) - t0 ))

# munge: a key readable by the munge user only, then the daemon.
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile=/etc/munge/munge.key --force
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged --force || die "munged did not start (see /var/log/munge/munged.log)"
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n | unmunge >/dev/null 2>&1 || die "munge does not answer after starting munged"
fi

# slurm.conf: this node as `slurmd -C` sees it (CPUs, sockets, cores, memory).
node_line=$(slurmd -C 2>/dev/null | grep '^NodeName=') || die "slurmd -C printed no node description"
node=$(hostname -s)
node_line=$(echo "$node_line" | sed -E "s/^NodeName=[^ ]+/NodeName=$node/; s/ UpTime=.*//")
cpus=$(echo "$node_line" | sed -E 's/.* CPUs=([0-9]+).*/\1/')
mem=$(echo "$node_line" | sed -E 's/.* RealMemory=([0-9]+).*/\1/')
# Jobs that ask for no memory get their share per CPU (not the whole node), so tasks run side by side.
def_mem=$(( mem / cpus ))
install -d -m 0755 "$conf_dir" "$log_dir" /var/spool/slurmctld /var/spool/slurmd
new=$(mktemp)
cat >"$new" <<EOF
# Written by phasekv's scripts/slurm-local.sh: a one-node Slurm for tests.
ClusterName=phasekv-local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=300
DefMemPerCPU=$def_mem
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd.log
$node_line State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
if [ -e "$conf" ] && cmp -s "$new" "$conf" && up; then
    rm -f "$new"
    echo "slurm-local: already running ($(( $(date +%s) - t0 )) s)"
    sinfo
    exit 0
fi
if [ -e "$conf" ] && ! cmp -s "$new" "$conf"; then
    cp -p "$conf" "$conf.phasekv-old"
fi
mv "$new" "$conf"
chmod 0644 "$conf"

# Daemons (restarted, so that a changed slurm.conf takes effect).
stop
slurmctld -i || die "slurmctld did not start (see $log_dir/slurmctld.log)"
slurmd || die "slurmd did not start (see $log_dir/slurmd.log)"
for _ in $(seq 100); do
    up && break
    # A node that was down before (an earlier start) comes back.
    scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    sleep 0.3
done
up || die "the node did not become idle: $(sinfo -h -N -o '%N %t %E' 2>&1 | head -1); see $log_dir/"
echo "slurm-local: up in $(( $(date +%s) - t0 )) s (install $t_install s)"
sinfo
