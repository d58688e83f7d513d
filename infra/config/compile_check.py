"""XLA decides before anything registers: the config build compiles the steps the stack's compileCheck names
(core/compile_verdicts.py slices_to_compile: auto, the slice counts the estimate puts near the HBM limit; always,
every distinct shape; off, none) that have no kept verdict, and keeps each verdict, so `pulumi preview` and
`pulumi up` refuse a step XLA refuses (rules.check_xla_verdicts, on the build that follows) and a second preview
of an unchanged stack compiles nothing.

The compiler is handed in (core/compile_verdicts.CompileStep): compiling needs the backend's launch argv
(workloads/) and MaxText's compiler (aot/), which this layer does not import. The Pulumi program passes
workloads/compile_check.py's; the offline plan passes none to the program it runs under mocks (it compiles on its
own, preview/cli.py), and the tests pass stand-ins.
"""
from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field

from core import compile_verdicts
from core.worker_lock import load_pins
from infra.config.model import StackConfig

# compile-verdicts.json lives at the project's root (compile_verdicts.verdicts_path; the tests point it elsewhere).
from infra.config.rules import REPO_ROOT


@dataclass(frozen=True)
class CompileOutcome:
    """What this build's compiles gave: XLA's verdicts by digest (they decide this build even when the file could
    not be written), the one line saying why XLA did not decide a step, and why the verdicts were not kept."""
    fresh: dict[str, compile_verdicts.Verdict] = field(default_factory=dict)
    not_decided: str | None = None
    not_kept: str | None = None


def compile_undecided(config: StackConfig, compile_step: compile_verdicts.CompileStep) -> CompileOutcome:
    """Compile, fewest slices first, each step compileCheck names that has no kept verdict, keeping XLA's verdicts;
    stop at the first refusal (the run's verdict)."""
    plan = config.workload.plan
    path = compile_verdicts.verdicts_path(REPO_ROOT)
    fresh: dict[str, compile_verdicts.Verdict] = {}
    not_kept = None
    for count in compile_verdicts.slices_to_compile(plan, config.workload.compile_check):
        verdicts = {**compile_verdicts.load(path), **fresh}
        libtpus = [load_pins(REPO_ROOT)["libtpu"]] + sorted({kept.libtpu for kept in verdicts.values()})
        kept = compile_verdicts.kept_verdict(verdicts, plan, count, libtpus)
        if kept is None:
            try:
                kept = compile_step(config, count)
            except compile_verdicts.NotDecided as why:
                return CompileOutcome(fresh, str(why), not_kept)
            kept = dataclasses.replace(kept, date=kept.date or datetime.date.today().isoformat())
            digest = compile_verdicts.plan_digest(plan, count, kept.libtpu)
            fresh[digest] = kept
            try:
                compile_verdicts.record(path, digest, kept)
            except OSError as error:
                # XLA's verdict still decides this build; the next one compiles again.
                not_kept = f"{path.name}: {error.strerror or error}"
        if not kept.compiled:
            break
    return CompileOutcome(fresh, None, not_kept)
