"""XLA decides at `pulumi preview`/`pulumi up`: the program's config build compiles the steps compileCheck names
that XLA has not judged (infra/config/compile_check.py, with workloads/compile_check.py's compiler), keeps the
verdict, and refuses a refusal before anything registers.

The compiler here is the program's own (the backend's argv, aot/runner.py's run_compile) with a stand-in for
MaxText's train_compile (tests/preview/fake_train_compile.py, printing what real compiles printed); the program
runs under Pulumi mocks (preview/harness.py).
"""
from __future__ import annotations

import io
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


def _near() -> dict:
    # dev (qwen3-0.6b, elastic 1..2 x v6e-8) at batch 9: near the HBM limit on 1 slice only, by the estimate
    # (two slices fit even at the error measured for a tied head across slices).
    return {**load_stack_config("dev", REPO), "perDeviceBatchSize": "9"}


def _stand_in(monkeypatch, tmp_path, case: str, calls: list[int], progress: io.StringIO | None = None):
    """The program's compile step with train_compile replaced by the stand-in playing `case`; records each call."""
    monkeypatch.setenv("FAKE_COMPILE", case)
    monkeypatch.setenv("FAKE_COMPILE_RECORD", str(tmp_path / "record.json"))

    def step(config, slices):
        calls.append(slices)
        return compile_check.compile_step(config, slices, compiler=(sys.executable, str(FAKE)),
                                          progress=progress or io.StringIO(), tick_s=0.5)
    return step


def test_a_near_limit_step_xla_refuses_is_compiled_once_and_refused_before_anything_registers(monkeypatch, tmp_path):
    near = _near()
    assert slices_to_compile(build(near).workload.plan, "auto") == [1]
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
                           "tpu-multislice:perDeviceBatchSize=8 (not compiled yet)"), said
    assert "Traceback" not in said
    assert all(len(line) <= 100 for line in str(refused.value).split("\n")), lines
    # While it compiled: what XLA decides, then the ticker (every 30 s where the output is not a terminal).
    ticks = progress.getvalue().splitlines()
    assert ticks[0].startswith("compile: XLA decides 1 x v6e-8 at perDeviceBatchSize=9 before anything is created")
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
    assert calls == [1] and any(r.custom for r in run.resources)
    # XLA's verdict replaced the estimate's doubt: no "not compiled yet" warning.
    assert not [r for r in caplog.records if "not compiled" in r.getMessage()]
    run_program(near, stack="dev", compile_step=step)
    assert calls == [1]                                   # the second preview compiled nothing


def test_compile_check_names_the_steps_compiled(monkeypatch, tmp_path):
    calls: list[int] = []
    step = _stand_in(monkeypatch, tmp_path, "fits", calls)
    build({**_near(), "compileCheck": "off"}, compile_step=step)
    build({**_near(), "perDeviceBatchSize": "4"}, compile_step=step)          # fits at every count: auto compiles none
    assert calls == []
    build({**_near(), "perDeviceBatchSize": "4", "compileCheck": "always"}, compile_step=step)
    assert calls == [1, 2]                                # every distinct shape, the fewest slices first


def test_without_maxtext_or_libtpu_here_it_says_so_in_one_line(monkeypatch, caplog):
    monkeypatch.setattr(aot_runner, "installed", lambda package: "not installed")
    with caplog.at_level(logging.WARNING):
        run_program(_near(), stack="dev", compile_step=compile_check.compile_step)
    said = [r.getMessage() for r in caplog.records if "maxtext" in r.getMessage()]
    assert said == ["plan: memory: XLA did not decide 1 slice(s) near the limit: no maxtext here "
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
from tests.infra.test_compile_check import FAKE, _near
from workloads.compile_check import compile_step
try:
    run_program(_near(), stack="dev",
                compile_step=functools.partial(compile_step, compiler=(sys.executable, str(FAKE))))
except (KeyboardInterrupt, CompileStopped):
    sys.exit(9)
"""


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_stopping_the_program_stops_the_compile_it_runs(tmp_path, signum):
    """SIGTERM or Ctrl-C to the program while its config build compiles ends train_compile and what it started."""
    pids = tmp_path / "pids"
    env = {**os.environ, "FAKE_COMPILE": "helper", "FAKE_COMPILE_RECORD": str(tmp_path / "record.json"),
           "FAKE_COMPILE_PIDS": str(pids), "PYTHONPATH": str(REPO),
           "TPU_MULTISLICE_COMPILE_VERDICTS": str(tmp_path / "verdicts.json")}
    program = subprocess.Popen([sys.executable, "-c", _STOPPABLE], cwd=REPO, env=env)
    deadline = time.monotonic() + 120
    while not pids.exists() or len(pids.read_text().split()) < 2:
        assert program.poll() is None and time.monotonic() < deadline, "the stand-in compile never started"
        time.sleep(0.2)
    worker, helper = (int(pid) for pid in pids.read_text().split())
    try:
        assert _alive(worker) and _alive(helper)
        program.send_signal(getattr(signal, signum))
        assert program.wait(timeout=30) == 9
        deadline = time.monotonic() + 10
        while (_alive(worker) or _alive(helper)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker) and not _alive(helper), "the compile outlived the program"
    finally:
        for pid in (worker, helper):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if program.poll() is None:
            program.kill()


def test_a_verdict_that_cannot_be_kept_still_decides_and_says_so(monkeypatch, tmp_path):
    """A read-only project: XLA's refusal still refuses this build (no traceback), and a fit says the next preview
    compiles again."""
    monkeypatch.setenv("TPU_MULTISLICE_COMPILE_VERDICTS", str(tmp_path / "missing-dir" / "verdicts.json"))
    calls: list[int] = []
    with pytest.raises(ConfigError) as refused:
        build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "slow_oom", calls))
    assert calls == [1] and "is refused by XLA on 1 x v6e-8" in refused.value.problems[0]
    kept = build(_near(), compile_step=_stand_in(monkeypatch, tmp_path, "fits", calls))
    assert calls == [1, 1]
    assert any("XLA's verdict was not kept (verdicts.json: No such file or directory)" in note
               for note in kept.workload.plan.notes), kept.workload.plan.notes
