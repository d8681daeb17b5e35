#!/usr/bin/env bash
# Start (up) and stop (down) a one-node Slurm cluster on loopback for the fleet acceptance
# test (tests/acceptance/test_fleet_slurm.py): Debian's munge, slurmctld and slurmd, two
# fake GPUs (GRES files that are copies of /dev/null), node features amd,gfx942,rocm.
#   bash scripts/ci-slurm.sh up     # prints export lines (also written to $STATE/env)
#   bash scripts/ci-slurm.sh down   # stops only the daemons `up` recorded (by pid)
# Everything lives under $ENVFORGE_SLURM_STATE (default /tmp/envforge-ci-slurm); the
# daemons listen on 127.0.0.1 only, on two free ports chosen at `up` (or
# $ENVFORGE_SLURM_PORT and +1), so a second cluster on the same machine does not collide.
# Exits non-zero when the cluster cannot be started: CI fails, it never skips.
# Pitfalls this avoids: ../shared knowledge "fleet" notes (socket folder 0755, key folder
# 0700; cgroup/v1; GRES File= needed for a count; NoInAddrAny + NoCtldInAddrAny).
set -euo pipefail

STATE="${ENVFORGE_SLURM_STATE:-/tmp/envforge-ci-slurm}"
PORT="${ENVFORGE_SLURM_PORT:-}"
WAIT="${ENVFORGE_SLURM_WAIT:-30}"

log() { echo "ci-slurm: $*" >&2; }
die() { log "error: $*"; for f in slurmctld slurmd munged; do
          [ -f "$STATE/log/$f.log" ] && tail -n 5 "$STATE/log/$f.log" >&2; done; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

ensure_packages() {
    local missing=()
    for cmd in slurmctld slurmd sbatch munged; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})"
    local pkgs=(slurmctld slurmd slurm-client munge)
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${pkgs[@]}" >&2 \
      || { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 \
           && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends "${pkgs[@]}" >&2; } \
      || die "cannot install ${pkgs[*]} from Debian's archive"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_config() {
    local host cpus ctld_port node_port
    if [ -n "$PORT" ]; then ctld_port=$PORT; node_port=$((PORT + 1)); else
        ctld_port=$(free_port); node_port=$(free_port)
        while [ "$node_port" = "$ctld_port" ]; do node_port=$(free_port); done
    fi
    host="$(hostname -s)"
    cpus="$(nproc)"
    mkdir -p "$STATE"/{munge,msock,run,log,state,spool,dev}
    chmod 700 "$STATE/munge"
    chmod 755 "$STATE/msock"
    [ -f "$STATE/munge/munge.key" ] || {
        dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1 count=1024 2>/dev/null
        chmod 600 "$STATE/munge/munge.key"
    }
    for n in 128 129; do
        [ -e "$STATE/dev/renderD$n" ] || as_root mknod "$STATE/dev/renderD$n" c 1 3
    done
    cat > "$STATE/slurm.conf" <<EOF
ClusterName=efleet
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
AuthType=auth/munge
AuthInfo=socket=$STATE/msock/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MessageTimeout=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 Gres=gpu:mi300x:2 Feature=amd,gfx942,rocm State=UNKNOWN
PartitionName=gpu Nodes=$host Default=YES MaxTime=30 State=UP
EOF
    cat > "$STATE/gres.conf" <<EOF
AutoDetect=off
NodeName=$host Name=gpu Type=mi300x File=$STATE/dev/renderD[128-129]
EOF
    printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' > "$STATE/cgroup.conf"
}

node_state() { sinfo -h -N -o %T 2>/dev/null | head -n1; }

up() {
    ensure_packages
    if alive "$STATE/run/slurmctld.pid"; then
        log "already up under $STATE"
    else
        write_config
    fi
    export SLURM_CONF="$STATE/slurm.conf"
    if ! alive "$STATE/run/munged.pid"; then
        as_root munged --key-file="$STATE/munge/munge.key" --socket="$STATE/msock/munge.socket" \
            --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
            --seed-file="$STATE/munge/munged.seed" || die "munged did not start"
    fi
    alive "$STATE/run/slurmctld.pid" || as_root env SLURM_CONF="$SLURM_CONF" slurmctld -i \
        || die "slurmctld did not start"
    alive "$STATE/run/slurmd.pid" || as_root env SLURM_CONF="$SLURM_CONF" slurmd -N "$(hostname -s)" \
        || die "slurmd did not start"
    local waited=0 state=""
    while [ "$waited" -lt "$((WAIT * 4))" ]; do
        state="$(node_state || true)"
        case "$state" in
            idle|mixed|allocated) break ;;
            *drain*|*inval*|down*) scontrol update nodename="$(hostname -s)" state=resume \
                                     >/dev/null 2>&1 || true ;;
        esac
        sleep 0.25
        waited=$((waited + 1))
    done
    case "$state" in idle|mixed|allocated) ;; *) die "node not idle after ${WAIT}s (state: ${state:-none})" ;; esac
    log "one-node cluster up: $(sinfo -h -N -o '%N %T %G %f')"
    {
        echo "export SLURM_CONF=$SLURM_CONF"
        echo "export ENVFORGE_SLURM_STATE=$STATE"
    } | tee "$STATE/env"
}

down() {
    local name pid
    for name in slurmd slurmctld munged; do
        alive "$STATE/run/$name.pid" || continue
        pid="$(cat "$STATE/run/$name.pid")"
        as_root kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && as_root kill -9 "$pid" 2>/dev/null || true
        rm -f "$STATE/run/$name.pid"
    done
    log "stopped"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
