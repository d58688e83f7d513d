"""The start-up budget of a run's TPU hosts, from a cold node to the first step, from measured figures.

Every slice pool scales from zero, so every run start, grow and Spot replacement begins on a new node: its VMs come
up (core/slice_wait.py SLICE_START_S, a guess), the host gets the workers' environment (workerEnvironment: the
built image's pull or the lock's install) and the first step compiles unless the persistent compilation cache
(jax_cache_dir, next to the checkpoints) holds the program.

The environment and first-step figures are benchmarks/startup_bench.py's, kept in benchmarks/startup/results.json:
measured on CPU, on the development machine, and labelled so wherever they are shown. The link rate a host gets
from Artifact Registry or the package index is an ASSUMPTION (PLANNED_LINK); the README's table shows others.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from core.slice_wait import SLICE_START_S
from infra.config import StackConfig
from workloads.backends import backend_for

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "startup" / "results.json"
LINK_RATES = (("1 Gb/s", 125e6), ("10 Gb/s", 1250e6), ("100 Gb/s", 12500e6))
PLANNED_LINK = LINK_RATES[1]        # assumed: what one host gets from the registry or the index


@functools.lru_cache(maxsize=None)
def load_results(path: Path = RESULTS) -> dict[str, Any]:
    return json.loads(path.read_text())


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f} GB"


def _named(results: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    return next((s for s in results["install"] if s["name"].startswith(prefix) and s["ok"]), None)


def runtime_host(results: dict[str, Any]) -> tuple[int, float] | None:
    """(bytes fetched, local seconds) of one host's install: the cold install's download, the warm install's
    work (a lower bound: unpacking into uv's cache is not counted)."""
    cold, warm = _named(results, "uv install, cold"), _named(results, "uv install, warm")
    if cold is None or warm is None or not cold["fetched_bytes"]:
        return None
    return cold["fetched_bytes"], warm["seconds"]


def image_host(results: dict[str, Any]) -> tuple[int, float] | None:
    """(bytes pulled, local seconds) of the lock's image layer: its gzip size and its unpack."""
    layer = results.get("layer")
    return None if layer is None else (layer["compressed_bytes"], layer["unpack_s"])


def seconds_at(fetched: int, local_s: float, rate: float) -> float:
    return fetched / rate + local_s


def host_table(results: dict[str, Any]) -> str:
    """Per TPU host, each way of getting the environment and the first step (README's start-up table)."""
    rates = " / ".join(label for label, _ in LINK_RATES)
    lines = [f"| per TPU host ({results['machine']}) | fetched at start | measured here (1-minute load) | at {rates} |",
             "| --- | --- | --- | --- |"]
    runtime, image = runtime_host(results), image_host(results)
    cold, warm = _named(results, "uv install, cold"), _named(results, "uv install, warm")
    if runtime and cold and warm:
        at = " / ".join(f"{seconds_at(*runtime, rate):.0f} s" for _, rate in LINK_RATES)
        lines.append(f"| `runtime`: install the lock with uv | {_gb(runtime[0])} of wheels from the package index | "
                     f"cold {cold['seconds']:.0f} s, warm cache {warm['seconds']:.0f} s (load {cold['load']}, "
                     f"{warm['load']}) | {at} + unpacking |")
    if image:
        at = " / ".join(f"{seconds_at(*image, rate):.0f} s" for _, rate in LINK_RATES)
        lines.append(f"| `image`: pull the lock's layer | at most {_gb(image[0])} (gzip) from Artifact Registry | "
                     f"unpack {image[1]:.0f} s | {at} |")
    lines.append("| both: the Ray base image | not measured here (no Docker) | - | - |")
    for step in results["first_step"]:
        shown = f"{step['seconds']:.1f} s (load {step['load']})" if step["ok"] else "failed"
        lines.append(f"| first step, compilation cache {step['cache']} (tiny model) | - | {shown} | - |")
    return "\n".join(lines)


def _first_steps(results: dict[str, Any]) -> dict[str, float]:
    return {s["cache"]: s["seconds"] for s in results["first_step"] if s["ok"]}


def environment_s(config: StackConfig, results: dict[str, Any]) -> float | None:
    """One host's environment at the planned link rate, for the stack's workerEnvironment; None where the stack
    does not install the lock (Pathways runs its own images) or a figure is missing."""
    if not backend_for(config).runs_worker_environment:
        return None
    host = image_host(results) if config.workload.worker_environment == "image" else runtime_host(results)
    return None if host is None else seconds_at(*host, PLANNED_LINK[1])


def budget_lines(config: StackConfig, results: dict[str, Any] | None = None) -> list[str]:
    """The plan's start-up budget for the stack: what one cold host does before its first step, and what every
    start fetches across the run's hosts."""
    results = results or load_results()
    hosts = config.tpu.total_hosts
    link = f"{PLANNED_LINK[0]} per host assumed"
    lines = [f"per host from a cold node: the slice's VMs ~{SLICE_START_S / 60:.0f} min (a guess, "
             "core/slice_wait.py), then the environment, then the first compile"]
    if not backend_for(config).runs_worker_environment:
        backend = backend_for(config)
        images = ", ".join(image.split("@")[0] for image in backend.images(config))
        lines.append(f"environment: the {backend.name} images ({images}); no lock installed")
    else:
        image, runtime = image_host(results), runtime_host(results)
        if config.workload.worker_environment == "image" and image:
            lines.append(f"environment: pull the built image: its lock layer at most {_gb(image[0])} + unpack "
                         f"{image[1]:.0f} s = {seconds_at(*image, PLANNED_LINK[1]):.0f} s at {link}, plus the Ray "
                         f"base image; {hosts} host(s) pull {_gb(hosts * image[0])} per start from Artifact Registry")
            lines.append("streaming: not assumed; the figure above is a whole pull. The pools stream the image (GKE "
                         "Image streaming, the node account holding roles/serviceusage.serviceUsageConsumer), so a "
                         "container may start before all of it arrives; that gain was not measured here")
        if runtime:
            chosen = config.workload.worker_environment == "runtime"
            lines.append(f"{'environment' if chosen else 'with workerEnvironment: runtime instead'}: install "
                         f"{_gb(runtime[0])} of wheels + {runtime[1]:.0f} s of install work = "
                         f"{seconds_at(*runtime, PLANNED_LINK[1]):.0f} s at {link} (a lower bound); {hosts} host(s) "
                         f"fetch {_gb(hosts * runtime[0])} per start from the package index, which every start "
                         "then needs")
    first = _first_steps(results)
    if "missed" in first and "hit" in first:
        lines.append(f"first step: compiled on a run's first start, then read from the compilation cache "
                     f"(jax_cache_dir next to the checkpoints): {first['missed']:.0f} s missed, {first['hit']:.0f} s "
                     f"hit with the tiny model ({results['machine']}); a real model's TPU compile takes minutes "
                     "(docs/planner.md)")
    return lines


def budget_table(stacks: list[tuple[str, StackConfig]], results: dict[str, Any] | None = None) -> str:
    """Per committed stack: hosts, the environment per host at the planned rate, what a start fetches, and the
    time from a cold node to the first compile (README)."""
    results = results or load_results()
    lines = [f"| stack | hosts | `workerEnvironment` | environment per host ({PLANNED_LINK[0]}) | fetched per start "
             "| cold node to first compile |", "| --- | --- | --- | --- | --- | --- |"]
    for stack, config in stacks:
        hosts = config.tpu.total_hosts
        env_s = environment_s(config, results)
        if env_s is None:
            lines.append(f"| `{stack}` | {hosts} | - (the backend's own images) | - | - | VMs "
                         f"~{SLICE_START_S / 60:.0f} min + image pulls |")
            continue
        host = image_host(results) if config.workload.worker_environment == "image" else runtime_host(results)
        assert host is not None
        lines.append(f"| `{stack}` | {hosts} | {config.workload.worker_environment} | {env_s:.0f} s | "
                     f"{_gb(hosts * host[0])} | ~{(SLICE_START_S + env_s) / 60:.1f} min + the base image |")
    return "\n".join(lines)
