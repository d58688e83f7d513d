"""The pre-flight compile of a stack or of a model without one (the targets), and its text report; running one
compile is aot/runner.py's (re-exported here: the callers' names did not move).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Mapping, TextIO

from aot.runner import *  # noqa: F401,F403
from aot.runner import (GIB, PROJECT_ROOT, CompileResult, CompileSetupError, CompileTarget, _clock, installed,
                        loaded_eval_batch, ray_target)
from core.compile_verdicts import STEP_TRAIN
from core.tpu_env import libtpu_init_args

CALIBRATION_PATH = PROJECT_ROOT / "core" / "xla_calibration.json"

def stack_target(config, manifests: Iterable[Mapping[str, Any]] = (), root: Path = PROJECT_ROOT) -> CompileTarget:
    """The training argv of the stack's backend (config: infra.config.StackConfig; workloads/compile_check.py, what
    the config build compiles), with the LIBTPU_INIT_ARGS of its TPU pods as read from the rendered manifests."""
    from workloads.compile_check import stack_target as launched

    return dataclasses.replace(launched(config, root), libtpu_init_args=pod_libtpu_init_args(manifests))


def pod_libtpu_init_args(manifests: Iterable[Mapping[str, Any]]) -> str:
    """LIBTPU_INIT_ARGS of the containers that request TPU chips (google.com/tpu) in the rendered manifests;
    the Pathways MaxText client requests none and its workers carry the TPU runtime's flags."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            resources = node.get("resources")
            limits = (resources.get("limits") or {}) if isinstance(resources, dict) else {}
            if "google.com/tpu" in limits and isinstance(node.get("env"), list):
                for env in node["env"]:
                    if isinstance(env, dict) and env.get("name") == "LIBTPU_INIT_ARGS" and "value" in env:
                        found.append(str(env["value"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for manifest in manifests:
        walk(manifest)
    distinct = sorted(set(found))
    if len(distinct) > 1:
        raise CompileSetupError(f"TPU pods disagree on LIBTPU_INIT_ARGS: {distinct}")
    return distinct[0] if distinct else ""


def failed_setup(config, reason: str) -> CompileResult:
    """The result when the compile could not even start (no MaxText or libtpu here, no topology for the shape)."""
    shape = config.tpu.shape
    return CompileResult(compiled=False, peak_bytes_per_device=None, hbm_bytes=None,
                         topology=f"{shape.generation.name} {shape.topology}", num_slices=config.tpu.slices,
                         seconds=0.0, reason=f"could not set up the compile: {reason}", libtpu=installed("libtpu"))


def render(result: CompileResult, out: TextIO) -> None:
    """The text report: peak against HBM and the time, or the compiler's reason."""
    def gib(value: int | None) -> str:
        return "?" if value is None else f"{value / GIB:.2f} GiB"

    # The eval step MaxText compiles at start (aot/eval_compile.py), named with its batch.
    what = "" if result.step == STEP_TRAIN else f", eval step ({_eval_batch(result)} per device)"
    if result.cached:
        out.write(f"\nPre-flight compile: {result.topology} x {result.num_slices} slice(s){what}, not compiled again: "
                  f"XLA's verdict (jax {result.version('jax')}, libtpu {result.libtpu}) from {result.source}\n")
    else:
        out.write(f"\nPre-flight compile: {result.topology} x {result.num_slices} slice(s){what}, "
                  f"{_clock(result.seconds)} (MaxText {result.version('maxtext')}, jax {result.version('jax')}, "
                  f"libtpu {result.libtpu}; argv from "
                  f"{result.source})\n")
    for key, why in result.dropped.items():
        out.write(f"  left out for the compile: {key} ({why})\n")
    if result.compiled:
        share = (f" ({result.peak_bytes_per_device / result.hbm_bytes:.0%})"
                 if result.peak_bytes_per_device and result.hbm_bytes else "")
        out.write(f"  FITS: XLA peak {gib(result.peak_bytes_per_device)} per device of {gib(result.hbm_bytes)} HBM"
                  f"{share}")
        if result.breakdown:
            out.write(" = " + " + ".join(f"{k} {v / GIB:.2f}" for k, v in result.breakdown.items()))
        out.write("\n")
        if result.before_remat_bytes:
            out.write(f"  XLA recomputed tensors to get there: the step needed {gib(result.before_remat_bytes)} "
                      "before (slower steps; little headroom)\n")
    elif result.timed_out_after_s is not None:
        out.write(f"  UNDECIDED after {result.timed_out_after_s:.0f} s: the compile ran out of time; kept, so the "
                  "next preview does not start it again\n")
    else:
        verb = "DOES NOT FIT" if result.required_bytes else "DOES NOT COMPILE"
        out.write(f"  {verb}: {result.reason}\n")
        if result.log:
            out.write(f"  compiler output: {result.log}\n")
    if result.estimate_bytes:
        out.write(f"  planner estimate: {gib(result.estimate_bytes)} per device\n")


def _eval_batch(result: CompileResult) -> str:
    """The eval step's per-device batch its argv loads (aot/runner.py loaded_eval_batch), "?" when unknown."""
    batch = loaded_eval_batch(result.keys)
    return "?" if batch is None else f"{batch:g}"


# Run settings of a compile without a stack: they do not change the compiled step (the output directory and run
# name are replaced anyway; steps only shape the learning-rate schedule, a traced input of the same shape).
RUN_PLACEHOLDER = ("--run-name", "preflight", "--base-output-directory", "gs://preflight/maxtext", "--steps", "1000")


def request_target(entrypoint_args: list[str], root: Path = PROJECT_ROOT) -> CompileTarget:
    """A model on slices without a stack: planned and built by the Ray entrypoint (`--no-memory-check`: the
    compile, not the estimate, decides), with a Ray worker's LIBTPU_INIT_ARGS without DCN NICs
    (core/tpu_env.py; the megascale interface flag only picks network interfaces at run time)."""
    target = ray_target([*entrypoint_args, "--no-memory-check"], "", root)
    return dataclasses.replace(target, libtpu_init_args=libtpu_init_args(target.model, target.generation,
                                                                         target.slices, 0))


# One small sharded program per generation: libtpu's log then states the per-device HBM limit XLA compiles against
# ("program HBM usage: P / LIMIT") and what the runtime reserves ("reserved R"), which core/memory.py tabulates.
