#!/usr/bin/env bash
# Start (up) and stop (down) what envforge's engine acceptance tests need on a CI machine:
#   - a Docker engine: Debian's docker.io, started as `dockerd --bridge=none --iptables=false`
#     when no engine answers `docker info`;
#   - the stand-in base image for the `cpu` recipe (debootstrap + docker import), cached by tag;
#   - Debian's docker-registry listening on 127.0.0.1:<free port>.
# `up` records what it started under $ENVFORGE_CI_STATE (default /tmp/envforge-ci-engine) and
# writes $ENVFORGE_CI_STATE/env (export lines, also printed on stdout); `down` stops only what
# `up` recorded.  Usage:
#   eval "$(bash scripts/ci-engine.sh up)"   # or: bash scripts/ci-engine.sh up; . /tmp/envforge-ci-engine/env
#   ENVFORGE_REQUIRE_ENGINE=1 python -m pytest tests/acceptance -m engine
#   bash scripts/ci-engine.sh down
# Exits non-zero when the engine cannot be started: CI must fail, not skip.
set -euo pipefail

STATE="${ENVFORGE_CI_STATE:-/tmp/envforge-ci-engine}"
STANDIN="${ENVFORGE_STANDIN_IMAGE:-envforge-standin/debian:bookworm-python3}"
SUITE="${ENVFORGE_STANDIN_SUITE:-bookworm}"
ENGINE_WAIT="${ENVFORGE_ENGINE_WAIT:-60}"

log() { echo "ci-engine: $*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi
}

engine_answers() { docker info >/dev/null 2>&1; }

ensure_packages() {  # the one list of CI packages, one apt-get step (scripts/ci-apt.sh)
    bash "$(dirname "${BASH_SOURCE[0]}")/ci-apt.sh" >&2
}

# The Debian mirror this machine's apt already uses (never written into a file).
debian_mirror() {
    local uri=""
    if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
        uri="$(grep -h -i '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
               | grep -v -- '-security' | head -n1 || true)"
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri="$(grep -E '^deb ' /etc/apt/sources.list | grep -v -- '-security' \
               | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | head -n1 || true)"
    fi
    [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list(.d)"
    echo "$uri"
}

start_engine() {
    if engine_answers; then
        log "engine already answers; using it"
        return
    fi
    local args=(--bridge=none --iptables=false --ip6tables=false --pidfile "$STATE/dockerd.pid")
    case "${DOCKER_HOST:-}" in
        "") ;;
        unix://*)
            # A private engine on that socket (its own data and exec roots under $STATE).
            mkdir -p "$STATE/docker-data" "$STATE/docker-exec"
            args+=(-H "$DOCKER_HOST" --data-root "$STATE/docker-data" --exec-root "$STATE/docker-exec")
            ;;
        *) die "DOCKER_HOST=$DOCKER_HOST does not answer; start that engine, or unset DOCKER_HOST" ;;
    esac
    log "starting dockerd ${args[*]} (log: $STATE/dockerd.log)"
    as_root dockerd "${args[@]}" >"$STATE/dockerd.log" 2>&1 &
    echo "$!" >"$STATE/dockerd.launcher.pid"
    echo started >"$STATE/dockerd.started"
    local waited=0
    until engine_answers; do
        if [ "$waited" -ge "$ENGINE_WAIT" ] || ! kill -0 "$(cat "$STATE/dockerd.launcher.pid")" 2>/dev/null; then
            tail -n 20 "$STATE/dockerd.log" >&2 || true
            die "dockerd did not answer within ${waited}s (log: $STATE/dockerd.log)"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    local driver
    driver="$(docker info --format '{{.Driver}}' 2>/dev/null || echo unknown)"
    log "engine up after ${waited}s; storage driver: $driver"
    if [ "$driver" = vfs ]; then
        log "warning: vfs storage driver (no overlay2 here): every layer is a full copy;" \
            "builds are several times slower and use much more disk"
    fi
}

build_standin() {
    if docker image inspect "$STANDIN" >/dev/null 2>&1; then
        log "stand-in base $STANDIN present (cached)"
        return
    fi
    local mirror root
    mirror="$(debian_mirror)"
    root="$(mktemp -d "${TMPDIR:-/tmp}/envforge-standin.XXXXXX")"
    log "building stand-in base $STANDIN with debootstrap ($SUITE, minbase)"
    if ! as_root debootstrap --variant=minbase \
            --include=python3,python3-venv,ca-certificates \
            "$SUITE" "$root" "$mirror" >"$STATE/debootstrap.log" 2>&1; then
        tail -n 20 "$STATE/debootstrap.log" >&2 || true
        as_root rm -rf "$root"
        die "debootstrap failed (log: $STATE/debootstrap.log)"
    fi
    as_root rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"* || true
    as_root tar -C "$root" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - "$STANDIN" >&2
    as_root rm -rf "$root"
    log "stand-in base $STANDIN imported"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_registry() {
    if [ -f "$STATE/registry.pid" ] && kill -0 "$(cat "$STATE/registry.pid")" 2>/dev/null \
            && [ -f "$STATE/registry.addr" ]; then
        log "registry already running at $(cat "$STATE/registry.addr")"
        return
    fi
    local port dir
    port="$(free_port)"
    dir="$(mktemp -d "${TMPDIR:-/tmp}/envforge-registry.XXXXXX")"
    echo "$dir" >"$STATE/registry.dir"
    mkdir -p "$dir/storage"
    cat >"$dir/config.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
CONF
    docker-registry serve "$dir/config.yml" >"$STATE/registry.log" 2>&1 &
    echo "$!" >"$STATE/registry.pid"
    local waited=0
    until python3 - "$port" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/v2/" % sys.argv[1], timeout=2).read()
PY
    do
        if [ "$waited" -ge 30 ]; then
            tail -n 20 "$STATE/registry.log" >&2 || true
            die "docker-registry did not answer on 127.0.0.1:$port within 30s"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "127.0.0.1:$port" >"$STATE/registry.addr"
    log "registry up at 127.0.0.1:$port"
}

write_env() {
    {
        echo "export ENVFORGE_TEST_REGISTRY=$(cat "$STATE/registry.addr")"
        echo "export ENVFORGE_STANDIN_IMAGE=$STANDIN"
        if [ -n "${DOCKER_HOST:-}" ]; then echo "export DOCKER_HOST=$DOCKER_HOST"; fi
    } >"$STATE/env.tmp"
    mv "$STATE/env.tmp" "$STATE/env"
    cat "$STATE/env"
}

up() {
    mkdir -p "$STATE"
    ensure_packages
    start_engine
    build_standin
    start_registry
    write_env
}

stop_pid() {  # stop_pid FILE NAME: TERM, wait up to 30s, KILL
    local file="$1" name="$2" pid i
    [ -f "$file" ] || return 0
    pid="$(cat "$file")"
    if kill -0 "$pid" 2>/dev/null; then
        log "stopping $name (pid $pid)"
        as_root kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        as_root kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

# The images a run leaves in the engine: every tag under the registry this run started
# (meaningless once it stops; ~1 GB each with torch) and envforge's dangling images (rebuilt
# tags). Without this a shared machine's disk fills run by run.
remove_run_images() {
    engine_answers || return 0
    if [ -f "$STATE/registry.pid" ] && [ -f "$STATE/registry.addr" ]; then
        local addr
        addr="$(cat "$STATE/registry.addr")"
        docker images --format '{{.Repository}}:{{.Tag}}' | grep -F "$addr/" \
            | xargs -r docker rmi -f >/dev/null 2>&1 || true
    fi
    docker image prune -f --filter label=io.envforge.recipe >/dev/null 2>&1 || true
    # Each run's builds add to Docker's build cache (21 GB -> 35 GB over three runs on one
    # machine): trimmed to the most recently used, which the next run's builds hit. Only
    # on an engine this run started: someone else's engine keeps its cache.
    if [ -f "$STATE/dockerd.started" ]; then
        docker builder prune -f --keep-storage "${ENVFORGE_CI_BUILD_CACHE_GB:-12}gb" \
            >/dev/null 2>&1 || true
    fi
}

down() {
    [ -d "$STATE" ] || { log "nothing recorded under $STATE"; return 0; }
    remove_run_images
    stop_pid "$STATE/registry.pid" docker-registry
    if [ -f "$STATE/registry.dir" ]; then
        rm -rf "$(cat "$STATE/registry.dir")"
        rm -f "$STATE/registry.dir" "$STATE/registry.addr"
    fi
    if [ -f "$STATE/dockerd.started" ]; then
        if [ -f "$STATE/dockerd.pid" ]; then
            stop_pid "$STATE/dockerd.pid" dockerd
        else
            stop_pid "$STATE/dockerd.launcher.pid" dockerd
        fi
        rm -f "$STATE/dockerd.started" "$STATE/dockerd.launcher.pid"
    fi
    rm -f "$STATE/env"
    log "down"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
