#!/usr/bin/env bash
# Checks the facade `distlock` (library and tests, lints as errors) with no default features and
# with each of its cargo features alone, so that no feature leans on another one that happens to
# be on in the default or the all-features build. The features are read from `cargo metadata`,
# so a new one is checked without editing this script. Extra arguments go to every `cargo clippy`.
set -euo pipefail
cd "$(dirname "$0")/.."

features="$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
package = next(p for p in json.load(sys.stdin)["packages"] if p["name"] == "distlock")
print(" ".join(sorted(name for name in package["features"] if name != "default")))
')"

check() {
    echo "distlock --no-default-features${*:+ $*}"
    cargo clippy --quiet -p distlock --all-targets --no-default-features "$@" -- -D warnings
}

check
for feature in $features; do
    check --features "$feature"
done
