"""Time to first step, the parts this machine can measure: installing the workers' lock at start.

With workerEnvironment=runtime every TPU host installs worker_env/requirements.lock before it trains (Ray: the
runtime_env `uv` field; JobSet: an install in the container's command). This script installs the lock the way
a host does, for the cluster's platform (CPython 3.12, manylinux_2_31 x86_64, where this machine runs 3.11), into
a fresh target directory and times:

  cold    uv with an empty cache (what a new node does: every wheel downloaded, unpacked, installed)
  warm    uv again into a fresh target with the cache the cold run filled (what a restarted pod does when the
          cache survives the restart, as the stack's node-level uv cache lets it)
  pip     (--pip) pip with --no-cache-dir, as the JobSet pods did before they used uv

and prints a table with the cache's size (unpacked wheels), the installed size, the machine's load average (this
machine is shared: the times move with it) and, for the image path, how
long pulling an image layer of the installed size takes at a few link rates (no Docker here: the pull itself is
not measured). Compile and the first step are not measured here (no TPU; the ahead-of-time compile figures are
in docs/planner.md).

    python benchmarks/startup_bench.py [--lock worker_env/requirements.lock] [--pip] [--timeout 1200]
                                       [--json out.json]

Needs network access to the package index (the lock's wheels, ~740 MB, are downloaded once per cold run) and
about 8 GB of free disk in the temporary directory; everything it writes is deleted at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.12"
PLATFORM_UV = "x86_64-manylinux_2_31"        # libtpu ships manylinux_2_31 wheels only
# pip takes a platform tag literally (no older manylinux tags implied), so every tag a glibc 2.31 host accepts.
PLATFORMS_PIP = [f"manylinux_2_{minor}_x86_64" for minor in range(31, 16, -1)] + ["manylinux2014_x86_64"]
LINK_RATES = (("1 Gb/s", 125e6), ("10 Gb/s", 1250e6), ("100 Gb/s", 12500e6))


@dataclass
class Step:
    name: str
    seconds: float | None
    cache_bytes: int | None          # uv's cache after the step (unpacked wheels)
    installed_bytes: int | None
    ok: bool
    load: float = 0.0                # the machine's 1-minute load average when the step ended
    detail: str = ""


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def find_uv() -> str:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else (shutil.which("uv") or "uv")


def run(command: list[str], env: dict[str, str], timeout: float) -> tuple[float, bool, str]:
    start = time.monotonic()
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.monotonic() - start, False, f"timed out after {timeout:.0f} s"
    seconds = time.monotonic() - start
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] if proc.returncode else []
    return seconds, proc.returncode == 0, " ".join(tail)


def uv_install(uv: str, lock: Path, target: Path, cache: Path, timeout: float) -> tuple[float, bool, str]:
    env = {**os.environ, "UV_CACHE_DIR": str(cache), "UV_NO_PROGRESS": "1"}
    # The hosts' install: exactly the lock (--no-deps), every file checked against its hash. Copied from the
    # cache, as on a node, where the cache (a hostPath) and the environment (the container's filesystem) are
    # different mounts and uv cannot hard-link between them.
    command = [uv, "pip", "install", "--no-deps", "--require-hashes", "-r", str(lock), "--target", str(target),
               "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM_UV, "--link-mode", "copy"]
    return run(command, env, timeout)


def pip_install(lock: Path, target: Path, timeout: float) -> tuple[float, bool, str]:
    # --ignore-requires-python: pip checks Requires-Python against the interpreter it runs on (3.11 here), not
    # --python-version; the lock is resolved for 3.12 already.
    command = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--require-hashes",
               "--ignore-requires-python", "--disable-pip-version-check", "-r", str(lock), "--target", str(target),
               "--python-version", PYTHON_VERSION, "--only-binary=:all:"]
    for platform in PLATFORMS_PIP:
        command += ["--platform", platform]
    return run(command, dict(os.environ), timeout)


def measure(lock: Path, with_pip: bool, timeout: float) -> list[Step]:
    uv = find_uv()
    steps = []
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        root = Path(scratch)
        cache = root / "uv-cache"
        for name in ("cold", "warm"):
            target = root / f"target-{name}"
            seconds, ok, detail = uv_install(uv, lock, target, cache, timeout)
            steps.append(Step(f"uv install, {name} cache", round(seconds, 1), tree_bytes(cache), tree_bytes(target),
                              ok, round(os.getloadavg()[0], 1), detail))
            shutil.rmtree(target, ignore_errors=True)
        if with_pip:
            target = root / "target-pip"
            seconds, ok, detail = pip_install(lock, target, timeout)
            steps.append(Step("pip install, no cache", round(seconds, 1), None, tree_bytes(target), ok,
                              round(os.getloadavg()[0], 1), detail))
    return steps


def gb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f} GB"


def print_table(steps: list[Step]) -> None:
    print(f"{'step':<26} {'seconds':>8} {'uv cache':>9} {'installed':>10} {'load':>5}  result")
    for step in steps:
        seconds = "-" if step.seconds is None else f"{step.seconds:.1f}"
        result = "ok" if step.ok else f"FAILED {step.detail}"
        print(f"{step.name:<26} {seconds:>8} {gb(step.cache_bytes):>9} {gb(step.installed_bytes):>10} "
              f"{step.load:>5.1f}  {result}")
    installed = next((s.installed_bytes for s in steps if s.ok and s.installed_bytes), None)
    if installed:
        pulls = ", ".join(f"{label} {installed / rate:.0f} s" for label, rate in LINK_RATES)
        print(f"image path: one layer of ~{gb(installed)} per node to pull (not measured here): {pulls}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=REPO / "worker_env" / "requirements.lock")
    parser.add_argument("--pip", action="store_true", help="also time pip without a cache (slow)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per install before giving up")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    steps = measure(args.lock, args.pip, args.timeout)
    print_table(steps)
    if args.json:
        args.json.write_text(json.dumps([asdict(step) for step in steps], indent=2))
    return 0 if all(step.ok for step in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
