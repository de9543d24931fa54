#!/usr/bin/env python3
"""Checks that the files of each crate import one another one way only: no import circles.

Every library crate of the workspace is a ladder (see the top of each `lib.rs` and
docs/design.md): a file uses only files below it. This script reads each crate's `src/`, maps
files to module paths (`src/call/mod.rs` is `crate::call`, `src/call/coalesce.rs` is
`crate::call::coalesce`), collects the modules each file names (`use crate::…`, `use super::…`,
`use self::…`, and `crate::…` paths in code), and reports every group of files that reach one
another. Unit tests (`#[cfg(test)] mod tests`) are left out: they may use anything of their own
file's parents. Exit status 1 when a circle is found.

Usage: scripts/check-layers.py [CRATE_DIR ...]   (default: every crates/*/ with a src/lib.rs)
"""

import re
import sys
from pathlib import Path


def module_of(src: Path, file: Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("lib", "mod"):
        parts.pop()
    return tuple(parts)


def strip_noise(text: str) -> str:
    """Drops comments, string literals and the unit-test module at the end of a file."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    tests = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if tests:
        text = text[: tests.start()]
    return text


def expand(tree: str) -> list:
    """Expands a use tree (`a::{b, c::{d, e}}`) into its full paths."""
    tree = tree.strip()
    if not tree:
        return []
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"\s+as\s+\w+$", "", tree).strip()]
    prefix = tree[:brace].rstrip(":").strip()
    inner = tree[brace + 1 : tree.rfind("}")]
    parts, depth, current = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        current += ch
    parts.append(current)
    paths = []
    for part in parts:
        for path in expand(part):
            if path == "self":
                paths.append(prefix)
            elif path:
                paths.append(f"{prefix}::{path}" if prefix else path)
    return paths


def resolve(path: str, here: tuple) -> tuple | None:
    """The module path a `use` path starts from, or None when it is not within the crate."""
    segments = [s for s in path.split("::") if s]
    if not segments:
        return None
    # `super` and `self` are relative to the module of the file (its folder for mod.rs / lib.rs).
    base = list(here)
    if segments[0] == "crate":
        base, segments = [], segments[1:]
    elif segments[0] in ("self", "super"):
        while segments and segments[0] in ("self", "super"):
            if segments.pop(0) == "super":
                if not base:
                    return None
                base.pop()
    else:
        return None
    return tuple(base + segments)


def edges_of(src: Path) -> tuple:
    files = sorted(src.rglob("*.rs"))
    modules = {module_of(src, f): f for f in files}
    edges = {f: set() for f in files}
    for file in files:
        here = module_of(src, file)
        text = strip_noise(file.read_text())
        paths = []
        for statement in re.findall(r"\buse\s+([^;]+);", text):
            paths += expand(statement)
        paths += re.findall(r"\bcrate(?:::\w+)+", text)
        for path in paths:
            target = resolve(path, here)
            if target is None:
                continue
            # The longest prefix that is a file's module is the file named.
            while target and target not in modules:
                target = target[:-1]
            if not target:
                continue
            other = modules[target]
            # A parent naming its children and a child naming its parent are edges like any
            # other: both at once make a circle.
            if other != file:
                edges[file].add(other)
    return files, edges


def circles(files: list, edges: dict) -> list:
    """Strongly connected groups of more than one file (Tarjan)."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for node in files:
        if node not in index:
            visit(node)
    return groups


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    crates = [Path(arg) for arg in sys.argv[1:]] or sorted(
        path.parent.parent for path in root.glob("crates/*/src/lib.rs")
    )
    failed = False
    for crate in crates:
        files, edges = edges_of(crate / "src")
        found = circles(files, edges)
        arrows = sum(len(targets) for targets in edges.values())
        if found:
            failed = True
            print(f"{crate.name}: {len(found)} import circle(s)")
            for group in found:
                names = {f: str(f.relative_to(crate)) for f in group}
                for f in group:
                    inside = sorted(names[t] for t in edges[f] if t in names)
                    print(f"  {names[f]} -> {', '.join(inside)}")
        else:
            print(f"{crate.name}: {len(files)} files, {arrows} imports between them, no circle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
