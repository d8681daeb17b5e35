#!/usr/bin/env bash
# Start (up) and stop (down) the Podman engines envforge's Podman acceptance tests use:
#   - Debian's podman (installed with apt-get only when missing);
#   - a rootful `podman system service` on $STATE/rootful/podman.sock, with its own
#     containers.conf (default_ulimits = []: this machine does not allow raising rlimits),
#     storage.conf (graph and run roots under $STATE) and registries.conf (the local test
#     registry as an insecure one). Never /etc: CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and
#     CONTAINERS_REGISTRIES_CONF point at the files under $STATE, for this service only;
#   - a rootless one as the user $ROOTLESS_USER (created with subordinate ids when
#     missing) on $STATE/rootless/podman.sock, when the machine allows it; when it does not,
#     the reason goes to $STATE/rootless.skip and the rootless tests skip with it;
#   - the stand-in base image (from the Docker engine: `docker save | podman load`).
# The rootful engine's image store (graph root) outlives the run, in $PODMAN_STORE, so its
# build cache is warm like the Docker engine's (a torch image was 157 s of a CI run to
# build from nothing). What a test could find there without doing the work is cleared at
# `up` and `down`: every container, pod and volume, and every tag but the stand-in; only
# untagged layers (the build cache) stay. A store over $PODMAN_STORE_MAX_GB is reset, and
# a store another run holds (its lock) is not shared: that run gets one of its own.
# Run after `scripts/ci-engine.sh up` (it needs the Docker engine's stand-in image and the
# registry). `up` prints export lines (also in $STATE/env):
#   ENVFORGE_PODMAN_HOST, ENVFORGE_PODMAN_ROOTLESS_HOST or ENVFORGE_PODMAN_ROOTLESS_SKIP.
# `down` stops both services and removes their stores and $STATE.
# Exits non-zero when the rootful engine cannot be started: CI must fail, not skip.
set -euo pipefail

BASE="${ENVFORGE_CI_STATE:-/tmp/envforge-ci-engine}"
STATE="$BASE/podman"
STANDIN="${ENVFORGE_STANDIN_IMAGE:-envforge-standin/debian:bookworm-python3}"
ROOTLESS_USER="${ENVFORGE_PODMAN_ROOTLESS_USER:-envforge-podman}"
WAIT="${ENVFORGE_ENGINE_WAIT:-60}"
PODMAN_STORE="${ENVFORGE_PODMAN_STORE:-/var/tmp/envforge-ci-podman-store}"
PODMAN_STORE_MAX_GB="${ENVFORGE_PODMAN_STORE_MAX_GB:-12}"

log() { echo "ci-podman: $*" >&2; }
die() { log "error: $*"; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

ensure_packages() {  # the one list of CI packages, one apt-get step (scripts/ci-apt.sh)
    bash "$(dirname "${BASH_SOURCE[0]}")/ci-apt.sh" >&2
}

write_conf() {  # write_conf DIR [GRAPH]: containers.conf, storage.conf, registries.conf
    local dir="$1" graph="${2:-$1/graph}" registry="${ENVFORGE_TEST_REGISTRY:-}"
    mkdir -p "$graph" "$dir/run"
    cat >"$dir/containers.conf" <<CONF
[containers]
default_ulimits = []
CONF
    cat >"$dir/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$graph"
runroot = "$dir/run"
CONF
    {
        echo 'unqualified-search-registries = []'
        if [ -n "$registry" ]; then
            printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$registry"
        fi
    } >"$dir/registries.conf"
}

answers() {  # answers SOCKET
    python3 - "$1" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(200) else 1)
PY
}

service_pid() {  # service_pid SOCKET: the pid of the service on SOCKET (our own unique path)
    pgrep -o -f -x "podman system service -t 0 unix://$1" || true
}

wait_for() {  # wait_for SOCKET PIDFILE LOG
    local waited=0
    until answers "$1"; do
        if [ "$waited" -ge "$WAIT" ] || ! kill -0 "$(cat "$2")" 2>/dev/null; then
            tail -n 20 "$3" >&2 || true
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

conf_env() {  # conf_env DIR: the env the service of DIR runs with
    echo "CONTAINERS_CONF=$1/containers.conf" "CONTAINERS_STORAGE_CONF=$1/storage.conf" \
        "CONTAINERS_REGISTRIES_CONF=$1/registries.conf"
}

# The persistent store is this run's while $PODMAN_STORE.lock (a folder, made atomically)
# names a live pid: this script's while it starts the service, then the service's. A lock
# whose pid is gone (a killed run) is taken over.
take_store() {
    local lock="$PODMAN_STORE.lock" owner
    mkdir -p "$(dirname "$PODMAN_STORE")"
    if ! mkdir "$lock" 2>/dev/null; then
        owner="$(cat "$lock/pid" 2>/dev/null || true)"
        if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then
            return 1
        fi
        rm -rf "$lock"
        mkdir "$lock" 2>/dev/null || return 1
    fi
    echo "$$" >"$lock/pid"
    echo "$lock" >"$STATE/store.lock"
}

rootful_graph() {  # the rootful graph root: the persistent store when free, else a run's own
    if ! take_store; then
        log "the persistent store $PODMAN_STORE is another run's: a store of this run's own"
        echo "$STATE/rootful/graph"
        return
    fi
    local gb
    gb=$(du -s -BG "$PODMAN_STORE" 2>/dev/null | cut -f1 | tr -d G || echo 0)
    if [ "${gb:-0}" -gt "$PODMAN_STORE_MAX_GB" ]; then
        log "the persistent store holds ${gb} GB (over $PODMAN_STORE_MAX_GB): starting it afresh"
        as_root rm -rf "$PODMAN_STORE"
    fi
    echo "$PODMAN_STORE"
}

# What a test could find without doing the work: containers, pods, volumes, tags (all but
# the stand-in). Untagged layers, the build cache, stay.
clear_store() {  # clear_store DIR
    local dir="$1"
    in_engine "$dir" "" podman rm -a -f >/dev/null 2>&1 || true
    in_engine "$dir" "" podman pod rm -a -f >/dev/null 2>&1 || true
    in_engine "$dir" "" podman volume rm -a -f >/dev/null 2>&1 || true
    local tag
    in_engine "$dir" "" podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null \
        | grep -v -x -F -e "$STANDIN" -e "localhost/$STANDIN" -e '<none>:<none>' \
        | while read -r tag; do
            in_engine "$dir" "" podman untag "$tag" >/dev/null 2>&1 || true
        done || true
}

start_rootful() {
    local dir="$STATE/rootful" sock="$STATE/rootful/podman.sock" graph
    if answers "$sock"; then
        service_pid "$sock" >"$dir/service.pid"
        log "rootful podman already answers on $sock"
        return
    fi
    graph="$(rootful_graph)"
    write_conf "$dir" "$graph"
    clear_store "$dir"
    rm -f "$sock"
    if ! serve_rootful "$dir" "$sock"; then
        # A store a killed run left may not open: once more, afresh.
        log "rootful podman did not start on $graph: starting with that store emptied"
        tail -n 5 "$dir/service.log" >&2 || true
        in_engine "$dir" "" podman system reset -f >/dev/null 2>&1 || true
        as_root rm -rf "$graph"
        write_conf "$dir" "$graph"
        serve_rootful "$dir" "$sock" \
            || die "rootful podman did not answer on $sock (log: $dir/service.log)"
    fi
    if [ -f "$STATE/store.lock" ]; then
        cp "$dir/service.pid" "$(cat "$STATE/store.lock")/pid"
    fi
    log "rootful $(podman --version) answers on $sock (store: $graph)"
    load_standin "$dir" ""
}

serve_rootful() {  # serve_rootful DIR SOCKET
    local dir="$1" sock="$2"
    in_engine "$dir" "" podman system service -t 0 "unix://$sock" >"$dir/service.log" 2>&1 &
    echo "$!" >"$dir/service.pid"
    wait_for "$sock" "$dir/service.pid" "$dir/service.log" || return 1
    # The launcher's pid is not the service's (podman re-executes itself): record the real one.
    service_pid "$sock" >"$dir/service.pid"
}

in_engine() {  # in_engine DIR USER CMD...: run CMD with the env of the engine of DIR
    local dir="$1" user="$2"
    shift 2
    if [ -z "$user" ]; then
        # shellcheck disable=SC2046
        as_root env $(conf_env "$dir") "$@"
    else
        # shellcheck disable=SC2046
        (cd "$dir" && runuser -u "$user" -- env XDG_RUNTIME_DIR="$dir/xdg" HOME="$dir" \
            $(conf_env "$dir") "$@")
    fi
}

load_standin() {  # load_standin DIR USER ("" = root)
    local dir="$1" user="$2"
    if in_engine "$dir" "$user" podman image exists "$STANDIN" 2>/dev/null; then
        log "stand-in $STANDIN present in $dir (cached)"
        return
    fi
    docker image inspect "$STANDIN" >/dev/null 2>&1 \
        || die "stand-in $STANDIN is not in the Docker engine (run scripts/ci-engine.sh up first)"
    docker save "$STANDIN" | in_engine "$dir" "$user" podman load >&2
}

rootless_refused() { echo "$1" >"$STATE/rootless.skip"; log "rootless: $1"; }

start_rootless() {
    local dir="$STATE/rootless" sock="$STATE/rootless/podman.sock" uid
    rm -f "$STATE/rootless.skip"
    if ! id "$ROOTLESS_USER" >/dev/null 2>&1; then
        as_root useradd --create-home --shell /bin/sh "$ROOTLESS_USER" 2>"$STATE/useradd.log" || {
            rootless_refused "cannot create user $ROOTLESS_USER: $(tail -n1 "$STATE/useradd.log")"
            return 0
        }
    fi
    uid="$(id -u "$ROOTLESS_USER")"
    for f in /etc/subuid /etc/subgid; do
        grep -q "^$ROOTLESS_USER:" "$f" 2>/dev/null \
            || as_root usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$ROOTLESS_USER"
    done
    if answers "$sock"; then
        service_pid "$sock" >"$dir/service.pid"
        log "rootless podman already answers on $sock"
        return
    fi
    mkdir -p "$dir" "$dir/xdg"
    write_conf "$dir"
    chown -R "$ROOTLESS_USER" "$dir"
    chmod 0700 "$dir/xdg"
    chmod o+x "$BASE" "$STATE"
    rm -f "$sock"
    in_engine "$dir" "$ROOTLESS_USER" podman system service -t 0 "unix://$sock" \
        >"$dir/service.log" 2>&1 &
    echo "$!" >"$dir/service.pid"
    if ! wait_for "$sock" "$dir/service.pid" "$dir/service.log"; then
        rootless_refused "rootless podman (user $ROOTLESS_USER, uid $uid) did not start: $(tail -n1 "$dir/service.log")"
        return 0
    fi
    service_pid "$sock" >"$dir/service.pid"
    # A container must start too (user namespaces may be refused at run time).
    local out
    load_standin "$dir" "$ROOTLESS_USER" || true
    if ! out="$(in_engine "$dir" "$ROOTLESS_USER" \
            podman run --rm --network none "$STANDIN" true 2>&1)"; then
        rootless_refused "rootless podman (user $ROOTLESS_USER) cannot run a container here: $(echo "$out" | tail -n1)"
        stop_pid "$dir/service.pid" "rootless podman"
        return 0
    fi
    log "rootless podman answers on $sock (user $ROOTLESS_USER, uid $uid)"
}

stop_pid() {  # stop_pid FILE NAME
    local file="$1" name="$2" pid i
    [ -f "$file" ] || return 0
    pid="$(cat "$file")"
    if kill -0 "$pid" 2>/dev/null; then
        log "stopping $name (pid $pid)"
        as_root kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        as_root kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

write_env() {
    {
        echo "export ENVFORGE_PODMAN_HOST=unix://$STATE/rootful/podman.sock"
        if [ -f "$STATE/rootless.skip" ]; then
            printf 'export ENVFORGE_PODMAN_ROOTLESS_SKIP=%q\n' "$(cat "$STATE/rootless.skip")"
        else
            echo "export ENVFORGE_PODMAN_ROOTLESS_HOST=unix://$STATE/rootless/podman.sock"
        fi
    } >"$STATE/env.tmp"
    mv "$STATE/env.tmp" "$STATE/env"
    cat "$STATE/env"
}

up() {
    mkdir -p "$STATE"
    ensure_packages
    start_rootful
    if [ "${ENVFORGE_PODMAN_ROOTLESS:-1}" = 1 ]; then
        start_rootless
    else
        rootless_refused "rootless Podman not wanted (ENVFORGE_PODMAN_ROOTLESS=0)"
    fi
    write_env
}

down() {
    [ -d "$STATE" ] || { log "nothing recorded under $STATE"; return 0; }
    stop_pid "$STATE/rootless/service.pid" "rootless podman"
    stop_pid "$STATE/rootful/service.pid" "rootful podman"
    # Rootless podman re-executes itself in its user namespace: a second process with the
    # same command line (our own socket path) may outlive the first.
    local mode pid
    for mode in rootless rootful; do
        for pid in $(pgrep -f -x "podman system service -t 0 unix://$STATE/$mode/podman.sock" || true); do
            echo "$pid" >"$STATE/$mode/leftover.pid"
            stop_pid "$STATE/$mode/leftover.pid" "$mode podman (re-executed)"
        done
    done
    # The stores hold a few GB (stand-in, built images, build cache): remove them, through
    # podman (its overlay layers may be mounted), then the state folder.
    if [ -f "$STATE/rootless/storage.conf" ] && id "$ROOTLESS_USER" >/dev/null 2>&1; then
        in_engine "$STATE/rootless" "$ROOTLESS_USER" podman system reset -f >/dev/null 2>&1 || true
    fi
    if [ -f "$STATE/rootful/storage.conf" ]; then
        if [ -f "$STATE/store.lock" ]; then
            # the persistent store: what a test could find cleared, the build cache kept
            clear_store "$STATE/rootful"
            in_engine "$STATE/rootful" "" podman umount -a >/dev/null 2>&1 || true
            rm -rf "$(cat "$STATE/store.lock")"
        else
            in_engine "$STATE/rootful" "" podman system reset -f >/dev/null 2>&1 || true
        fi
    fi
    as_root rm -rf "$STATE"
    log "down (stores removed but the persistent one's build cache; the user $ROOTLESS_USER stays)"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
