#!/usr/bin/env bash
# Runs every test (unit, integration, conformance, doc tests) against real server processes
# (Redis or Valkey, twemproxy, PostgreSQL: installed with apt-get as root when missing) that
# the testkit starts on free loopback ports. The test binaries run side by side
# (scripts/run-tests.py: the fault batteries one at a time, at most two binaries with clusters or
# Sentinel groups at once). Arguments: run-tests.py's (--jobs N, -p PACKAGE, --no-doc,
# --server LABEL=PATH[:PACKAGE,...] to run against several servers in one pool), then after `--`
# arguments for every test binary (a name filter, --nocapture).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-redis.sh
source scripts/ensure-redis.sh
ensure_redis_server
ensure_nutcracker
ensure_postgres
if ! command -v python3 >/dev/null 2>&1; then
    echo "the test runner needs python3 (Debian: sudo apt-get install python3)" >&2
    exit 1
fi
exec python3 scripts/run-tests.py "$@"
