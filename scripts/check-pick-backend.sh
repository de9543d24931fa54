#!/usr/bin/env bash
# Runs the `pick_backend` example three ways, on one node (default features), on a RedLock over
# three nodes (`--features redlock`) and with the locks on PostgreSQL (`--features postgres`),
# each on private servers it starts itself, and checks that the counter it reports is exactly
# tasks × increments. Extra arguments go to `cargo run`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-redis.sh
source scripts/ensure-redis.sh
ensure_redis_server
ensure_postgres

tasks=8
increments=25
expected=$((tasks * increments))

run() {
    local label="$1"
    shift
    local output status=0
    output="$(cargo run --quiet -p distlock-examples --bin pick_backend "$@" -- \
        --tasks "$tasks" --increments "$increments")" || status=$?
    printf '%s\n' "$output" | sed "s/^/[$label] /"
    if [ "$status" -ne 0 ]; then
        echo "pick_backend ($label) exited with $status" >&2
        exit 1
    fi
    local counter
    counter="$(printf '%s\n' "$output" | sed -n 's/^counter: \([0-9][0-9]*\) .*/\1/p')"
    if [ "$counter" != "$expected" ]; then
        echo "pick_backend ($label): counter ${counter:-missing}, expected $expected" >&2
        exit 1
    fi
    echo "[$label] counter $counter = $tasks tasks x $increments increments"
}

run "single node" "$@"
run "RedLock" --features redlock "$@"
run "PostgreSQL" --features postgres "$@"
