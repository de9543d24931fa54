#!/usr/bin/env bash
# The demo: 500 tasks in 2 processes increment one counter in Redis under one lock.
# Extra arguments go to the counter example (see --help), e.g. --url redis://127.0.0.1:6379/.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-redis.sh
source scripts/ensure-redis.sh
ensure_redis_server
if [ "$#" -eq 0 ]; then set -- --tasks 500 --processes 2; fi
exec cargo run --quiet --release -p distlock-examples --bin counter -- "$@"
