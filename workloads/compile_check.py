"""The Pulumi program's compiler, handed to its config build (infra/config/compile_check.py): the complete key of
the run's exact training step at one slice count (core/compile_verdicts.py CompileKey) and its ahead-of-time
compile with MaxText's train_compile and the workers' pinned libtpu (aot/workers_libtpu.py; the local one, said in
the plan, when it is not fetched), from the backend's own launch argv and its TPU pods' LIBTPU_INIT_ARGS
(workloads/backend.py TrainingLaunch). A run with an eval split has its eval step compiled too, at each eval
batch it runs (eval_target; aot/eval_compile.py builds it as MaxText's train.py does at start), under a key of its
own (CompileKey.step).

Why an eval step whose shapes are the train step's is still compiled: it is another program (no gradient, no
optimizer update, the state not donated: maxtext_utils.get_functional_eval_with_signature), so XLA's verdict on
the train step does not imply it. Its HBM is below the train step's in every estimate (no gradients, nothing kept
for a backward pass, core/memory.py), but the donation differs (the train step may reuse the state's buffers for
its output, the eval step may not reuse them at all) and its forward attention kernel is another Pallas kernel
(splash attention without residuals), so neither verdict is derived from the other.

How XLA decides (aot/kernel_check.py run_verdict): by default the step's attention kernels alone (scoped VMEM,
seconds) and the step memory-only (HBM, minutes), which gave the full compile's verdict on every refusal class
measured (docs/planner.md "Time per verdict"); with FULL_ENV=1 in the program's environment, the full compile
(tens of minutes on 2 cores), whose verdict also stands for the faster mode's (core/compile_verdicts.py lookup).

Here, not in infra/config: the argv is the backend's (workloads/) and the compiler is aot/'s, neither of which the
config layer may import; __main__.py passes `compile_step` to `build`, which calls it before anything registers.

What the user sees while it compiles (the program's stderr, which Pulumi shows): one line saying what XLA
decides, one with about how long it takes here and how to skip it, then a line every 30 s (aot/runner.py's
ticker). Ctrl-C or SIGTERM to the program stops the compile and what it started (run_compile kills its process
group; Pulumi runs the program in its main thread, where the runner can take SIGTERM); SIGKILL too, through the
compile's guard and its parent-death signal (aot/guard.py).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import textwrap
from pathlib import Path
from typing import Callable, TextIO

from aot.kernel_check import mode_of, run_verdict
from aot.runner import (DEFAULT_TIMEOUT_S, PROJECT_ROOT, CompileSetupError, CompileTarget, compile_key,
                        expected_time, kept, loaded_eval_batch, missing_compiler, ray_target, verdict_of)
from core.compile_verdicts import STEP_EVAL, CompileKey, NotDecided, Verdict
from infra.config import StackConfig
from workloads.backends import backend_for

# The program compiles in full (train_compile to its end) instead of memory-only + the kernels alone.
FULL_ENV = "TPU_MULTISLICE_FULL_COMPILE"


def full_from_env() -> bool:
    return os.environ.get(FULL_ENV, "") not in ("", "0")


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


class ProgramCompiler:
    """The program's compiler (core/compile_verdicts.Compiler): the complete key of the run's step at a slice count
    (and at another batch, for the nearest batch XLA compiled) and XLA's verdict on it. The backend's launch argv
    is built once per config (the Ray backend's comes from a subprocess, trainer.entrypoint --print-argv) and
    resized, so a look-up costs no compile. `full`: the full compile (default: FULL_ENV, else memory-only + the
    kernels alone). `compiler`, `eval_compiler`, `kernel_compiler`, `tick_s`: for tests (stand-ins for
    train_compile, aot/eval_compile.py and aot/kernel_compile.py, a faster ticker)."""

    def __init__(self, *, progress: TextIO | None = None, compiler: tuple[str, ...] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, tick_s: float | None = None,
                 launch: Callable[[StackConfig], CompileTarget] | None = None, full: bool | None = None,
                 kernel_compiler: tuple[str, ...] | None = None, eval_compiler: tuple[str, ...] | None = None):
        self.progress, self.compiler, self.timeout, self.tick_s = progress, compiler, timeout, tick_s
        self.full = full_from_env() if full is None else full
        self.kernel_compiler, self.eval_compiler = kernel_compiler, eval_compiler
        # The full group's launch (default stack_target; the offline plan's reads the pods' LIBTPU_INIT_ARGS from
        # its rendered manifests, preview/compile/runner.py stack_target).
        self.launch = launch or stack_target
        self._launched: dict[int, tuple[StackConfig, CompileTarget]] = {}

    def target(self, config: StackConfig, slices: int, per_device_batch_size: float | None = None,
               eval_batch: float | None = None) -> CompileTarget:
        """The compile target of the run's step at `slices` (and `per_device_batch_size`, default the run's); with
        `eval_batch`, of its eval step at that per-device eval batch (eval_target)."""
        missing = missing_compiler()
        if missing:
            raise NotDecided(missing)
        plan = config.workload.plan
        try:
            if id(config) not in self._launched:
                self._launched[id(config)] = (config, self.launch(config))
            full = self._launched[id(config)][1]
            resized = plan.at_slices(slices)
            target = full.at_slices(slices, plan=resized.describe(), estimate_bytes=resized.memory.total)
            if per_device_batch_size is not None and per_device_batch_size != plan.per_device_batch_size:
                other = dataclasses.replace(plan, per_device_batch_size=per_device_batch_size).at_slices(slices)
                changed = {key: value for key, value in other.overrides().items()
                           if resized.overrides().get(key) != value}
                target, resized = target.with_keys(changed, plan=other.describe(),
                                                   estimate_bytes=other.memory.total), other
            return target if eval_batch is None else eval_target(target, resized, eval_batch)
        except CompileSetupError as error:
            raise NotDecided(textwrap.shorten(f"the compile could not be set up: {error}", 90)) from None

    def key(self, config: StackConfig, slices: int, per_device_batch_size: float | None = None,
            eval_batch: float | None = None) -> CompileKey:
        try:
            return compile_key(self.target(config, slices, per_device_batch_size, eval_batch), mode_of(self.full))
        except CompileSetupError as error:
            raise NotDecided(textwrap.shorten(f"the compile could not be set up: {error}", 90)) from None

    def __call__(self, config: StackConfig, slices: int, eval_batch: float | None = None) -> Verdict:
        """XLA's verdict on the run's step at `slices` slices (with `eval_batch`: its eval step at that per-device
        eval batch), or "undecided after N s" when the compile ran out of time. Raises NotDecided with one line
        when there is no verdict: no MaxText or libtpu here, a compile that cannot be set up or that failed for
        another reason than XLA's."""
        out = self.progress or sys.stderr
        target = self.target(config, slices, eval_batch=eval_batch)
        resized = config.workload.plan.at_slices(slices)
        # Before it starts: what, about how long here, and how to skip it (each line within 100 columns).
        what = (f"at perDeviceBatchSize={resized.per_device_batch_size:g}" if eval_batch is None
                else f"its eval step at {eval_batch:g} per device")
        print(textwrap.shorten(
            f"compile: XLA decides {slices} x {resized.shape.pod_type} {what} before anything is created "
            f"(compileCheck={config.workload.compile_check})", 100), file=out, flush=True)
        if self.full:
            how = f"{expected_time(resized.model.name)}; skip: tpu-multislice:compileCheck=off"
        else:
            how = ("the attention kernels alone, then the step memory-only (about 1-4 min here, docs/planner.md)"
                   f"; in full: {FULL_ENV}=1; skip: tpu-multislice:compileCheck=off")
        for line in textwrap.wrap(f"compile: {how}", 100, subsequent_indent="    "):
            print(line, file=out, flush=True)
        try:
            compiler = self.compiler if eval_batch is None else self.eval_compiler
            result = run_verdict(target, full=self.full, timeout=self.timeout, progress=out, compiler=compiler,
                                 kernel_compiler=self.kernel_compiler, tick_s=self.tick_s)
        except CompileSetupError as error:
            raise NotDecided(textwrap.shorten(f"the compile could not be set up: {error}", 90)) from None
        if not kept(result):
            raise NotDecided(textwrap.shorten(f"no verdict from the compile: {result.reason}", 90))
        return verdict_of(result, resized, eval_batch)


def eval_target(train: CompileTarget, resized, eval_batch: float) -> CompileTarget:
    """The eval step MaxText compiles for the run whose train step is `train` (resized: its core.planner.Plan),
    at `eval_batch` per device: the same argv, whose eval batch (eval_per_device_batch_size, else
    per_device_batch_size: aot/runner.py loaded_eval_batch) is set to `eval_batch` only where it differs, so the
    eval step the workers compile at start keeps the pods' exact argv; Grain's eval passes at the train batch
    (core/planner.py Plan.eval_batches) set it to the train batch."""
    changed = {} if loaded_eval_batch(train.keys) == eval_batch else {"eval_per_device_batch_size": f"{eval_batch:g}"}
    evaluated = dataclasses.replace(resized, per_device_batch_size=eval_batch,
                                    eval_per_device_batch_size=None, evaluates=True).eval_memory
    plan = f"{resized.describe().split(';')[0]}; eval step (forward only) at per_device_batch_size {eval_batch:g}"
    return dataclasses.replace(train.with_keys(changed, plan=plan, estimate_bytes=evaluated.total), step=STEP_EVAL)


compile_step = ProgramCompiler()

# What __main__.py hands its config build. The offline plan sets it to None for the program it runs under mocks
# (preview/harness.py: `python -m preview` compiles on its own, after the plan) or to a stand-in (the tests).
for_program: ProgramCompiler | None = compile_step
