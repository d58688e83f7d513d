"""XLA decides at `pulumi preview`/`pulumi up`: the program's config build compiles the steps compileCheck names
that XLA has not judged (infra/config/compile_check.py, with workloads/compile_check.py's compiler), keeps the
verdict, and refuses a refusal before anything registers.

The compiler here is the program's own (the backend's argv, aot/runner.py's run_compile) with a stand-in for
MaxText's train_compile (tests/preview/fake_train_compile.py, printing what real compiles printed); the program
runs under Pulumi mocks (preview/harness.py).
"""
from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pulumi
import pytest

from aot import runner as aot_runner
from core.compile_verdicts import slices_to_compile
from infra.config import ConfigError, build
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads import compile_check

FAKE = REPO / "tests" / "preview" / "fake_train_compile.py"
FAKE_KERNELS = REPO / "tests" / "preview" / "fake_kernel_compile.py"
FAKE_EVAL = REPO / "tests" / "preview" / "fake_eval_compile.py"


def _near() -> dict:
    # dev (qwen3-0.6b, elastic 1..2 x v6e-8) at batch 9: near the HBM limit on 1 slice only, by the estimate
    # (two slices fit even at the error measured for a tied head across slices).
    return {**load_stack_config("dev", REPO), "perDeviceBatchSize": "9"}


class _Recording(compile_check.ProgramCompiler):
    """The program's compiler with train_compile (and aot/eval_compile.py, aot/kernel_compile.py) replaced by the
    stand-ins; records each compile: its slice count, or (slice count, eval batch) for an eval step."""

    def __init__(self, calls: list, **kwargs):
        super().__init__(compiler=(sys.executable, str(FAKE)), kernel_compiler=(sys.executable, str(FAKE_KERNELS)),
                         eval_compiler=(sys.executable, str(FAKE_EVAL)), tick_s=0.5, **kwargs)
        self.calls = calls

    def __call__(self, config, slices, eval_batch=None):
        self.calls.append(slices if eval_batch is None else (slices, eval_batch))
        return super().__call__(config, slices, eval_batch)


def _stand_in(monkeypatch, tmp_path, case: str, calls: list[int], progress: io.StringIO | None = None, **kwargs):
    """The program's compiler with train_compile replaced by the stand-in playing `case`; records each call."""
    monkeypatch.setenv("FAKE_COMPILE", case)
    monkeypatch.setenv("FAKE_COMPILE_RECORD", str(tmp_path / "record.json"))
    return _Recording(calls, progress=progress or io.StringIO(), **kwargs)


def test_a_near_limit_step_xla_refuses_is_compiled_once_and_refused_before_anything_registers(monkeypatch, tmp_path):
    near = _near()
    # Every step the run takes, the one nearest the limit first (1 slice); the refusal there ends the compiles.
    assert slices_to_compile(build(near).workload.plan, "auto") == [1, 2]
    calls: list[int] = []
    progress = io.StringIO()
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as refused:
        run_program(near, stack="dev", monitor=monitor,
                    compile_step=_stand_in(monkeypatch, tmp_path, "slow_oom", calls, progress))
    assert calls == [1]                                   # the near-limit count only, once
    assert len(monitor.registrations) == 0                # nothing registered, not even a component
    lines = str(refused.value).split("\n")
    assert lines[0] == "invalid stack config:"
    said = " ".join(line.strip() for line in lines[1:])
    assert said.startswith("tpu-multislice:perDeviceBatchSize=9 is refused by XLA on 1 x v6e-8: XLA needs "
                           "32.51 GiB per device of 31.24 (E1000 CompileTimeHbmOom) nearest to try: "
                           "tpu-multislice:perDeviceBatchSize=8 (not compiled yet: choosing it means a compile)"), said
    assert "Traceback" not in said
    assert all(len(line) <= 100 for line in str(refused.value).split("\n")), lines
    # While it compiled: what XLA decides, then the ticker (every 30 s where the output is not a terminal).
    ticks = progress.getvalue().splitlines()
    assert ticks[0].startswith("compile: XLA decides 1 x v6e-8 at perDeviceBatchSize=9 before anything is created")
    # Before it starts: how XLA decides (the kernels alone, then memory-only), how long, how else, how to skip it.
    assert " ".join(ticks[1:3]).split() == (
        "compile: the attention kernels alone, then the step memory-only (about 1-4 min here, docs/planner.md); "
        "in full: TPU_MULTISLICE_FULL_COMPILE=1; skip: tpu-multislice:compileCheck=off").split(), ticks[1:3]
    assert any(line.startswith("compile: v6e-8 x 1: ") and "elapsed" in line for line in ticks), ticks
    assert aot_runner._Ticker("a step", io.StringIO()).interval == 30.0

    # The verdict is kept: the next preview of the unchanged stack refuses it without compiling.
    calls.clear()
    with pytest.raises(ConfigError) as again:
        build(near, compile_step=_stand_in(monkeypatch, tmp_path, "slow_oom", calls))
    assert calls == [] and " ".join(again.value.problems[0].split()) == " ".join(said.split())


def test_a_step_xla_compiles_is_kept_and_not_compiled_again(monkeypatch, tmp_path, caplog):
    near = _near()
    calls: list[int] = []
    step = _stand_in(monkeypatch, tmp_path, "fits", calls)
    with caplog.at_level(logging.WARNING):
        run = run_program(near, stack="dev", compile_step=step)
    assert calls == [1, 2] and any(r.custom for r in run.resources)
    # XLA's verdict replaced the estimate's doubt: no "not compiled yet" warning.
    assert not [r for r in caplog.records if "not compiled" in r.getMessage()]
    run_program(near, stack="dev", compile_step=step)
    assert calls == [1, 2]                                # the second preview compiled nothing
    # The notes follow the compile that ran: XLA's verdict with what decided it, not the estimate's advice.
    notes = build(near, compile_step=step).workload.plan.notes
    assert "memory: XLA compiled the run's step at 1, 2 slice(s) (libtpu 0.0.42.1, MaxText 0.2.5, jax 0.10.2)" \
        in notes, notes
    assert not [note for note in notes if "before you pay" in note], notes


def test_compile_check_names_the_steps_compiled(monkeypatch, tmp_path):
    calls: list[int] = []
    step = _stand_in(monkeypatch, tmp_path, "fits", calls)
    build({**_near(), "compileCheck": "off"}, compile_step=step)
    assert calls == []
    # "Fits" by the estimate is not the last word: auto compiles every distinct step too.
    build({**_near(), "perDeviceBatchSize": "4"}, compile_step=step)
    assert calls == [1, 2]
    build({**_near(), "perDeviceBatchSize": "4", "compileCheck": "always"}, compile_step=step)
    assert calls == [1, 2]                                # kept: not compiled again


def test_without_maxtext_or_libtpu_here_it_says_so_in_one_line(monkeypatch, caplog):
    here = aot_runner.front_end()     # the compile's interpreter (aot/compile_python.py) has neither
    without = dataclasses.replace(here, versions=tuple((name, "not installed") for name, _ in here.versions))
    monkeypatch.setattr(aot_runner, "front_end", lambda: without)
    with caplog.at_level(logging.WARNING):
        run_program(_near(), stack="dev", compile_step=compile_check.compile_step)
    said = [r.getMessage() for r in caplog.records if "maxtext" in r.getMessage()]
    assert said == ["plan: memory: XLA did not decide the run's slice(s): no maxtext here "
                    "(bash scripts/setup.sh)"], said
    assert all(len(line) <= 100 for line in said)
    with pytest.raises(ConfigError) as refused:
        build({**_near(), "compileCheck": "always"}, compile_step=compile_check.compile_step)
    [problem] = refused.value.problems
    assert problem.startswith("tpu-multislice:compileCheck=always") and "no maxtext here" in problem
    assert all(len(line) <= 100 for line in problem.split("\n")), problem


_STOPPABLE = """
import functools, sys
from aot.runner import CompileStopped
from preview.harness import run_program
from tests.infra.test_compile_check import FAKE, FAKE_KERNELS, _near
from workloads.compile_check import ProgramCompiler
try:
    run_program(_near(), stack="dev", compile_step=ProgramCompiler(
        compiler=(sys.executable, str(FAKE)), kernel_compiler=(sys.executable, str(FAKE_KERNELS))))
except (KeyboardInterrupt, CompileStopped):
    sys.exit(9)
"""


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def program_compiling(tmp_path, program_code: str = "", **popen):
    """The program (`program_code`, by default one whose config build compiles with the stand-in: train_compile
    and a helper it started): its process and the compile's two pids, once both run."""
    pids = tmp_path / "pids"
    env = {**os.environ, "FAKE_COMPILE": "helper", "FAKE_COMPILE_RECORD": str(tmp_path / "record.json"),
           "FAKE_COMPILE_PIDS": str(pids), "PYTHONPATH": str(REPO),
           "TPU_MULTISLICE_COMPILE_VERDICTS": str(tmp_path / "verdicts.json")}
    program = subprocess.Popen([sys.executable, "-c", program_code or _STOPPABLE], cwd=REPO, env=env, **popen)
    deadline = time.monotonic() + 120
    while not pids.exists() or len(pids.read_text().split()) < 2:
        assert program.poll() is None and time.monotonic() < deadline, "the stand-in compile never started"
        time.sleep(0.2)
    worker, helper = (int(pid) for pid in pids.read_text().split())
    return program, (worker, helper)


def _gone_within(pids, seconds: float) -> bool:
    """Whether every pid has ended within `seconds` (polled: the machine may be loaded)."""
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(_alive(pid) for pid in pids)


def kill_leftovers(pids, program: subprocess.Popen | None = None) -> None:
    """A test's cleanup: whatever it started that is still running (a failed assertion) is killed."""
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    if program is not None and program.poll() is None:
        program.kill()
        program.wait()


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_stopping_the_program_stops_the_compile_it_runs(tmp_path, signum):
    """SIGTERM or Ctrl-C to the program while its config build compiles ends train_compile and what it started."""
    program, (worker, helper) = program_compiling(tmp_path)
    try:
        assert _alive(worker) and _alive(helper)
        program.send_signal(getattr(signal, signum))
        assert program.wait(timeout=30) == 9
        assert _gone_within((worker, helper), 10), "the compile outlived the program"
    finally:
        kill_leftovers((worker, helper), program)


def test_a_verdict_that_cannot_be_kept_still_decides_and_says_so(monkeypatch, tmp_path):
    """A read-only project: XLA's refusal still refuses this build (no traceback), and a fit says the next preview
    compiles again."""
    monkeypatch.setenv("TPU_MULTISLICE_COMPILE_VERDICTS", str(tmp_path / "missing-dir" / "verdicts.json"))
    calls: list[int] = []
    with pytest.raises(ConfigError) as refused:
        build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "slow_oom", calls))
    assert calls == [1] and "is refused by XLA on 1 x v6e-8" in refused.value.problems[0]
    kept = build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    assert calls == [1, 1, 2]
    assert any("XLA's verdict was not kept (verdicts.json: No such file or directory)" in note
               for note in kept.workload.plan.notes), kept.workload.plan.notes


def test_a_program_killed_by_sigkill_leaves_no_compile_behind(tmp_path):
    """SIGKILL (no handler runs: Pulumi's second Ctrl-C) to the program while its config build compiles: the
    compile's guard gets its parent-death signal (aot/guard.py, prctl PR_SET_PDEATHSIG) and ends train_compile
    and the helper it started. Polled with a generous bound: the machine may be loaded."""
    program, (worker, helper) = program_compiling(tmp_path)
    try:
        assert _alive(worker) and _alive(helper)
        program.kill()
        program.wait(timeout=60)
        assert _gone_within((worker, helper), 60), "the compile outlived the killed program"
    finally:
        kill_leftovers((worker, helper))


def test_a_compile_that_runs_out_of_time_is_kept_as_undecided_and_not_restarted(monkeypatch, tmp_path):
    """A compile that does not finish within its time is kept as "undecided after N s": the plan says so in one
    note, the next build does not start the same compile again, compileCheck=always refuses it, and
    TPU_MULTISLICE_RETRY_UNDECIDED=1 compiles it again."""
    from core import compile_verdicts

    calls: list[int] = []
    near = {**_near(), "elasticMinSlices": "2"}           # one step: 2 slices
    hang = _stand_in(monkeypatch, tmp_path, "hang", calls, timeout=1.0)
    first = build(near, compile_step=hang)
    assert calls == [2]
    said = [note for note in first.workload.plan.notes if "XLA did not decide" in note]
    assert said == ["memory: XLA did not decide 2 slice(s): undecided after 1 s, the compile ran out of time"], said
    [kept] = compile_verdicts.load(compile_verdicts.verdicts_path(REPO)).values()
    assert kept.undecided_after_s == 1 and not kept.compiled

    again = build(near, compile_step=hang)
    assert calls == [2]                                   # not restarted
    said = [note for note in again.workload.plan.notes if "XLA did not decide" in note]
    assert said == ["memory: XLA did not decide 2 slice(s): undecided after 1 s, the compile ran out of time (kept;"
                    " not compiled again: TPU_MULTISLICE_RETRY_UNDECIDED=1 compiles it again)"], said
    with pytest.raises(ConfigError) as refused:
        build({**near, "compileCheck": "always"}, compile_step=hang)
    assert "compileCheck=always needs XLA's verdict" in refused.value.problems[0] and calls == [2]

    monkeypatch.setenv(compile_verdicts.RETRY_ENV, "1")
    retried = build(near, compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    assert calls == [2, 2]
    assert not [note for note in retried.workload.plan.notes if "XLA did not decide" in note]


def _evaluating(**maxtext) -> dict:
    """dev at batch 4 with an eval split (the eval step on: evalDatasetPath), and MaxText settings."""
    raw = {**_near(), "perDeviceBatchSize": "4", "datasetType": "grain",
           "datasetPath": "gs://my-data/c4/train-*.array_record",
           "evalDatasetPath": "gs://my-data/c4/eval-*.array_record", "evalSteps": "2"}
    return {**raw, "maxtextSettings": maxtext} if maxtext else raw


def test_a_run_with_an_eval_split_has_each_eval_step_compiled_beside_the_train_step(monkeypatch, tmp_path):
    """MaxText compiles its eval step ahead of time at start (trainers/pre_train/train.py train_loop,
    p_eval_step.lower at eval_per_device_batch_size) and Grain's eval passes run at the train batch
    (core/planner.py Plan.eval_batch): at each slice count the train step, then both eval steps are compiled by
    aot/eval_compile.py (here its stand-in), each at its own batch, with the eval step's own kernels (--eval);
    kept under eval keys, so the next build compiles nothing."""
    monkeypatch.setenv("FAKE_EVAL_RECORD", str(tmp_path / "eval.json"))
    monkeypatch.setenv("FAKE_KERNELS_RECORD", str(tmp_path / "kernels.json"))
    raw = _evaluating(eval_per_device_batch_size=2)
    calls: list = []
    step = _stand_in(monkeypatch, tmp_path, "fits", calls)
    config = build(raw, compile_step=step)
    assert config.workload.plan.evaluates and calls == [1, (1, 4), (1, 2), 2, (2, 4), (2, 2)], calls
    # The last compile: the eval step at start, at 2 per device on 2 slices, on the pods' exact argv.
    recorded = json.loads((tmp_path / "eval.json").read_text())["argv"]
    assert "eval_per_device_batch_size=2" in recorded and "per_device_batch_size=4" in recorded
    assert "compile_topology_num_slices=2" in recorded
    assert json.loads((tmp_path / "kernels.json").read_text())["argv"][0] == "--eval"
    from core import compile_verdicts
    kept = compile_verdicts.load(compile_verdicts.verdicts_path(REPO)).values()
    evals = sorted((v.slices, v.per_device_batch_size) for v in kept if v.step == compile_verdicts.STEP_EVAL)
    assert evals == [(1, 2), (1, 4), (2, 2), (2, 4)]
    assert all(v.key.get("step", "train") == v.step for v in kept)
    assert ("memory: XLA compiled the run's eval step too, as MaxText compiles it at start (per-device eval "
            "batch): 1 slice(s) at 2, 1 slice(s) at 4, 2 slice(s) at 2, 2 slice(s) at 4") \
        in config.workload.plan.notes, config.workload.plan.notes
    assert not [note for note in config.workload.plan.notes if "estimated, not compiled" in note]
    build(raw, compile_step=step)
    assert len(calls) == 6                                # kept: nothing compiled again


def test_an_eval_step_xla_refuses_refuses_the_config_naming_the_eval_batch_key(monkeypatch, tmp_path):
    """XLA fits the train step and refuses the eval step MaxText compiles at start at the user's
    eval_per_device_batch_size: refused in config build, before anything registers, in one problem naming that
    key and the nearest to try; the refusal is kept (the next build refuses it without compiling)."""
    monkeypatch.setenv("FAKE_EVAL_COMPILE", "slow_oom")
    raw = _evaluating(eval_per_device_batch_size=8)
    calls: list = []
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as refused:
        run_program(raw, stack="dev", monitor=monitor, compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    assert calls == [1, (1, 8)] and len(monitor.registrations) == 0
    said = " ".join(line.strip() for line in str(refused.value).split("\n")[1:])
    assert said.startswith("tpu-multislice:maxtextSettings.eval_per_device_batch_size=8 is refused by XLA in the "
                           "eval step (tpu-multislice:evalDatasetPath is set) on 1 x v6e-8: XLA needs 32.51 GiB per "
                           "device of 31.24 (E1000 CompileTimeHbmOom) nearest to try: "
                           "tpu-multislice:maxtextSettings.eval_per_device_batch_size=7"), said
    assert all(len(line) <= 100 for line in str(refused.value).split("\n"))
    with pytest.raises(ConfigError) as again:
        build(raw, compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    assert calls == [1, (1, 8)] and "in the eval step" in again.value.problems[0]
    # Without the key, the eval step runs at the train batch: perDeviceBatchSize is the key named.
    with pytest.raises(ConfigError) as at_train_batch:
        build(_evaluating(), compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    assert at_train_batch.value.problems[0].startswith("tpu-multislice:perDeviceBatchSize=4 is refused by XLA in "
                                                        "the eval step"), at_train_batch.value.problems


def test_a_refusal_after_memory_is_assigned_still_refuses_the_step(monkeypatch, tmp_path):
    """XLA refuses a kernel's scoped VMEM (E1001 CompileTimeScopedVmemOom) in code generation, minutes after its HLO
    passes assigned memory within HBM (measured on the prod step in one layer without the pods' flags: memory-only
    said "fits", the full compile refused the splash-attention dkv kernel after 9m53s, the kernels alone refused
    it in 40 s; docs/planner.md "Time per verdict"). The program's memory-only compile stops once memory is
    assigned (here at once, and the stand-in's code generation would take a minute), so the VMEM refusal must
    come from the kernels' own compile (aot/kernel_check.py): without it this step would be called fitting."""
    monkeypatch.setattr(aot_runner, "MEMORY_ONLY_GRACE_S", 0.0)
    monkeypatch.setenv("FAKE_COMPILE_CODEGEN_S", "60")
    monkeypatch.setenv("FAKE_KERNELS", "vmem")
    calls: list[int] = []
    compiler = _stand_in(monkeypatch, tmp_path, "vmem", calls)
    assert not compiler.full
    with pytest.raises(ConfigError) as refused:
        build(_near(), compile_step=compiler)
    assert calls == [1]
    said = " ".join(refused.value.problems[0].split())
    assert "is refused by XLA on 1 x v6e-8" in said and "E1001 CompileTimeScopedVmemOom" in said, said
    from core import compile_verdicts
    [kept] = compile_verdicts.load(compile_verdicts.verdicts_path(REPO)).values()
    assert kept.mode == compile_verdicts.MODE_MEMORY_KERNELS and kept.error_code == "E1001 CompileTimeScopedVmemOom"


def test_the_kernels_fitting_leaves_the_hbm_verdict_to_the_memory_only_compile(monkeypatch, tmp_path):
    """With the pods' flags the kernels fit; the step's HBM refusal (E1000) still comes from the memory-only
    compile, which runs after them."""
    monkeypatch.setenv("FAKE_KERNELS", "fits")
    calls: list[int] = []
    with pytest.raises(ConfigError) as refused:
        build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "slow_oom", calls))
    said = " ".join(refused.value.problems[0].split())
    assert "E1000 CompileTimeHbmOom" in said, said


def test_a_plan_decided_by_the_kernels_and_memory_only_says_so(monkeypatch, tmp_path):
    """The faster mode's verdict is named in the plan as an assumption (what only the full compile would see);
    a full compile's verdict is not."""
    calls: list[int] = []
    fast = build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    said = [note for note in fast.workload.plan.notes if "attention kernels alone" in note]
    assert said and "TPU_MULTISLICE_FULL_COMPILE=1 compiles in full" in said[0], fast.workload.plan.notes
    monkeypatch.setenv("TPU_MULTISLICE_COMPILE_VERDICTS", str(tmp_path / "full.json"))
    full = build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls, full=True))
    assert not [note for note in full.workload.plan.notes if "attention kernels alone" in note]


def test_a_kernel_program_that_cannot_be_built_falls_back_to_the_full_compile(monkeypatch, tmp_path):
    """The kernels alone give no verdict of XLA's (a configuration the kernel program cannot build): the step is
    compiled in full, so its VMEM refusal is still found (and the user is told)."""
    monkeypatch.setattr(aot_runner, "MEMORY_ONLY_GRACE_S", 0.0)
    monkeypatch.setenv("FAKE_COMPILE_CODEGEN_S", "0")
    monkeypatch.setenv("FAKE_KERNELS", "broken")
    progress = io.StringIO()
    with pytest.raises(ConfigError) as refused:
        build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "vmem", [], progress))
    assert "E1001 CompileTimeScopedVmemOom" in " ".join(refused.value.problems[0].split())
    said = [line for line in progress.getvalue().splitlines() if "the kernels alone gave no verdict" in line]
    assert said and said[0].startswith("compile: the kernels alone gave no verdict, compiling in full (")
    assert all(len(line) <= 100 for line in said), said


def test_an_eval_step_kept_as_undecided_is_said_once_and_refused_by_compile_check_always():
    """An eval step whose compile ran out of time (kept as "undecided after N s") is named in one note with its
    eval batch, like an undecided train step; compileCheck=always refuses it (what the config build decides from
    the compiles' outcome: infra/config/plan_rules.py check_xla_verdicts)."""
    from core import compile_verdicts
    from infra.config.build import _build
    from infra.config.compile_check import CompileOutcome

    def verdict(**kwargs):
        return compile_verdicts.Verdict(shape="s", libtpu="0.0.50.1", maxtext="0.2.5", jax="0.10.2", **kwargs)

    outcome = CompileOutcome(
        verdicts={1: verdict(compiled=True, slices=1)},
        eval_verdicts={(1, 4.0): verdict(compiled=False, slices=1, undecided_after_s=900.0,
                                         step=compile_verdicts.STEP_EVAL)})
    notes = _build(_evaluating(), outcome).workload.plan.notes
    said = [note for note in notes if "XLA did not decide" in note]
    assert said == ["memory: XLA did not decide the eval step on 1 slice(s) at eval batch 4: undecided after 900 s, "
                    "the compile ran out of time (kept; not compiled again: TPU_MULTISLICE_RETRY_UNDECIDED=1 "
                    "compiles it again)"], notes
    with pytest.raises(ConfigError) as refused:
        _build({**_evaluating(), "compileCheck": "always"}, outcome)
    assert "compileCheck=always needs XLA's verdict" in refused.value.problems[0]
