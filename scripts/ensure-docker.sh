#!/usr/bin/env bash
# A container engine and a Redis image for the container variant of the tests (lock-testkit's
# feature `testcontainers`: the fixtures' servers in containers on the host network).
#
# Run it:     scripts/ensure-docker.sh [COMMAND ARGS...]
#   Finds or starts an engine, builds the image, runs COMMAND (by default the container tests)
#   with DOCKER_HOST, DISTLOCK_REDIS_IMAGE and DISTLOCK_CONTAINERS_REQUIRED=1 exported, then
#   removes the containers and stops the daemon it started (by id and by pid). When the
#   container variant cannot run here it prints one line "container variant skipped: <why>" and
#   exits 0 without running COMMAND. Whatever ends it (COMMAND's end, a failure, Ctrl-C,
#   SIGTERM, SIGHUP) it removes what it made: its daemon, temporary directory and mounts, and
#   /usr/sbin/policy-rc.d if it wrote that file (only SIGKILL leaves them behind).
# Source it:  source scripts/ensure-docker.sh
#             trap distlock_docker_down EXIT   # before distlock_docker_up: it may be interrupted
#             distlock_docker_up && cargo test ...; distlock_docker_down
#   distlock_docker_up exports DOCKER_HOST (for a daemon it started), DISTLOCK_REDIS_IMAGE and
#   DISTLOCK_CONTAINERS_REQUIRED=1, or returns 1 with the reason in DISTLOCK_DOCKER_SKIP;
#   distlock_docker_down stops and removes what it started (safe to call at any point, twice),
#   and fails when something is left behind (a daemon that would not stop, policy-rc.d).
#
# The engine: the one the `docker` command reaches, if it answers. Otherwise, as root (or with
# passwordless sudo): Debian's docker.io installed with apt-get if missing (its services then
# disabled: the package enables docker.service, docker.socket and containerd.service, and a
# boot would start a dockerd with a bridge network, iptables rules and IP forwarding), and
# `dockerd` started with its own data root, exec root, pid file and socket in a temporary
# directory, and no bridge network, no iptables rules, no IP forwarding: our machines may
# contact loopback addresses only, and the containers use the host network. Storage driver
# overlay2, else vfs (or the ones listed in DISTLOCK_DOCKER_STORAGE_DRIVERS, tried in turn).
# The daemon is stopped by the pid in its pid file (with sudo, `$!` is sudo's).
# The image: $DISTLOCK_REDIS_IMAGE if set, which must be present in the engine already (loaded
# with `docker load` or imported; nothing is ever pulled: `docker run --pull never`), else
# distlock-redis:local, made with `docker import` from a root filesystem holding the machine's
# redis-server (or valkey-server) and the libraries `ldd` lists (removed at the end when the
# engine is not the script's own). Before the tests run, a server from the image must answer
# PING on 127.0.0.1 from the host network (rootless Docker and Docker Desktop do not pass).

_dd_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DISTLOCK_LOCAL_IMAGE="distlock-redis:local"
# How long the daemon may take to answer.
_dd_start_timeout=30
# How long dockerd may take to stop after SIGTERM, and then after SIGKILL.
_dd_stop_timeout=20
_dd_kill_timeout=10
# How long one docker command may take (a wedged engine must not hang the run).
_dd_docker_timeout=60
# The file that keeps apt from starting the package's services while it installs them.
_dd_policy=/usr/sbin/policy-rc.d
# Where dockerd is looked for besides PATH (Debian puts it in /usr/sbin, not on a user's PATH).
_dd_sbin="/usr/local/sbin:/usr/sbin:/sbin"

_dd_say() { echo "ensure-docker: $*" >&2; }

# `docker ARGS...` under a deadline.
_dd_docker() { timeout "$_dd_docker_timeout" docker "$@"; }

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

# Sets _dd_dockerd to dockerd's path, looked for on PATH and in the sbin directories.
_dd_find_dockerd() {
    _dd_dockerd="$(PATH="$PATH:$_dd_sbin" command -v dockerd 2>/dev/null)" && [ -n "$_dd_dockerd" ]
}

# The line that marks the policy-rc.d this run wrote.
_dd_policy_mark() { echo "# written by distlock's scripts/ensure-docker.sh (pid $$) while it installs docker.io"; }

# Removes the policy-rc.d this run wrote, if it did (found by its mark: a file that was there
# before is never removed).
_dd_remove_policy() {
    [ -n "${_dd_made_policy:-}" ] || return 0
    if $_dd_sudo grep -qxF "$(_dd_policy_mark)" "$_dd_made_policy" 2>/dev/null &&
        ! $_dd_sudo rm -f "$_dd_made_policy"; then
        _dd_say "could not remove $_dd_made_policy: remove it by hand, it keeps every service from starting"
        return 1
    fi
    _dd_made_policy=""
}

# Disables the services Debian's docker.io enables, when systemctl can.
_dd_disable_services() {
    command -v systemctl >/dev/null 2>&1 || return 0
    local out
    if out="$($_dd_sudo systemctl disable docker.service docker.socket containerd.service 2>&1)"; then
        _dd_say "disabled docker.service, docker.socket and containerd.service (a boot would start a dockerd with a bridge network, iptables rules and IP forwarding)"
    else
        _dd_say "could not disable docker.service, docker.socket and containerd.service: $(echo "$out" | tail -n 1)"
    fi
}

# Installs Debian's docker.io without letting the package start its own daemon (which would
# make a bridge network and iptables rules), then disables its services.
_dd_install_engine() {
    command -v apt-get >/dev/null 2>&1 || { DISTLOCK_DOCKER_SKIP="dockerd is not installed and there is no apt-get to install docker.io"; return 1; }
    _dd_say "installing Debian's docker.io with apt-get"
    # Created only if absent (noclobber: a file that is there is never replaced), marked as
    # this run's, and recorded before it is written, so that whatever ends the script removes
    # it (distlock_docker_down): left behind, it would keep every service from starting.
    _dd_made_policy="$_dd_policy"
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
    $_dd_sudo sh -c 'set -C; printf "#!/bin/sh\n%s\nexit 101\n" "$2" >"$1" && chmod 755 "$1"' \
        sh "$_dd_policy" "$(_dd_policy_mark)" 2>/dev/null || true
    _dd_apt_log="$(mktemp /tmp/distlock-apt.XXXXXX)"
    local ok=0
    { $_dd_sudo apt-get update -qq && $_dd_sudo env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends docker.io; } >"$_dd_apt_log" 2>&1 || ok=$?
    _dd_remove_policy
    if [ "$ok" != 0 ] || ! _dd_find_dockerd; then
        DISTLOCK_DOCKER_SKIP="apt-get install docker.io failed: $(tail -n 1 "$_dd_apt_log")"
        return 1
    fi
    _dd_disable_services
}

# The pid dockerd wrote in its pid file, if it did.
_dd_pidfile_pid() {
    local file="$1" pid=""
    [ -n "${_dd_dir:-}" ] || return 1
    pid="$($_dd_sudo cat "$file" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && echo "$pid"
}

# "PPID COMM" of the live process $1, from /proc; fails when there is none (or a zombie).
_dd_proc() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    local comm="${stat#*(}"
    comm="${comm%)*}"
    local rest
    read -r -a rest <<<"${stat##*) }"
    [ "${rest[0]}" != Z ] && echo "${rest[1]} $comm"
}

# Whether process $1 runs command $2 (a pid read from a pid file may have been reused).
_dd_alive_as() {
    local info
    [ -n "${1:-}" ] && info="$(_dd_proc "$1")" && [ "${info#* }" = "$2" ]
}

# Whether process $1 is a child of this shell (the launcher; its pid may have been reused once
# it exited).
_dd_our_child() {
    local info
    [ -n "${1:-}" ] && info="$(_dd_proc "$1")" &&
        { [ "${info%% *}" = "$$" ] || [ "${info%% *}" = "$BASHPID" ]; }
}

# Starts dockerd with storage driver $1 in $_dd_dir; sets _dd_pid (dockerd's, from its pid
# file) and _dd_launcher (`$!`: dockerd itself as root, sudo otherwise); fails with the reason
# in DISTLOCK_DOCKER_SKIP if it does not answer.
_dd_start_daemon() {
    local driver="$1"
    local socket="$_dd_dir/docker.sock"
    local group=()
    [ -n "$_dd_sudo" ] && group=(--group "$(id -gn)")
    # dockerd finds runc, containerd and docker-proxy on its PATH.
    $_dd_sudo env PATH="$PATH:$_dd_sbin" "$_dd_dockerd" \
        --data-root "$_dd_dir/data" --exec-root "$_dd_dir/exec" --pidfile "$_dd_dir/dockerd.pid" \
        -H "unix://$socket" "${group[@]}" \
        --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
        --storage-driver "$driver" >"$_dd_dir/dockerd-$driver.log" 2>&1 </dev/null &
    _dd_launcher=$!
    # Out of the job table: bash still reaps it, and reports nothing of it (its end is ours to
    # tell).
    disown "$_dd_launcher" 2>/dev/null || true
    local deadline=$((SECONDS + _dd_start_timeout)) why=""
    while [ "$SECONDS" -lt "$deadline" ]; do
        if DOCKER_HOST="unix://$socket" _dd_engine_answers; then
            if _dd_pid="$(_dd_pidfile_pid "$_dd_dir/dockerd.pid")"; then
                export DOCKER_HOST="unix://$socket"
                return 0
            fi
            why="it answers but wrote no pid file"
            break
        fi
        _dd_our_child "$_dd_launcher" || break
        sleep 0.2
    done
    [ -n "$why" ] || why="$(grep -E 'level=(error|fatal)|failed' "$_dd_dir/dockerd-$driver.log" | tail -n 1)"
    DISTLOCK_DOCKER_SKIP="dockerd (storage driver $driver) did not start: $why"
    _dd_stop_daemon
    return 1
}

# Stops the daemon this script started, by the pid in its pid file (or, before dockerd wrote
# one, through the launcher: sudo passes SIGTERM on): SIGTERM, SIGKILL after
# $_dd_stop_timeout s, then gives up with a message after $_dd_kill_timeout s more. A
# containerd dockerd started and did not stop (dockerd killed) is stopped by its pid too.
# Fails when something still runs.
_dd_stop_daemon() {
    [ -n "${_dd_launcher:-}" ] || [ -n "${_dd_pid:-}" ] || return 0
    local pid="${_dd_pid:-}"
    [ -n "$pid" ] || pid="$(_dd_pidfile_pid "$_dd_dir/dockerd.pid")" || pid=""
    if _dd_alive_as "$pid" dockerd; then
        $_dd_sudo kill -TERM "$pid" 2>/dev/null || true
    elif _dd_our_child "${_dd_launcher:-}"; then
        $_dd_sudo kill -TERM "$_dd_launcher" 2>/dev/null || true
    fi
    _dd_wait_gone "dockerd" "${_dd_launcher:-}" "$_dd_dir/dockerd.pid" "$pid" || return 1
    local containerd_pidfile="$_dd_dir/exec/containerd/containerd.pid" containerd
    if containerd="$(_dd_pidfile_pid "$containerd_pidfile")" && _dd_alive_as "$containerd" containerd; then
        _dd_say "containerd (pid $containerd) outlived dockerd: SIGTERM"
        $_dd_sudo kill -TERM "$containerd" 2>/dev/null || true
        _dd_wait_gone "containerd" "" "$containerd_pidfile" "$containerd" || return 1
    fi
    _dd_pid=""
    _dd_launcher=""
    # A container's shim outlives its removal by a moment; it names the daemon's directory.
    local deadline=$((SECONDS + 5)) left
    while left="$(_dd_processes_of "$_dd_dir")" && [ -n "$left" ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            _dd_say "still running with $_dd_dir in their command line: $left"
            break
        fi
        sleep 0.1
    done
}

# The pids (with their command names) of the processes whose command line names $1 (bash
# builtins only: no process of its own to find).
_dd_processes_of() {
    local cmdline pid comm out="" args=()
    for cmdline in /proc/[0-9]*/cmdline; do
        mapfile -d '' args <"$cmdline" 2>/dev/null || continue
        if [[ "${args[*]}" == *"$1"* ]]; then
            pid="${cmdline#/proc/}"
            pid="${pid%/cmdline}"
            read -r comm <"/proc/$pid/comm" 2>/dev/null || comm="?"
            out="$out${out:+ }$pid ($comm)"
        fi
    done
    echo "$out"
}

# Waits until the launcher $2 and the process named $1 of pid file $3 (or pid $4) are gone:
# SIGKILL after $_dd_stop_timeout s, a message and failure after $_dd_kill_timeout s more.
_dd_wait_gone() {
    local name="$1" launcher="$2" pidfile="$3" pid="$4"
    local killed="" deadline=$((SECONDS + _dd_stop_timeout))
    while :; do
        [ -n "$pid" ] || pid="$(_dd_pidfile_pid "$pidfile")" || pid=""
        local alive=""
        _dd_alive_as "$pid" "$name" && alive="$pid"
        _dd_our_child "$launcher" && alive="$alive${alive:+ }$launcher"
        [ -n "$alive" ] || return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            if [ -n "$killed" ]; then
                _dd_say "$name (pid $alive) still runs $_dd_kill_timeout s after SIGKILL: giving up; stop it by hand (kill -KILL $alive)"
                return 1
            fi
            _dd_say "$name (pid $alive) did not stop in $_dd_stop_timeout s: SIGKILL"
            # shellcheck disable=SC2086
            $_dd_sudo kill -KILL $alive 2>/dev/null || true
            killed=1
            deadline=$((SECONDS + _dd_kill_timeout))
        fi
        sleep 0.2
    done
}

# Builds $DISTLOCK_LOCAL_IMAGE from the machine's server binary; sets _dd_built_image to its id.
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
    # Global: an interrupted build leaves it to distlock_docker_down, which also finds the id
    # of an image imported just before the interruption in it (image-id).
    _dd_rootfs="$(mktemp -d /tmp/distlock-rootfs.XXXXXX)"
    local rootfs="$_dd_rootfs/root"
    mkdir -p "$rootfs/usr/local/bin" "$rootfs/data" "$rootfs/tmp"
    cp -L "$server" "$rootfs/usr/local/bin/$name"
    local lib
    for lib in $(ldd "$(readlink -f "$server")" 2>/dev/null | grep -o '/[^ ]*'); do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
    local ok=0
    tar -C "$rootfs" -c . | _dd_docker import \
        --change "ENTRYPOINT [\"/usr/local/bin/$name\"]" --change 'WORKDIR /data' \
        - "$DISTLOCK_LOCAL_IMAGE" >"$_dd_rootfs/image-id" 2>"$_dd_rootfs/errors" || ok=$?
    if [ "$ok" != 0 ]; then
        DISTLOCK_DOCKER_SKIP="docker import of $DISTLOCK_LOCAL_IMAGE failed: $(cat "$_dd_rootfs/errors")"
        return 1
    fi
    _dd_built_image="$(tail -n 1 "$_dd_rootfs/image-id")"
    rm -rf "$_dd_rootfs"
    _dd_rootfs=""
    _dd_say "built $DISTLOCK_LOCAL_IMAGE from $server ($("$server" --version | cut -d' ' -f1-3))"
}

# A loopback port nothing listens on.
_dd_free_port() {
    local port tries
    for ((tries = 0; tries < 50; tries++)); do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        # Refused: free (the testkit's own check, in bash: a connect to 127.0.0.1 only).
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# The first line the server on 127.0.0.1:$1 answers to PING, without its CR (bash's /dev/tcp).
_dd_ping() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'PING\r\n' >&3
        IFS= read -r -t 2 line <&3 || exit 1
        printf '%s' "${line%$'\r'}"
    ) 2>/dev/null
}

# Whether a server from image $1, in a container on the host network, answers PING on
# 127.0.0.1 (as the tests' servers will). The engine's host network must be this machine's:
# rootless Docker and Docker Desktop run `--version` fine but fail here. The image must be
# present (`--pull never`: registries are not contacted). The container is removed by id (or,
# when `docker run` failed after creating it, by its name).
_dd_image_serves() {
    local attempt
    # A port found free can be taken before the server binds it (a client socket of another
    # process on 127.0.0.1 may hold it): like the testkit's launches, try another port then.
    for ((attempt = 1; attempt <= 5; attempt++)); do
        _dd_port_taken=""
        _dd_image_serves_once "$1" && { DISTLOCK_DOCKER_SKIP=""; return 0; }
        [ -n "$_dd_port_taken" ] || return 1
        _dd_say "the trial server's port was taken ($attempt of 5): trying another"
    done
    return 1
}

# One trial of _dd_image_serves on a fresh port; sets _dd_port_taken when the server could
# not bind it.
_dd_image_serves_once() {
    local image="$1" port
    port="$(_dd_free_port)" || { DISTLOCK_DOCKER_SKIP="no free loopback port for a trial server"; return 1; }
    local name="distlock-trial-$$-$port" out id
    # Global: an interrupted trial leaves it to distlock_docker_down (by name).
    _dd_trial="$name"
    if ! out="$(_dd_docker run --detach --pull never --network host --name "$name" \
        --label "distlock.testkit.pid=$$" "$image" \
        --port "$port" --bind 127.0.0.1 --save '' --appendonly no 2>&1)"; then
        _dd_docker rm --force --volumes "$name" >/dev/null 2>&1
        _dd_trial=""
        if [[ "$out" == *"No such image"* ]]; then
            DISTLOCK_DOCKER_SKIP="$image is not in the engine (nothing is pulled: load it with docker load, or leave DISTLOCK_REDIS_IMAGE unset to build $DISTLOCK_LOCAL_IMAGE)"
        else
            DISTLOCK_DOCKER_SKIP="a container of $image does not start: $(echo "$out" | tail -n 1)"
        fi
        return 1
    fi
    id="$(echo "$out" | tail -n 1)"
    local deadline=$((SECONDS + 30)) ready_at="" reply="" logs="" why=""
    while :; do
        reply="$(_dd_ping "$port")" && [ "$reply" = "+PONG" ] && break
        logs="$(_dd_docker logs "$id" 2>&1)"
        if [ "$(_dd_docker inspect --format '{{.State.Running}}' "$id" 2>/dev/null)" != true ]; then
            why="it exited: $(echo "$logs" | tail -n 2 | tr '\n' ' ')"
            [[ "$logs" == *"Address already in use"* ]] && _dd_port_taken=1
            break
        fi
        # Ready in the container but not here: its host network is not this machine's.
        if [ -z "$ready_at" ] && [[ "$logs" == *"Ready to accept connections"* ]]; then
            ready_at=$SECONDS
        fi
        if [ -n "$ready_at" ] && [ $((SECONDS - ready_at)) -ge 3 ]; then
            why="it is ready in the container but 127.0.0.1:$port does not answer here (${reply:-no answer}): the engine's host network is not this machine's (rootless Docker, Docker Desktop?)"
            break
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            why="no PONG within 30 s (${reply:-no answer}): $(echo "$logs" | tail -n 1)"
            break
        fi
        sleep 0.2
    done
    _dd_docker rm --force --volumes "$id" >/dev/null 2>&1 || _dd_say "could not remove the trial container $id"
    _dd_trial=""
    if [ -n "$why" ]; then
        DISTLOCK_DOCKER_SKIP="a server in a container of $image does not answer on 127.0.0.1:$port: $why"
        return 1
    fi
}

# Removes the containers of the daemon this script started (all of them are this run's).
_dd_remove_containers() {
    [ -n "${_dd_pid:-}" ] || return 0
    local ids
    ids="$(_dd_docker ps --all --quiet --no-trunc 2>/dev/null)"
    if [ -n "$ids" ]; then
        _dd_say "removing containers left behind: $(echo "$ids" | tr '\n' ' ')"
        # shellcheck disable=SC2086
        _dd_docker rm --force --volumes $ids >/dev/null 2>&1 || true
    fi
}

# Removes the image this script built from an engine that stays (its own daemon's data root
# is removed with its directory): the tag, if it still names the image built (the image goes
# with its last tag).
_dd_remove_image() {
    if [ -z "${_dd_built_image:-}" ] && [ -n "${_dd_rootfs:-}" ]; then
        _dd_built_image="$(tail -n 1 "$_dd_rootfs/image-id" 2>/dev/null)"
    fi
    [ -n "${_dd_built_image:-}" ] || return 0
    if [ -z "${_dd_dir:-}" ] &&
        [ "$(_dd_docker image inspect --format '{{.Id}}' "$DISTLOCK_LOCAL_IMAGE" 2>/dev/null)" = "$_dd_built_image" ]; then
        if _dd_docker rmi "$DISTLOCK_LOCAL_IMAGE" >/dev/null 2>&1; then
            _dd_say "removed $DISTLOCK_LOCAL_IMAGE ($_dd_built_image)"
        else
            _dd_say "could not remove $DISTLOCK_LOCAL_IMAGE ($_dd_built_image)"
        fi
    fi
    _dd_built_image=""
}

distlock_docker_up() {
    DISTLOCK_DOCKER_SKIP=""
    _dd_sudo=""
    _dd_pid=""
    _dd_launcher=""
    _dd_dir=""
    _dd_built_image=""
    _dd_made_policy=""
    _dd_apt_log=""
    _dd_rootfs=""
    _dd_trial=""
    if _dd_engine_answers; then
        _dd_say "using the engine the docker command reaches ($(docker version --format '{{.Server.Version}}'))"
    else
        if ! _dd_privileges; then
            DISTLOCK_DOCKER_SKIP="no Docker engine answers, and starting one needs root or passwordless sudo"
            return 1
        fi
        if ! _dd_find_dockerd; then
            _dd_install_engine || { distlock_docker_down; return 1; }
        fi
        command -v docker >/dev/null 2>&1 || { DISTLOCK_DOCKER_SKIP="dockerd is installed but there is no docker command"; return 1; }
        _dd_dir="$(mktemp -d /tmp/distlock-docker.XXXXXX)"
        local driver reasons=""
        for driver in ${DISTLOCK_DOCKER_STORAGE_DRIVERS:-overlay2 vfs}; do
            if _dd_start_daemon "$driver"; then
                _dd_say "started dockerd $("$_dd_dockerd" --version | cut -d' ' -f3 | tr -d ,) (pid $_dd_pid, storage driver $driver, no bridge network) on $DOCKER_HOST"
                break
            fi
            reasons="$reasons${reasons:+; }$DISTLOCK_DOCKER_SKIP"
            # A daemon that would not stop: starting another one would not help.
            [ -z "$_dd_launcher" ] || break
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
    if ! _dd_image_serves "$image"; then
        distlock_docker_down
        return 1
    fi
    export DISTLOCK_REDIS_IMAGE="$image"
    # The engine and the image are proven: the container tests must not skip from here on.
    export DISTLOCK_CONTAINERS_REQUIRED=1
}

distlock_docker_down() {
    local ok=0
    if [ -n "${_dd_trial:-}" ]; then
        _dd_docker rm --force --volumes "$_dd_trial" >/dev/null 2>&1
        _dd_trial=""
    fi
    _dd_remove_containers
    _dd_remove_image
    _dd_stop_daemon || ok=1
    if [ -n "${_dd_dir:-}" ]; then
        if [ "$ok" != 0 ]; then
            # The daemon still runs: its files stay (removing them under it would not stop it).
            _dd_say "left $_dd_dir in place: the daemon that uses it still runs"
        else
            # dockerd leaves its network namespace mount (exec root/netns/default) behind.
            local mnt
            awk -v d="$_dd_dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r |
                while IFS= read -r mnt; do
                    $_dd_sudo umount "$mnt" 2>/dev/null || _dd_say "could not unmount $mnt"
                done
            # Never into a mount that stayed.
            $_dd_sudo rm -rf --one-file-system "$_dd_dir" 2>/dev/null || _dd_say "could not remove $_dd_dir"
            _dd_dir=""
            unset DOCKER_HOST
        fi
    fi
    _dd_remove_policy
    [ -z "${_dd_apt_log:-}" ] || rm -f "$_dd_apt_log"
    [ -z "${_dd_rootfs:-}" ] || rm -rf "$_dd_rootfs"
    _dd_apt_log=""
    _dd_rootfs=""
    unset DISTLOCK_CONTAINERS_REQUIRED
    [ -n "${_dd_made_policy:-}" ] && ok=1
    return "$ok"
}

# Run (not sourced): set up, run the command (default: the container tests), tear down.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    cd "$_dd_root" || exit 1
    # Before the setup: an interrupted setup (apt, dockerd starting, the image, the trial
    # container) cleans up too. While cleaning up, further signals are ignored. (A signal is
    # acted on once the foreground command ends: apt-get, which is best left to finish, and
    # COMMAND, which Ctrl-C reaches too, being in the same process group.)
    _dd_on_exit() {
        local status=$?
        trap '' INT TERM HUP
        # A daemon or policy-rc.d left behind fails the run.
        distlock_docker_down || [ "$status" != 0 ] || status=1
        exit "$status"
    }
    trap _dd_on_exit EXIT
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if ! distlock_docker_up; then
        echo "container variant skipped: $DISTLOCK_DOCKER_SKIP"
        exit 0
    fi
    echo "container variant: image $DISTLOCK_REDIS_IMAGE on the engine at ${DOCKER_HOST:-the default socket}"
    if [ "$#" -eq 0 ]; then
        cargo test --all-features -p lock-testkit --test containers &&
            cargo test --all-features -p lock-redis --test conformance_containers
    else
        "$@"
    fi
fi
