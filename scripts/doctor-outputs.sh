#!/usr/bin/env bash
# Writes docs/doctor-outputs.md: what `distlock doctor` prints under each restriction set of
# managed services that an ACL can express (the sets of lock_testkit::restrictions), against a
# private server on a free loopback port (stopped by its pid at the end).
#
#   scripts/doctor-outputs.sh [SERVER-BINARY ...]
#
# With no argument: the redis-server on PATH, then Valkey (scripts/ensure-redis.sh fetches it),
# for the set without scripts only (the one whose outcome differs between them).
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/doctor-outputs.md

cargo build --quiet -p distlock-cli --bin distlock
distlock="${CARGO_TARGET_DIR:-target}/debug/distlock"

# The sets, as in crates/lock-testkit/src/restrictions.rs: name | ACL rules after +@all.
sets=(
  "node-based ElastiCache / MemoryDB (admin commands)|-config -debug -migrate -replicaof -save -bgsave"
  "Upstash (no CLIENT, no WAIT)|-client -wait"
  "no SCRIPT (scripts sent whole)|-script"
  "no EVALSHA (every script sent whole)|-evalsha"
  "no pub/sub (twemproxy's set, as NOPERM)|-subscribe -ssubscribe -psubscribe -publish -spublish"
  "only what the library lists (Memorystore-like NOPERM for the rest)|-@all +ping +evalsha +eval +pexpire +pttl +del +type +publish +subscribe +unsubscribe +exists +hset +hget +hdel +hexists +hincrby +hgetall +set +get +time"
  "no scripts at all (OCI Cache sharded; Valkey 9 with scripting denied)|-@scripting"
)

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Sends one command (its words as arguments) to 127.0.0.1:$port and fails on an error reply.
command_to() {
  local port=$1
  shift
  python3 - "$port" "$@" <<'PY'
import socket, sys
port, words = int(sys.argv[1]), sys.argv[2:]
request = "*%d\r\n" % len(words) + "".join(
    "$%d\r\n%s\r\n" % (len(word.encode()), word) for word in words)
with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
    connection.sendall(request.encode())
    reply = connection.recv(65536)
if reply.startswith(b"-"):
    sys.exit("refused: %s" % reply.decode().strip())
PY
}

# Runs `distlock doctor` under each set given by index ($2 ...) against the server binary $1.
doctor_under() {
  local binary=$1
  shift
  local port dir pid
  port="$(free_port)"
  dir="$(mktemp -d)"
  "$binary" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    >"$dir/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do
    command_to "$port" PING 2>/dev/null && break
    sleep 0.1
  done
  local version
  version="$("$binary" --version | cut -d' ' -f1-3)"
  for index in "$@"; do
    local name="${sets[$index]%%|*}" rules="${sets[$index]#*|}"
    # shellcheck disable=SC2086 # the rules are words
    command_to "$port" ACL SETUSER "user$index" reset on '>pw' '~*' '&*' +@all $rules
    local status=0
    local report
    report="$("$distlock" --url "redis://user$index:pw@127.0.0.1:$port/" doctor)" || status=$?
    {
      echo
      echo "## $name, on $version"
      echo
      echo "ACL rules after \`+@all\`: \`$rules\`. Exit status $status."
      echo
      echo '```text'
      echo "$report"
      echo '```'
    } >>"$out"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

{
  echo "# \`distlock doctor\` under each restriction set"
  echo
  echo "What \`distlock doctor\` prints for a user restricted as each managed service or proxy"
  echo "that an ACL can express restricts it ([deployments.md](deployments.md#proxies-and-managed-services);"
  echo "twemproxy's own output is in [cli.md](cli.md#distlock-doctor---json)). Written by"
  echo "\`scripts/doctor-outputs.sh\` (the probe's keys carry a random id, so they differ per run)."
  echo "The lock conformance suite and the counter run under the same sets in"
  echo "\`crates/lock-redis/tests/restricted.rs\` and \`examples/tests/counter_deployments.rs\`."
} >"$out"

if [ "$#" -gt 0 ]; then
  for binary in "$@"; do
    doctor_under "$binary" $(seq 0 $((${#sets[@]} - 1)))
  done
else
  doctor_under "$(command -v redis-server)" $(seq 0 $((${#sets[@]} - 1)))
  # shellcheck source=scripts/ensure-redis.sh
  source scripts/ensure-redis.sh
  ensure_valkey_server >/dev/null
  doctor_under "$DISTLOCK_REDIS_SERVER" $((${#sets[@]} - 1))
fi
echo "wrote $out"
