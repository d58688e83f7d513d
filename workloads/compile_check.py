"""The Pulumi program's compiler, handed to its config build (infra/config/compile_check.py): the run's exact
training step at one slice count, compiled ahead of time with MaxText's train_compile and the libtpu installed
where `pulumi preview`/`pulumi up` runs (aot/runner.py), from the backend's own launch argv and its TPU pods'
LIBTPU_INIT_ARGS (workloads/backend.py TrainingLaunch).

Here, not in infra/config: the argv is the backend's (workloads/) and the compiler is aot/'s, neither of which the
config layer may import; __main__.py passes `compile_step` to `build`, which calls it before anything registers.

What the user sees while it compiles (the program's stderr, which Pulumi shows): one line saying what XLA
decides, then a line every 30 s (aot/runner.py's ticker). Ctrl-C or SIGTERM to the program stops the compile and
what it started (run_compile kills its process group; Pulumi runs the program in its main thread, where the
runner can take SIGTERM).
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Callable, TextIO

from aot.runner import (DEFAULT_TIMEOUT_S, PROJECT_ROOT, CompileSetupError, CompileTarget, decided, missing_compiler,
                        ray_target, run_compile, verdict_of)
from core.compile_verdicts import NotDecided, Verdict
from infra.config import StackConfig
from workloads.backends import backend_for


def stack_target(config: StackConfig, root: Path = PROJECT_ROOT) -> CompileTarget:
    """What the stack's backend launches on its full worker group, as a compile target."""
    plan, shape = config.workload.plan, config.tpu.shape
    launch = backend_for(config).training_launch(config)
    if launch.argv_built_on_workers:
        return ray_target(list(launch.argv), launch.libtpu_init_args, root)
    return CompileTarget(argv=launch.argv, source=launch.source, generation=shape.generation,
                         topology=shape.topology, devices_per_slice=shape.devices, slices=plan.slices,
                         plan=plan.describe(), model=plan.model.name, libtpu_init_args=launch.libtpu_init_args,
                         estimate_bytes=plan.memory.total)


def compile_step(config: StackConfig, slices: int, *, progress: TextIO | None = None,
                 compiler: tuple[str, ...] | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 tick_s: float | None = None) -> Verdict:
    """XLA's verdict on the run's step at `slices` slices (core/compile_verdicts.CompileStep). Raises NotDecided
    with one line when there is no verdict: no MaxText or libtpu here, a compile that cannot be set up, or one that
    did not finish. `compiler`, `tick_s`: for tests (a stand-in for train_compile, a faster ticker)."""
    missing = missing_compiler()
    if missing:
        raise NotDecided(missing)
    out = progress or sys.stderr
    resized = config.workload.plan.at_slices(slices)
    print(textwrap.shorten(
        f"compile: XLA decides {slices} x {resized.shape.pod_type} at perDeviceBatchSize="
        f"{resized.per_device_batch_size:g} before anything is created (compileCheck="
        f"{config.workload.compile_check})", 100), file=out, flush=True)
    try:
        target = stack_target(config).at_slices(slices, plan=resized.describe(),
                                                estimate_bytes=resized.memory.total)
        result = run_compile(target, timeout=timeout, progress=out, compiler=compiler, tick_s=tick_s)
    except CompileSetupError as error:
        raise NotDecided(textwrap.shorten(f"the compile could not be set up: {error}", 90)) from None
    if not decided(result):
        raise NotDecided(textwrap.shorten(f"no verdict from the compile: {result.reason}", 90))
    return verdict_of(result, resized)


# What __main__.py hands its config build. The offline plan sets it to None for the program it runs under mocks
# (preview/harness.py: `python -m preview` compiles on its own, after the plan) or to a stand-in (the tests).
for_program: Callable[[StackConfig, int], Verdict] | None = compile_step
