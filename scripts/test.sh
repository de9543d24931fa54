#!/usr/bin/env bash
# Runs every test (unit, integration, conformance, doc tests) against real server processes that
# the testkit starts on free loopback ports. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-redis.sh
source scripts/ensure-redis.sh
ensure_redis_server
ensure_nutcracker
exec cargo test --workspace --all-features "$@"
