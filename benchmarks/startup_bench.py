"""Time to first step per TPU host, the parts this machine can measure: getting the workers' environment and the
first step with the persistent compilation cache missed and hit.

Two ways a host gets worker_env/requirements.lock (config workerEnvironment):

  runtime  the host installs the lock at start (Ray: the runtime_env `uv` field; JobSet: an install in the
           container's command). Measured here the way a host does it, for the cluster's platform (CPython 3.12,
           manylinux_2_31 x86_64) into a fresh target: uv with an empty cache (a new node: every wheel fetched,
           unpacked, installed), then uv again with that cache (a restarted pod on a node that kept it). Bytes
           fetched: the machine's received bytes during the cold install (/proc/net/dev, every interface but
           loopback: other traffic on the machine counts too).
  image    the host pulls the built image (worker_env/Dockerfile). No Docker here: the lock's layer is measured
           as a registry stores it, the installed environment as a gzip tar (BuildKit's default layer
           compression), and its unpack (what containerd does after the download) is timed. An upper bound:
           the Dockerfile installs over the Ray base image, which already holds some locked packages.

Both paths first pull the same base image (rayproject/ray, pinned in worker_env/Dockerfile), which is not measured
here. Time at a link rate = bytes / rate + the local work measured here (uv's warm install; the layer's unpack).

The first step: MaxText's own CPU test model (core/presets.py `tiny`) trained by the JobSet pods' program
(`python -m trainer.jobset_run`, the stack's argv for one v6e 2x2 host with JAX on CPU) twice with one
jax_cache_dir: empty (the compile is missed and written), then filled (hit). Reported as wall seconds from the
process start to MaxText's "completed step: 0" line, on CPU, this machine: a TPU compile of a real model takes
minutes (docs/planner.md), so only the difference the cache makes carries over, not the seconds.

    python benchmarks/startup_bench.py [--lock worker_env/requirements.lock] [--pip] [--timeout 1200]
                                       [--skip-install] [--json benchmarks/startup/results.json]

The table it prints is preview/startup.py's (the README's start-up table, regenerated from the JSON by
`python -m preview.docs_tables --write`); the plan's start-up budget reads the same JSON.

Needs network access to the package index (~740 MB of wheels per cold run) and about 12 GB of free disk in the
temporary directory; everything it writes is deleted at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.12"
PLATFORM_UV = "x86_64-manylinux_2_31"        # libtpu ships manylinux_2_31 wheels only
# pip takes a platform tag literally (no older manylinux tags implied), so every tag a glibc 2.31 host accepts.
PLATFORMS_PIP = [f"manylinux_2_{minor}_x86_64" for minor in range(31, 16, -1)] + ["manylinux2014_x86_64"]
FIRST_STEP = re.compile(r"completed step: 0\b")
# The host the first step is planned for: one v6e 2x2 host (4 chips), faked as 4 CPU devices.
FIRST_STEP_SHAPE = ("v6e", "2x2")


@dataclass
class Step:
    name: str
    seconds: float | None
    cache_bytes: int | None          # uv's cache after the step (unpacked wheels)
    installed_bytes: int | None
    ok: bool
    load: float = 0.0                # the machine's 1-minute load average when the step ended
    detail: str = ""
    fetched_bytes: int | None = None  # received on the machine's interfaces during the step


@dataclass
class Layer:
    compressed_bytes: int
    pack_s: float
    unpack_s: float


@dataclass
class FirstStep:
    cache: str                       # "missed" | "hit"
    seconds: float | None            # process start to MaxText's first completed step
    cache_entries: int
    cache_bytes: int
    ok: bool
    load: float = 0.0
    detail: str = ""


@dataclass
class Results:
    machine: str
    install: list[Step] = field(default_factory=list)
    layer: Layer | None = None
    first_step: list[FirstStep] = field(default_factory=list)


def machine_label() -> str:
    cores = os.cpu_count() or 0
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"CPU, this machine: {cores} cores, {memory:.0f} GiB, Python {platform.python_version()}"


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def received_bytes() -> int:
    """Bytes received on every network interface but loopback since boot (/proc/net/dev)."""
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, counters = line.split(":", 1)
        if name.strip() != "lo":
            total += int(counters.split()[0])
    return total


def find_uv() -> str:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else (shutil.which("uv") or "uv")


def run(command: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> tuple[float, bool, str]:
    start = time.monotonic()
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
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
    # --ignore-requires-python: pip checks Requires-Python against the interpreter it runs on, not
    # --python-version; the lock is resolved for 3.12 already.
    command = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--require-hashes",
               "--ignore-requires-python", "--disable-pip-version-check", "-r", str(lock), "--target", str(target),
               "--python-version", PYTHON_VERSION, "--only-binary=:all:"]
    for platform_tag in PLATFORMS_PIP:
        command += ["--platform", platform_tag]
    return run(command, dict(os.environ), timeout)


def load() -> float:
    return round(os.getloadavg()[0], 1)


def measure_layer(installed: Path, scratch: Path, timeout: float) -> Layer:
    """The installed environment as one gzip layer, and its unpack into an empty directory."""
    archive = scratch / "layer.tar.gz"
    pack_s, ok, detail = run(["tar", "-czf", str(archive), "-C", str(installed), "."], dict(os.environ), timeout)
    if not ok:
        raise RuntimeError(f"packing the layer failed: {detail}")
    unpacked = scratch / "unpacked"
    unpacked.mkdir()
    unpack_s, ok, detail = run(["tar", "-xzf", str(archive), "-C", str(unpacked)], dict(os.environ), timeout)
    if not ok:
        raise RuntimeError(f"unpacking the layer failed: {detail}")
    layer = Layer(archive.stat().st_size, round(pack_s, 1), round(unpack_s, 1))
    archive.unlink()
    shutil.rmtree(unpacked, ignore_errors=True)
    return layer


def measure_install(lock: Path, with_pip: bool, timeout: float, root: Path) -> tuple[list[Step], Layer | None]:
    uv = find_uv()
    steps: list[Step] = []
    layer = None
    cache = root / "uv-cache"
    for name in ("cold", "warm"):
        target = root / f"target-{name}"
        before = received_bytes()
        seconds, ok, detail = uv_install(uv, lock, target, cache, timeout)
        fetched = received_bytes() - before
        steps.append(Step(f"uv install, {name} cache", round(seconds, 1), tree_bytes(cache), tree_bytes(target),
                          ok, load(), detail, fetched))
        if name == "cold" and ok:
            layer = measure_layer(target, root, timeout)
        shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    if with_pip:
        target = root / "target-pip"
        before = received_bytes()
        seconds, ok, detail = pip_install(lock, target, timeout)
        steps.append(Step("pip install, no cache", round(seconds, 1), None, tree_bytes(target), ok, load(), detail,
                          received_bytes() - before))
        shutil.rmtree(target, ignore_errors=True)
    return steps, layer


def first_step_argv(output: Path, cache: Path) -> tuple[list[str], int]:
    """The stack's MaxText argv for the tiny model on one CPU-faked host, with the cache at `cache`."""
    sys.path.insert(0, str(REPO))
    from core.maxtext_args import RunSettings, pre_train_argv
    from core.planner import PlanRequest, plan
    from trainer.maxtext_runtime import base_config_path

    generation, topology = FIRST_STEP_SHAPE
    chosen = plan(PlanRequest(model="tiny", generation=generation, topology=topology, slices=1))
    run_settings = RunSettings(run_name="startup-bench", base_output_directory=str(output), steps=2,
                               checkpoint_period=2, hardware="cpu")
    argv = pre_train_argv(chosen, run_settings, base_config_path())
    # The local mode keeps the cache off (core/maxtext_args.py says why: processes racing on one gloo context);
    # one process has no such race. No jax.distributed either: one process is the whole job.
    argv = [a for a in argv if not a.startswith("jax_cache_dir=")]
    return [*argv[1:], f"jax_cache_dir={cache}", "skip_jax_distributed_system=true"], chosen.shape.devices_per_host


def time_first_step(output: Path, cache: Path, label: str, timeout: float) -> FirstStep:
    argv, devices = first_step_argv(output, cache)
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    start = time.monotonic()
    seconds, tail = None, ""
    proc = subprocess.Popen([sys.executable, "-m", "trainer.jobset_run", *argv], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = line.strip() or tail
            if seconds is None and FIRST_STEP.search(line):
                seconds = round(time.monotonic() - start, 1)
            if time.monotonic() - start > timeout:
                proc.kill()
                tail = f"timed out after {timeout:.0f} s"
                break
    finally:
        proc.wait()
    ok = seconds is not None and proc.returncode == 0
    entries = list(cache.iterdir()) if cache.is_dir() else []
    return FirstStep(label, seconds, len(entries), tree_bytes(cache), ok, load(), "" if ok else tail[-200:])


def measure_first_step(root: Path, timeout: float) -> list[FirstStep]:
    cache = root / "jax-cache"
    return [time_first_step(root / f"run-{label}", cache, label, timeout) for label in ("missed", "hit")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=REPO / "worker_env" / "requirements.lock")
    parser.add_argument("--pip", action="store_true", help="also time pip without a cache (slow)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per step before giving up")
    parser.add_argument("--skip-install", action="store_true", help="only the first step (no network needed)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = Results(machine_label())
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        root = Path(scratch)
        if not args.skip_install:
            results.install, results.layer = measure_install(args.lock, args.pip, args.timeout, root)
        results.first_step = measure_first_step(root, args.timeout)
    sys.path.insert(0, str(REPO))
    from preview.startup import host_table
    print(host_table(asdict(results)))
    if args.json:
        args.json.write_text(json.dumps(asdict(results), indent=2) + "\n")
    ok = all(s.ok for s in results.install) and all(s.ok for s in results.first_step)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
