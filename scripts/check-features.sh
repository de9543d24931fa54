#!/usr/bin/env bash
# Checks the facade `distlock` (library and tests, lints as errors) with no default features and
# with each of its cargo features alone, so that no feature leans on another one that happens to
# be on in the default or the all-features build, and that each has a row in both feature tables
# (README.md, the crate docs). The features are read from `cargo metadata`,
# so a new one is checked without editing this script. Extra arguments go to every `cargo clippy`.
set -euo pipefail
cd "$(dirname "$0")/.."

features="$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
package = next(p for p in json.load(sys.stdin)["packages"] if p["name"] == "distlock")
print(" ".join(sorted(name for name in package["features"] if name != "default")))
')"

# Every feature is documented in both tables: the README's (also the crates.io page) and the
# crate docs' (docs.rs). A row starts with the feature's name in backticks.
missing=0
for feature in $features; do
    for table in README.md crates/distlock/src/lib.rs; do
        if ! grep -q "^\(//! \)\?| \`$feature\` |" "$table"; then
            echo "feature \`$feature\` of distlock has no row in the feature table of $table" >&2
            missing=1
        fi
    done
done
[ "$missing" = 0 ] || exit 1

check() {
    echo "distlock --no-default-features${*:+ $*}"
    cargo clippy --quiet -p distlock --all-targets --no-default-features "$@" -- -D warnings
}

check
for feature in $features; do
    check --features "$feature"
done
