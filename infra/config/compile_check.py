"""XLA decides before anything registers: the config build compiles every distinct step the run takes (each slice count
of an elastic run, core/compile_verdicts.py slices_to_compile, and, when the run has an eval split, each distinct
eval step MaxText compiles at start or runs: core/planner.py Plan.eval_batches) that has no verdict kept under its
complete key, unless compileCheck is off, and keeps each verdict, so `pulumi preview` and `pulumi up` refuse a step
XLA refuses (plan_rules.check_xla_verdicts, on the build that follows) and a second preview of an unchanged stack
compiles nothing. A compile that ran out of time is kept as undecided and not started again unless asked
(compile_verdicts.RETRY_ENV).

The compiler is handed in (core/compile_verdicts.Compiler): the key and the compile need the backend's launch argv
(workloads/) and MaxText's compiler (aot/), which this layer does not import. The Pulumi program passes
workloads/compile_check.py's; the offline plan passes none to the program it runs under mocks (it compiles on its
own, preview/cli.py), and the tests pass stand-ins.
"""
from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field

from core import compile_verdicts
from infra.config.model import StackConfig

# compile-verdicts.json lives at the project's root (compile_verdicts.verdicts_path; the tests point it elsewhere).
from infra.config.worker_env_rules import REPO_ROOT


@dataclass(frozen=True)
class CompileOutcome:
    """What the compiler decided for this build: the verdict by slice count (kept or compiled now; "undecided
    after N s" included), the nearest batch XLA compiled where it refused, the one line saying why XLA did not
    decide a step, why the verdicts were not kept, and what was wrong with the file (said once)."""
    verdicts: dict[int, compile_verdicts.Verdict] = field(default_factory=dict)
    nearest: dict[int, float | None] = field(default_factory=dict)
    compiled_now: tuple[int, ...] = ()
    not_decided: str | None = None
    not_kept: str | None = None
    file_note: str | None = None
    # The eval steps (a run with an eval split): by (slice count, per-device eval batch), as above.
    eval_verdicts: dict[tuple[int, float], compile_verdicts.Verdict] = field(default_factory=dict)
    eval_nearest: dict[tuple[int, float], float | None] = field(default_factory=dict)
    eval_compiled_now: tuple[tuple[int, float], ...] = ()


def compile_undecided(config: StackConfig, compiler: compile_verdicts.Compiler) -> CompileOutcome:
    """Read or compile, in slices_to_compile's order, each step of the run (at each slice count the train step,
    then, when the run evaluates, each distinct eval step: core/planner.py Plan.eval_batches), keeping XLA's new
    verdicts; stop at the first refusal (the run's verdict)."""
    plan = config.workload.plan
    path = compile_verdicts.verdicts_path(REPO_ROOT)
    kept_file, file_note = compile_verdicts.read(path)
    verdicts: dict[int, compile_verdicts.Verdict] = {}
    nearest: dict[int, float | None] = {}
    compiled_now: list[int] = []
    evals: dict[tuple[int, float], compile_verdicts.Verdict] = {}
    eval_nearest: dict[tuple[int, float], float | None] = {}
    eval_now: list[tuple[int, float]] = []
    not_kept = None

    def outcome(not_decided: str | None = None) -> CompileOutcome:
        return CompileOutcome(verdicts, nearest, tuple(compiled_now), not_decided, not_kept, file_note, evals,
                              eval_nearest, tuple(eval_now))

    def read_or_compile(count: int, eval_batch: float | None) -> compile_verdicts.Verdict:
        nonlocal not_kept
        key = compiler.key(config, count, eval_batch=eval_batch)
        kept = compile_verdicts.lookup(kept_file, key)
        if kept is not None and kept.undecided and compile_verdicts.retry_undecided():
            kept = None
        if kept is None:
            kept = compiler(config, count) if eval_batch is None else compiler(config, count, eval_batch=eval_batch)
            kept = dataclasses.replace(kept, date=kept.date or datetime.date.today().isoformat(), key=key.as_dict())
            (compiled_now.append(count) if eval_batch is None else eval_now.append((count, eval_batch)))
            kept_file[key.digest()] = kept
            try:
                compile_verdicts.record(path, key, kept)
            except OSError as error:
                # XLA's verdict still decides this build; the next one compiles again.
                not_kept = f"{path.name}: {error.strerror or error}"
        return kept

    def kept_for(eval_batch: float | None):
        """nearest_compiled's look-up of the step refused at `eval_batch` (None: the train step) at a smaller batch
        `chosen.per_device_batch_size`: the train step's there; an eval step at the train batch, the eval step of
        the run at that smaller batch; an eval step at its own eval batch, the eval step at that smaller one."""
        def look(chosen, n: int):
            smaller = chosen.per_device_batch_size
            if eval_batch is None:
                key = compiler.key(config, n, smaller)
            elif eval_batch == plan.per_device_batch_size:
                key = compiler.key(config, n, smaller, eval_batch=smaller)
            else:
                key = compiler.key(config, n, eval_batch=smaller)
            return compile_verdicts.lookup(kept_file, key)
        return look

    try:
        for count in compile_verdicts.slices_to_compile(plan, config.workload.compile_check):
            kept = verdicts[count] = read_or_compile(count, None)
            if not kept.compiled and not kept.undecided:
                nearest[count] = compile_verdicts.nearest_compiled(plan, count, kept_for(None))
                break
            for batch in plan.eval_batches:
                kept = evals[(count, batch)] = read_or_compile(count, batch)
                if not kept.compiled and not kept.undecided:
                    at_batch = dataclasses.replace(plan, per_device_batch_size=batch)
                    eval_nearest[(count, batch)] = compile_verdicts.nearest_compiled(at_batch, count,
                                                                                     kept_for(batch))
                    return outcome()
    except compile_verdicts.NotDecided as why:
        return outcome(str(why))
    return outcome()
