"""A complete verdict in minutes: XLA's memory-only compile of the step (its HBM verdict) and a compile of the
step's attention kernels alone (their scoped-VMEM verdict), instead of the full compile's tens of minutes.

Why two compiles: a memory-only compile (aot/runner.py run_compile memory_only) stops once XLA's HLO passes have
assigned memory, which decides HBM; a kernel's scoped VMEM (XLA's `E1001 CompileTimeScopedVmemOom`) is decided
later, in code generation, when Mosaic lowers the Pallas kernels. On TPU those kernels are MaxText's splash
attention (forward, and the dkv and dq backward kernels) for a dense model such as Llama; measured on the prod
step in one layer without the pods' flags: memory-only "fits", the full compile refused
`splash_mha_dkv_segmented_no_residuals` (35.96M of 32.00M) after 9m53s, and the kernels alone refused the same
kernel with the same figures in 40 s (docs/planner.md "Time per verdict"). The kernel compile
(aot/kernel_compile.py) starts from the step's own argv, environment and LIBTPU_INIT_ARGS, through the same
guarded subprocess (run_compile: parent-death signal, its own process group, the timeout).

What it does not cover (named in the docs, the reason a full compile stays available): Pallas kernels other than
attention that a configuration may use (MoE's megablox/ragged kernels, paged or ragged attention, quantized
matmul kernels), which the project's presets (dense llama3 and qwen3 models, core/presets.py) do not run in
training. A kernel compile that fails for a reason that is
not XLA's verdict (a configuration the kernel program cannot build) falls back to the full compile, and says so.
"""
from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path
from typing import TextIO

from aot.runner import (AOT_MODULE_ENV, DEFAULT_TIMEOUT_S, CompileResult, CompileTarget, compile_front_end, decided,
                        run_compile)
from core.compile_verdicts import MODE_FULL, MODE_MEMORY_KERNELS, STEP_EVAL

KERNEL_COMPILE = Path(__file__).with_name("kernel_compile.py")


def kernel_command(target: CompileTarget | None = None, compiler: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The command before the argv that compiles the target's kernels alone (`compiler`: a stand-in), with
    `--eval` for an eval step (its forward kernels at the eval batch). Where the test suite points the compile at
    a module that does not exist (AOT_MODULE_ENV, tests/conftest.py), so does the kernel compile."""
    module = os.environ.get(AOT_MODULE_ENV)
    python = compile_front_end().executable     # train_compile's interpreter (aot/compile_python.py): its jax
    command = compiler or ((python, "-m", module) if module else (python, str(KERNEL_COMPILE)))
    return (*command, "--eval") if target is not None and target.step == STEP_EVAL else command


def run_kernel_check(target: CompileTarget, *, timeout: float = DEFAULT_TIMEOUT_S, progress: TextIO | None = None,
                     compiler: tuple[str, ...] | None = None, tick_s: float | None = None,
                     keep_dir: Path | None = None) -> CompileResult:
    """XLA's verdict on the step's attention kernels alone (aot/kernel_compile.py), run as run_compile runs
    train_compile. `compiler`: a stand-in for tests."""
    return run_compile(target, timeout=timeout, progress=progress, compiler=kernel_command(target, compiler),
                       tick_s=tick_s, keep_dir=keep_dir)


def kernel_verdict(result: CompileResult) -> str:
    """The kernels' verdict in one phrase: "fits", XLA's error code and line, or why there is none."""
    if result.timed_out_after_s is not None:
        return f"undecided after {result.timed_out_after_s:.0f} s"
    if result.compiled:
        return "fits"
    return f"{result.error_code}: {result.reason}" if result.error_code else f"no verdict: {result.reason}"


def run_verdict(target: CompileTarget, *, full: bool = False, timeout: float = DEFAULT_TIMEOUT_S,
                progress: TextIO | None = None, compiler: tuple[str, ...] | None = None,
                kernel_compiler: tuple[str, ...] | None = None, tick_s: float | None = None) -> CompileResult:
    """XLA's whole verdict on `target`: with `full`, the full compile; else the attention kernels alone first
    (seconds; their refusal is the step's), then the memory-only compile (HBM). The result's `mode` says which
    (core/compile_verdicts.py MODE_*), its `kernels` the kernels' own verdict. `compiler`, `kernel_compiler`:
    stand-ins for train_compile and aot/kernel_compile.py (tests)."""
    def whole() -> CompileResult:
        return run_compile(target, timeout=timeout, progress=progress, compiler=compiler, tick_s=tick_s)

    if full:
        return whole()
    say = (lambda line: print(line, file=progress, flush=True)) if progress is not None else (lambda line: None)
    say("compile: 1/2 the attention kernels alone (scoped VMEM)")
    kernels = run_kernel_check(target, timeout=timeout, progress=progress, compiler=kernel_compiler, tick_s=tick_s)
    phrase = kernel_verdict(kernels)
    if not kernels.compiled and not decided(kernels) and kernels.timed_out_after_s is None:
        # Not XLA's answer (the kernel program could not be built for this configuration): decide in full.
        say(textwrap.shorten(f"compile: the kernels alone gave no verdict, compiling in full ({kernels.reason})",
                             100, placeholder="...)"))
        return dataclasses.replace(whole(), kernels=phrase)
    if not kernels.compiled:      # XLA refused a kernel (E1001 ...), or it ran out of time: the step's verdict
        reason = f"the attention kernels alone: {kernels.reason}"
        return dataclasses.replace(kernels, reason=reason, peak_bytes_per_device=None, hbm_bytes=None,
                                   breakdown={}, mode=MODE_MEMORY_KERNELS, kernels=phrase)
    say(f"compile: 2/2 the step, memory-only (HBM); the kernels fit ({kernels.seconds:.0f} s)")
    step = run_compile(target, timeout=timeout, progress=progress, compiler=compiler, tick_s=tick_s,
                       memory_only=True)
    return dataclasses.replace(step, seconds=step.seconds + kernels.seconds, mode=MODE_MEMORY_KERNELS,
                               kernels=phrase)


def mode_of(full: bool) -> str:
    return MODE_FULL if full else MODE_MEMORY_KERNELS
