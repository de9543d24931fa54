#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would run them one by one.

Why not cargo-nextest: nextest runs every test in a process of its own, and our fixtures are
shared per test binary: `conformance_cluster`'s 263 tests share one 6-process Redis Cluster,
`sentinel`'s 117 one Sentinel group. Per test, those would be started 380 times. So the unit
here is the test binary: each runs exactly as under `cargo test` (its own working directory and
`CARGO_MANIFEST_DIR`, its tests on its own threads), and several run at once, because the tests
mostly sleep (fault schedules, leases, server start-ups) and leave the cores idle.

Server variants: `--server LABEL=PATH[:PACKAGE,...]` (repeatable) runs the binaries once per
server, every test binary with DISTLOCK_REDIS_SERVER=PATH; with a package list only those
packages' binaries and doc tests run against that server. Binaries whose result does not
depend on the server (in-memory stores only, or servers from a container image) run with the
first server only (SERVER_FREE, IMAGE_SERVERS below). The test binaries are built once for
all variants (one `cargo test --no-run` over the union of the selection: a second build with
another package selection would unify other features and recompile much of the tree), and every
(binary, server) job goes into one pool. Without --server there is one variant, the server of
the environment (DISTLOCK_REDIS_SERVER as it is, labelled by its file name).

Groups keep apart what must not share the machine with its own kind, counted over all variants
together: binaries that start Redis Clusters or Sentinel groups (6 servers each) at most two at
once, so the servers alive stay bounded; the fault batteries at most two at once (their
liveness bounds bear one other battery, not more); the doc tests one at a time (each is
a `cargo test --doc`, and two would only wait for each other's lock on the target directory).
Everything else fills the other slots. The batteries start first (in a row they are the longest
chain), then the longest binaries, by the times of the last run (kept per binary and server in
`target/test-times.json`).

Usage: scripts/run-tests.py [--jobs N] [-p PACKAGE]... [--server LABEL=PATH[:PACKAGE,...]]...
                            [--group-limit GROUP=N]... [--no-doc] [--skip BINARY]...
                            [-- TEST-BINARY ARGS...]
Exits 1 when a test binary fails (its whole output is printed then), 2 on bad usage.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

# Test binaries (package::target) that start Redis Clusters (6 servers each) or Sentinel groups:
# at most two at once, so the servers alive stay bounded.
FLEETS = {
    "lock-redis::conformance_cluster",
    "lock-redis::conformance_containers",
    "lock-redis::battery_cluster",
    "lock-redis::cluster_faults",
    "lock-redis::sentinel",
    "lock-redis::acl",
    "lock-redis::tls",
    "lock-redis::own_client",
    "lock-redis::deployment_config",
    "lock-redis::describe_family",
    "lock-testkit::cluster",
    "lock-testkit::sentinel",
    "lock-testkit::containers",
    "distlock-cli::status",
    "distlock-examples::counter_deployments",
    "distlock-examples::raw_sentinel",
}
# Fault batteries (liveness bounds under injected faults): one at a time.
BATTERIES = {
    "lock-redis::battery",
    "lock-redis::battery_cluster",
    "lock-redis::cluster_faults",
    "lock-multi::battery",
    "lock-redis::failover_battery",
    "lock-multi::usage_battery",
    "lock-redis::family_battery",
    "lock-redis::family_faults",
    "lock-redis::election_battery",
    "lock-redis::permits_battery",
    "distlock-examples::counter_stalls",
}
# Binaries whose result does not depend on the server variant: they run once, with the first
# --server given. Those that start no server at all (in-memory stores only) run with
# DISTLOCK_REDIS_SERVER naming a file that does not exist, so one that starts a server after all
# fails instead of quietly depending on the variant; the container tests' servers come from
# the container image, whatever the variant.
SERVER_FREE = {
    "lock-testkit::conformance_memory",
    "lock-multi::conformance_memory",
    "lock-multi",
}
IMAGE_SERVERS = {
    "lock-testkit::containers",
    "lock-redis::conformance_containers",
}
NO_SERVER = "/nonexistent/server-free-test-binaries-start-no-server"
DOC_TESTS = "doc tests"
# The limits hold over all server variants together (a Valkey cluster and a Redis cluster are
# 12 processes either way; a battery's bounds do not care which server the other battery runs).
# Two batteries at once: one at a time, the batteries were the longest chain of a run (~8 min of
# ~14 with two servers, ~7.5 of ~8 with one). Their bounds bear a second battery beside them:
# CI ran them two at a time, beside the other binaries and its compiling checks, green three runs
# in a row (each battery takes longer so, e.g. lock-multi's 123 s → 162 s, but the chain halves).
GROUP_LIMITS = {"fleet": 2, "battery": 2, "doc": 1}
TIMEOUT_S = 20 * 60  # a binary still running after this is killed (its servers die with it)
# Binaries at once. With one server 3 keep the cores about half busy. With two servers a fourth slot
# packed the rest around the ~12 min battery chain, but the load it added (4-5 on 2 cores) made
# timing-bound tests fail in CI (a RedLock node's release past its 15 ms timeout, a waiter's
# attempt landing after the release it waited for): 3 there too, until those tests bear it.
DEFAULT_JOBS_ONE_SERVER = 3
DEFAULT_JOBS_SEVERAL_SERVERS = 3


def groups_of(name):
    groups = set()
    if name in FLEETS:
        groups.add("fleet")
    if name in BATTERIES:
        groups.add("battery")
    if name == DOC_TESTS:
        groups.add("doc")
    return groups


def build(selection, cargo_args):
    """Builds the test binaries; returns [(package, name, executable, package dir)]."""
    command = ["cargo", "test", "--all-features", "--no-run", "--message-format=json-render-diagnostics"]
    command += selection + cargo_args
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    binaries = []
    for line in process.stdout:
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"].get("test"):
            continue
        target = message["target"]
        package = message["package_id"]
        package_name = package_name_of(package, message["manifest_path"])
        kind = target["kind"][0]
        label = target["name"] if kind in ("test", "bench") else (
            "lib" if kind in ("lib", "rlib", "proc-macro") else f"bin/{target['name']}")
        name = f"{package_name}::{label}" if label != "lib" else package_name
        binaries.append((package_name, name, message["executable"],
                         os.path.dirname(message["manifest_path"])))
    if process.wait() != 0:
        sys.exit(process.returncode or 1)
    return binaries


def package_name_of(package_id, manifest_path):
    # path+file:///…/crates/lock-redis#0.1.0 or …#lock-redis@0.1.0: read the manifest instead.
    with open(manifest_path, encoding="utf-8") as manifest:
        in_package = False
        for line in manifest:
            stripped = line.strip()
            if stripped.startswith("["):
                in_package = stripped == "[package]"
            elif in_package and stripped.startswith("name"):
                return stripped.split("=", 1)[1].strip().strip('"')
    return os.path.basename(os.path.dirname(manifest_path))


def workspace_packages():
    """{package name: its directory relative to the workspace root, ending in /}."""
    output = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"],
                            stdout=subprocess.PIPE, text=True, check=True).stdout
    metadata = json.loads(output)
    root = metadata["workspace_root"]
    return {
        package["name"]: os.path.relpath(os.path.dirname(package["manifest_path"]), root) + "/"
        for package in metadata["packages"]
    }


class Variant:
    """A server to run tests against: label, binary (None: the environment's), packages (None: all)."""

    def __init__(self, label, path, packages):
        self.label, self.path, self.packages = label, path, packages

    def env(self, base):
        return dict(base) if self.path is None else dict(base, DISTLOCK_REDIS_SERVER=self.path)


def parse_server(parser, text):
    """LABEL=PATH[:PACKAGE,...] -> Variant."""
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        parser.error(f"--server {text}: expected LABEL=PATH[:PACKAGE,...]")
    path, _, packages = rest.partition(":")
    path = os.path.abspath(path)
    if not os.access(path, os.X_OK):
        parser.error(f"--server {text}: {path} is not an executable file")
    selected = [package for package in packages.split(",") if package] if packages else None
    return Variant(label, path, selected)


def default_variant():
    """The environment's server, labelled like the --server variants would usually be."""
    path = os.environ.get("DISTLOCK_REDIS_SERVER")
    label = os.path.basename(path).removesuffix("-server") if path else "default"
    return Variant(label or "default", None, None)


class Job:
    def __init__(self, name, variant, command, cwd, env):
        self.name, self.variant, self.command, self.cwd, self.env = name, variant, command, cwd, env
        self.title = f"{name} [{variant.label}]"  # how output and the summary name it
        self.key = f"{name}@{variant.label}"  # its entry in test-times.json
        self.groups = groups_of(name)
        self.process = None
        self.log = None
        self.started = None
        self.seconds = None
        self.status = None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None,
                        help="test binaries at once (default 3 with one server, 4 with several, "
                             "or DISTLOCK_TEST_JOBS)")
    parser.add_argument("-p", "--package", action="append", default=[],
                        help="only this package's tests (repeatable; default: the workspace)")
    parser.add_argument("--server", action="append", default=[], metavar="LABEL=PATH[:PACKAGE,...]",
                        help="run against this server binary, only these packages' tests if listed "
                             "(repeatable; default: DISTLOCK_REDIS_SERVER or the testkit's search)")
    parser.add_argument("--group-limit", action="append", default=[], metavar="GROUP=N",
                        help=f"change a group's limit (groups and defaults: {GROUP_LIMITS})")
    parser.add_argument("--no-doc", action="store_true", help="leave out the doc tests")
    parser.add_argument("--skip", action="append", default=[], metavar="BINARY",
                        help="leave out a test binary, by its name as the results print it "
                             "(e.g. lock-multi::usage_battery), with every server (repeatable)")
    parser.add_argument("rest", nargs="*", help="after --: arguments for every test binary")
    args = parser.parse_args()

    variants = [parse_server(parser, text) for text in args.server] or [default_variant()]
    labels = [variant.label for variant in variants]
    if len(set(labels)) != len(labels):
        parser.error(f"--server labels must differ: {labels}")
    limits = dict(GROUP_LIMITS)
    for text in args.group_limit:
        group, _, number = text.partition("=")
        if group not in limits or not number.isdigit() or int(number) < 1:
            parser.error(f"--group-limit {text}: expected one of {sorted(limits)}=N, N at least 1")
        limits[group] = int(number)
    jobs_at_once = args.jobs or int(os.environ.get("DISTLOCK_TEST_JOBS", "0")) or (
        DEFAULT_JOBS_ONE_SERVER if len(variants) == 1 else DEFAULT_JOBS_SEVERAL_SERVERS)
    if jobs_at_once < 1:
        parser.error("--jobs must be at least 1")

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target_dir = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    times_path = os.path.join(target_dir, "test-times.json")
    # The times of this tree's last run, over those of a CI run kept in the repository
    # (scripts/test-times.json): a clean clone has no target/ yet, and without times the long
    # binaries would start in any order and one of them could end the run alone.
    last_times = {}
    for path in (os.path.join(root, "scripts", "test-times.json"), times_path):
        try:
            with open(path, encoding="utf-8") as times_file:
                last_times.update(json.load(times_file))
        except (OSError, ValueError):
            pass

    os.chdir(root)
    # One build for every variant. Its selection: -p if given, else the union of the variants'
    # packages when each lists some, else the workspace.
    if args.package:
        built = list(args.package)
    elif all(variant.packages for variant in variants):
        built = sorted({package for variant in variants for package in variant.packages})
    else:
        built = None
    directories = workspace_packages()
    for variant in variants:
        # A misspelt package would otherwise just run nothing against that server.
        outside = [package for package in variant.packages or []
                   if package not in (built or directories)]
        if outside:
            parser.error(f"--server {variant.label}: {', '.join(outside)} not among the packages built "
                         f"({', '.join(built or sorted(directories))})")
    selection = [arg for package in built for arg in ("-p", package)] if built else ["--workspace"]
    binaries = build(selection, [])
    unknown = sorted(set(args.skip) - {name for _, name, _, _ in binaries})
    if unknown:
        parser.error(f"--skip: no test binary named {', '.join(unknown)}")
    binaries = [binary for binary in binaries if binary[1] not in args.skip]

    jobs = []
    for index, variant in enumerate(variants):
        for package, name, executable, package_dir in binaries:
            if variant.packages is not None and package not in variant.packages:
                continue
            if index > 0 and name in SERVER_FREE | IMAGE_SERVERS:
                continue
            env = variant.env(dict(os.environ, CARGO_MANIFEST_DIR=package_dir))
            if name in SERVER_FREE:
                env["DISTLOCK_REDIS_SERVER"] = NO_SERVER
            jobs.append(Job(name, variant, [executable] + args.rest, package_dir, env))
        if args.no_doc:
            continue
        # The doc tests take the build's selection whatever the variant: with another one cargo
        # would unify other features and rebuild the libraries while the tests run. A variant
        # limited to some packages skips the others' doc tests by name instead (a doc test is
        # named after its file, "crates/lock-redis/src/lib.rs - … (line N)"; --skip keeps any
        # name filter among the arguments working).
        command = ["cargo", "test", "--all-features", "--doc"] + selection + ["--"] + args.rest
        if variant.packages is not None:
            others = [package for package in (built or directories) if package not in variant.packages]
            for package in sorted(others):
                command += ["--skip", directories[package]]
        jobs.append(Job(DOC_TESTS, variant, command, root, variant.env(os.environ)))
    # The batteries first (one at a time, they are the longest chain), then longest first
    # (unknown ones as 30 s; a time recorded before the keys named the server counts for all),
    # so the tail of the run is short binaries.
    def last_time(job):
        return last_times.get(job.key, last_times.get(job.name, 30.0))
    jobs.sort(key=lambda job: ("battery" not in job.groups, -last_time(job)))

    started = time.monotonic()
    pending, running, done = list(jobs), [], []
    failed = []

    def can_start(job):
        return all(
            sum(1 for other in running if group in other.groups) < limits[group]
            for group in job.groups
        )

    def finish(job, status):
        job.seconds = time.monotonic() - job.started
        job.status = status
        job.log.seek(0)
        output = job.log.read()
        job.log.close()
        verdict = "ok  " if status == 0 else "FAIL"
        summary = test_counts(output)
        print(f"{verdict} {job.seconds:7.1f} s  {job.title}  {summary}", flush=True)
        if status != 0:
            failed.append(job)
            print(f"---- output of {job.title} (exit {status}) ----\n{output}---- end of {job.title} ----",
                  flush=True)

    for variant in variants:
        path = variant.path or os.environ.get("DISTLOCK_REDIS_SERVER", "the testkit's choice")
        scope = ", ".join(variant.packages) if variant.packages else "every package"
        print(f"server {variant.label}: {path} ({scope})", flush=True)
    print(f"{len(jobs)} test binaries, {jobs_at_once} at once", flush=True)
    try:
        while pending or running:
            while len(running) < jobs_at_once:
                job = next((job for job in pending if can_start(job)), None)
                if job is None:
                    break
                pending.remove(job)
                job.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
                job.started = time.monotonic()
                job.process = subprocess.Popen(job.command, cwd=job.cwd, env=job.env,
                                               stdout=job.log, stderr=subprocess.STDOUT, text=True)
                running.append(job)
            time.sleep(0.2)
            for job in list(running):
                status = job.process.poll()
                if status is None and time.monotonic() - job.started > TIMEOUT_S:
                    job.process.kill()
                    status = job.process.wait()
                    job.log.write(f"\nkilled after {TIMEOUT_S} s\n")
                if status is not None:
                    running.remove(job)
                    done.append(job)
                    finish(job, status)
    except KeyboardInterrupt:
        for job in running:
            job.process.send_signal(signal.SIGKILL)
        raise

    wall = time.monotonic() - started
    total = sum(job.seconds for job in done)
    times = dict(last_times)
    times.update({job.key: round(job.seconds, 1) for job in done if job.status == 0})
    os.makedirs(target_dir, exist_ok=True)
    with open(times_path, "w", encoding="utf-8") as times_file:
        json.dump(times, times_file, indent=1, sort_keys=True)
    print(f"\n{len(done)} test binaries in {wall:.0f} s ({total:.0f} s one after another), "
          f"{len(failed)} failed", flush=True)
    for job in failed:
        print(f"  failed: {job.title}", flush=True)
    return 1 if failed else 0


def test_counts(output):
    results = [line for line in output.splitlines() if line.startswith("test result:")]
    if not results:
        return ""
    passed = failed = ignored = 0
    for line in results:
        for part in line.split(";"):
            words = part.replace("test result: ok.", "").replace("test result: FAILED.", "").split()
            if len(words) >= 2 and words[0].isdigit():
                count = int(words[0])
                if words[1] == "passed":
                    passed += count
                elif words[1] == "failed":
                    failed += count
                elif words[1] == "ignored":
                    ignored += count
    return f"({passed} passed, {failed} failed, {ignored} ignored)"


if __name__ == "__main__":
    sys.exit(main())
