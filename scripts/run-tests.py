#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would run them one by one.

Why not cargo-nextest: nextest runs every test in a process of its own, and our fixtures are
shared per test binary: `conformance_cluster`'s 263 tests share one 6-process Redis Cluster,
`sentinel`'s 117 one Sentinel group. Per test, those would be started 380 times. So the unit
here is the test binary: each runs exactly as under `cargo test` (its own working directory and
`CARGO_MANIFEST_DIR`, its tests on its own threads), and several run at once, because the tests
mostly sleep (fault schedules, leases, server start-ups) and leave the cores idle.

Groups keep apart what must not share the machine with its own kind: binaries that start Redis
Clusters (6 servers each) run one at a time, and so do the fault batteries, whose liveness
bounds assume the cores are not taken by another battery. Everything else fills the other
slots. The batteries start first (in a row they are the longest chain), then the longest
binaries, by the times of the last run (kept in `target/test-times.json`).

Usage: scripts/run-tests.py [--jobs N] [-p PACKAGE]... [--no-doc] [-- TEST-BINARY ARGS...]
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
GROUP_LIMITS = {"fleet": 2, "battery": 1}
TIMEOUT_S = 20 * 60  # a binary still running after this is killed (its servers die with it)


def groups_of(name):
    groups = set()
    if name in FLEETS:
        groups.add("fleet")
    if name in BATTERIES:
        groups.add("battery")
    return groups


def build(packages, cargo_args):
    """Builds the test binaries; returns [(name, executable, package dir)]."""
    selection = [arg for package in packages for arg in ("-p", package)] or ["--workspace"]
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
        binaries.append((name, message["executable"], os.path.dirname(message["manifest_path"])))
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


class Job:
    def __init__(self, name, command, cwd, env):
        self.name, self.command, self.cwd, self.env = name, command, cwd, env
        self.groups = groups_of(name)
        self.process = None
        self.log = None
        self.started = None
        self.seconds = None
        self.status = None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("DISTLOCK_TEST_JOBS", "3")),
                        help="test binaries at once (default 3, or DISTLOCK_TEST_JOBS)")
    parser.add_argument("-p", "--package", action="append", default=[],
                        help="only this package's tests (repeatable; default: the workspace)")
    parser.add_argument("--no-doc", action="store_true", help="leave out the doc tests")
    parser.add_argument("rest", nargs="*", help="after --: arguments for every test binary")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target_dir = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    times_path = os.path.join(target_dir, "test-times.json")
    try:
        with open(times_path, encoding="utf-8") as times_file:
            last_times = json.load(times_file)
    except (OSError, ValueError):
        last_times = {}

    os.chdir(root)
    binaries = build(args.package, [])
    jobs = []
    for name, executable, package_dir in binaries:
        env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir)
        jobs.append(Job(name, [executable] + args.rest, package_dir, env))
    if not args.no_doc:
        selection = [arg for package in args.package for arg in ("-p", package)] or ["--workspace"]
        command = ["cargo", "test", "--all-features", "--doc"] + selection
        if args.rest:
            command += ["--"] + args.rest
        jobs.append(Job("doc tests", command, root, dict(os.environ)))
    # The batteries first (one at a time, they are the longest chain), then longest first
    # (unknown ones as 30 s), so the tail of the run is short binaries.
    jobs.sort(key=lambda job: ("battery" not in job.groups, -last_times.get(job.name, 30.0)))

    started = time.monotonic()
    pending, running, done = list(jobs), [], []
    failed = []

    def can_start(job):
        return all(
            sum(1 for other in running if group in other.groups) < GROUP_LIMITS[group]
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
        print(f"{verdict} {job.seconds:7.1f} s  {job.name}  {summary}", flush=True)
        if status != 0:
            failed.append(job)
            print(f"---- output of {job.name} (exit {status}) ----\n{output}---- end of {job.name} ----",
                  flush=True)

    try:
        while pending or running:
            while len(running) < args.jobs:
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
    times.update({job.name: round(job.seconds, 1) for job in done if job.status == 0})
    os.makedirs(target_dir, exist_ok=True)
    with open(times_path, "w", encoding="utf-8") as times_file:
        json.dump(times, times_file, indent=1, sort_keys=True)
    print(f"\n{len(done)} test binaries in {wall:.0f} s ({total:.0f} s one after another), "
          f"{len(failed)} failed", flush=True)
    for job in failed:
        print(f"  failed: {job.name}", flush=True)
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
