#!/usr/bin/env bash
# A container engine and a Redis image for the container variant of the tests (lock-testkit's
# feature `testcontainers`: the fixtures' servers in containers on the host network).
#
# Run it:     scripts/ensure-docker.sh [COMMAND ARGS...]
#   Finds or starts an engine, builds the image, runs COMMAND (by default the container tests)
#   with DOCKER_HOST and DISTLOCK_REDIS_IMAGE exported, then removes the containers and stops
#   the daemon it started (by id and by pid). When the container variant cannot run here it
#   prints one line "container variant skipped: <why>" and exits 0 without running COMMAND.
# Source it:  source scripts/ensure-docker.sh; distlock_docker_up && cargo test ...; distlock_docker_down
#   distlock_docker_up exports DOCKER_HOST (for a daemon it started) and DISTLOCK_REDIS_IMAGE,
#   or returns 1 with the reason in DISTLOCK_DOCKER_SKIP; distlock_docker_down stops what it
#   started.
#
# The engine: the one the `docker` command reaches, if it answers. Otherwise, as root (or with
# passwordless sudo): Debian's docker.io installed with apt-get if missing, and `dockerd` started
# with its own data root, exec root, pid file and socket in a temporary directory, and no bridge
# network, no iptables rules, no IP forwarding: our machines may contact loopback addresses only,
# and the containers use the host network. Storage driver overlay2, else vfs (or the ones
# listed in DISTLOCK_DOCKER_STORAGE_DRIVERS, tried in turn).
# The image: $DISTLOCK_REDIS_IMAGE if set (e.g. redis:7.4, pulled by the engine if it can),
# else distlock-redis:local, made with `docker import` from a root filesystem holding the
# machine's redis-server (or valkey-server) and the libraries `ldd` lists, since image
# registries cannot be reached from our machines.

_dd_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DISTLOCK_LOCAL_IMAGE="distlock-redis:local"
# How long the daemon may take to answer.
_dd_start_timeout=30

_dd_say() { echo "ensure-docker: $*" >&2; }

# Whether an engine answers the `docker` command (with the current DOCKER_HOST).
_dd_engine_answers() {
    command -v docker >/dev/null 2>&1 &&
        timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# Sets _dd_sudo to "" (root), "sudo -n" (passwordless sudo) or fails.
_dd_privileges() {
    if [ "$(id -u)" = 0 ]; then
        _dd_sudo=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        _dd_sudo="sudo -n"
    else
        return 1
    fi
}

# Installs Debian's docker.io without letting the package start its own daemon (which would
# make a bridge network and iptables rules).
_dd_install_engine() {
    command -v apt-get >/dev/null 2>&1 || { DISTLOCK_DOCKER_SKIP="dockerd is not installed and there is no apt-get to install docker.io"; return 1; }
    _dd_say "installing Debian's docker.io with apt-get"
    local policy=/usr/sbin/policy-rc.d made_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $_dd_sudo tee "$policy" >/dev/null && $_dd_sudo chmod 755 "$policy" && made_policy=1
    fi
    local log
    log="$(mktemp /tmp/distlock-apt.XXXXXX)"
    local ok=0
    { $_dd_sudo apt-get update -qq && $_dd_sudo env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends docker.io; } >"$log" 2>&1 || ok=$?
    [ -n "$made_policy" ] && $_dd_sudo rm -f "$policy"
    if [ "$ok" != 0 ] || ! command -v dockerd >/dev/null 2>&1; then
        DISTLOCK_DOCKER_SKIP="apt-get install docker.io failed: $(tail -n 1 "$log")"
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

# Starts dockerd with storage driver $1 in $_dd_dir; sets _dd_pid; fails with the reason in
# DISTLOCK_DOCKER_SKIP if it does not answer.
_dd_start_daemon() {
    local driver="$1"
    local socket="$_dd_dir/docker.sock"
    local group=()
    [ -n "$_dd_sudo" ] && group=(--group "$(id -gn)")
    $_dd_sudo dockerd \
        --data-root "$_dd_dir/data" --exec-root "$_dd_dir/exec" --pidfile "$_dd_dir/dockerd.pid" \
        -H "unix://$socket" "${group[@]}" \
        --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
        --storage-driver "$driver" >"$_dd_dir/dockerd-$driver.log" 2>&1 </dev/null &
    _dd_pid=$!
    local deadline=$((SECONDS + _dd_start_timeout))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if DOCKER_HOST="unix://$socket" _dd_engine_answers; then
            export DOCKER_HOST="unix://$socket"
            return 0
        fi
        if ! kill -0 "$_dd_pid" 2>/dev/null && ! $_dd_sudo kill -0 "$_dd_pid" 2>/dev/null; then
            break
        fi
        sleep 0.2
    done
    DISTLOCK_DOCKER_SKIP="dockerd (storage driver $driver) did not start: $(grep -E 'level=(error|fatal)|failed' "$_dd_dir/dockerd-$driver.log" | tail -n 1)"
    _dd_stop_daemon
    return 1
}

# Stops the daemon this script started, by its pid: SIGTERM, then SIGKILL after 20 s.
_dd_stop_daemon() {
    [ -n "${_dd_pid:-}" ] || return 0
    $_dd_sudo kill -TERM "$_dd_pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$_dd_pid" 2>/dev/null || $_dd_sudo kill -0 "$_dd_pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            _dd_say "dockerd (pid $_dd_pid) did not stop in 20 s: SIGKILL"
            $_dd_sudo kill -KILL "$_dd_pid" 2>/dev/null || true
        fi
        sleep 0.2
    done
    wait "$_dd_pid" 2>/dev/null || true
    _dd_pid=""
}

# Builds $DISTLOCK_LOCAL_IMAGE from the machine's server binary.
_dd_build_image() {
    local server="${DISTLOCK_REDIS_SERVER:-}"
    if [ -z "$server" ]; then
        # shellcheck source=scripts/ensure-redis.sh
        source "$_dd_root/scripts/ensure-redis.sh"
        ensure_redis_server 2>/dev/null || { DISTLOCK_DOCKER_SKIP="no redis-server or valkey-server to build $DISTLOCK_LOCAL_IMAGE from"; return 1; }
        server="$DISTLOCK_REDIS_SERVER"
    fi
    command -v "$server" >/dev/null 2>&1 && server="$(command -v "$server")"
    command -v ldd >/dev/null 2>&1 || { DISTLOCK_DOCKER_SKIP="no ldd to find the libraries of $server"; return 1; }
    # The name decides the mode (Debian's redis-server is a link to redis-check-rdb).
    local name
    name="$(basename "$server")"
    local rootfs
    rootfs="$(mktemp -d /tmp/distlock-rootfs.XXXXXX)"
    mkdir -p "$rootfs/usr/local/bin" "$rootfs/data" "$rootfs/tmp"
    cp -L "$server" "$rootfs/usr/local/bin/$name"
    local lib
    for lib in $(ldd "$(readlink -f "$server")" 2>/dev/null | grep -o '/[^ ]*'); do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
    local out
    if ! out="$(tar -C "$rootfs" -c . | docker import \
        --change "ENTRYPOINT [\"/usr/local/bin/$name\"]" --change 'WORKDIR /data' \
        - "$DISTLOCK_LOCAL_IMAGE" 2>&1)"; then
        rm -rf "$rootfs"
        DISTLOCK_DOCKER_SKIP="docker import of $DISTLOCK_LOCAL_IMAGE failed: $out"
        return 1
    fi
    rm -rf "$rootfs"
    _dd_say "built $DISTLOCK_LOCAL_IMAGE from $server ($("$server" --version | cut -d' ' -f1-3))"
}

# Whether $1 runs: its server prints its version, in a container on the host network.
_dd_image_runs() {
    local out
    out="$(timeout 120 docker run --rm --network host "$1" --version 2>&1)" &&
        [[ "$out" == *"server v="* ]] && return 0
    DISTLOCK_DOCKER_SKIP="a container of $1 does not run: $(echo "$out" | tail -n 1)"
    return 1
}

# Removes the containers of the daemon this script started (all of them are this run's).
_dd_remove_containers() {
    [ -n "${_dd_pid:-}" ] || return 0
    local ids
    ids="$(docker ps --all --quiet --no-trunc 2>/dev/null)"
    if [ -n "$ids" ]; then
        _dd_say "removing containers left behind: $(echo "$ids" | tr '\n' ' ')"
        # shellcheck disable=SC2086
        docker rm --force --volumes $ids >/dev/null 2>&1 || true
    fi
}

distlock_docker_up() {
    DISTLOCK_DOCKER_SKIP=""
    _dd_sudo=""
    _dd_pid=""
    _dd_dir=""
    if _dd_engine_answers; then
        _dd_say "using the engine the docker command reaches ($(docker version --format '{{.Server.Version}}'))"
    else
        if ! _dd_privileges; then
            DISTLOCK_DOCKER_SKIP="no Docker engine answers, and starting one needs root or passwordless sudo"
            return 1
        fi
        if ! command -v dockerd >/dev/null 2>&1; then
            _dd_install_engine || return 1
        fi
        command -v docker >/dev/null 2>&1 || { DISTLOCK_DOCKER_SKIP="dockerd is installed but there is no docker command"; return 1; }
        _dd_dir="$(mktemp -d /tmp/distlock-docker.XXXXXX)"
        local driver reasons=""
        for driver in ${DISTLOCK_DOCKER_STORAGE_DRIVERS:-overlay2 vfs}; do
            if _dd_start_daemon "$driver"; then
                _dd_say "started dockerd $(dockerd --version | cut -d' ' -f3 | tr -d ,) (pid $_dd_pid, storage driver $driver, no bridge network) on $DOCKER_HOST"
                break
            fi
            reasons="$reasons${reasons:+; }$DISTLOCK_DOCKER_SKIP"
        done
        if [ -z "$_dd_pid" ]; then
            DISTLOCK_DOCKER_SKIP="$reasons"
            distlock_docker_down
            return 1
        fi
    fi
    local image="${DISTLOCK_REDIS_IMAGE:-}"
    if [ -z "$image" ]; then
        _dd_build_image || { distlock_docker_down; return 1; }
        image="$DISTLOCK_LOCAL_IMAGE"
    fi
    if ! _dd_image_runs "$image"; then
        distlock_docker_down
        return 1
    fi
    export DISTLOCK_REDIS_IMAGE="$image"
}

distlock_docker_down() {
    _dd_remove_containers
    _dd_stop_daemon
    if [ -n "${_dd_dir:-}" ]; then
        # dockerd leaves its network namespace mount (exec root/netns/default) behind.
        local mnt
        for mnt in $(awk -v d="$_dd_dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
            $_dd_sudo umount "$mnt" 2>/dev/null || _dd_say "could not unmount $mnt"
        done
        $_dd_sudo rm -rf "$_dd_dir" 2>/dev/null || _dd_say "could not remove $_dd_dir"
        _dd_dir=""
        unset DOCKER_HOST
    fi
}

# Run (not sourced): set up, run the command (default: the container tests), tear down.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    cd "$_dd_root" || exit 1
    if ! distlock_docker_up; then
        echo "container variant skipped: $DISTLOCK_DOCKER_SKIP"
        exit 0
    fi
    trap distlock_docker_down EXIT
    trap 'exit 130' INT TERM
    echo "container variant: image $DISTLOCK_REDIS_IMAGE on the engine at ${DOCKER_HOST:-the default socket}"
    if [ "$#" -eq 0 ]; then
        cargo test --all-features -p lock-testkit --test containers &&
            cargo test --all-features -p lock-redis --test conformance_containers
    else
        "$@"
    fi
fi
