"""Shared fixtures: the committed stacks run once each under Pulumi mocks (preview/harness.py), the golden
manifests, the CRD bundle beside the repository, and the end-to-end tests' `python -m trainer.local` runs with
deadlines that report how far a run got (run_trainer_local)."""
from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# requirements-trainer.txt installs libtpu (for the pre-flight compile); JAX in the tests and the processes they start
# stays on CPU instead of asking libtpu for a TPU first.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from preview.harness import ProgramRun, run_program  # noqa: E402
from preview.k8s.validation import default_schemas_dir
from preview.stack_files import load_stack_config

REPO = Path(__file__).resolve().parent.parent
COMMITTED_STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))


@functools.lru_cache(maxsize=None)
def committed_stack_run(stack: str) -> ProgramRun:
    return run_program(load_stack_config(stack, REPO), stack=stack)


@pytest.fixture(scope="session")
def prod() -> ProgramRun:
    return committed_stack_run("prod")


@pytest.fixture(scope="session")
def dev() -> ProgramRun:
    return committed_stack_run("dev")


# Smallest valid config: what a user must set.
MINIMAL = {"project": "my-tpu-project", "zone": "us-east5-b"}


GOLDEN_DIR = REPO / "tests" / "golden"


def assert_matches_golden(name: str, objects: object) -> None:
    """The objects as sorted JSON against tests/golden/NAME.json; UPDATE_GOLDENS=1 rewrites the file."""
    text = json.dumps(objects, indent=2, sort_keys=True) + "\n"
    golden = GOLDEN_DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDENS"):
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs; review and regenerate with UPDATE_GOLDENS=1"


@pytest.fixture(scope="session")
def schemas_dir() -> Path:
    """The KubeRay, JobSet and Kueue CRDs beside the repository (../shared/schemas)."""
    path = default_schemas_dir()
    if not path.is_dir():
        pytest.skip(f"CRD bundle {path} not present")
    return path


@pytest.fixture(autouse=True)
def _scratch_compile_verdicts(tmp_path, monkeypatch):
    """XLA verdicts a test's preview records (core/compile_verdicts.py) go to a scratch file, never the project's
    compile-verdicts.json, so one test's stand-in verdict cannot answer another's compile."""
    from core.compile_verdicts import PATH_ENV
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "compile-verdicts.json"))


@pytest.fixture(autouse=True)
def _no_real_compile(request, monkeypatch):
    """Only the tests marked `compile` run MaxText's train_compile (minutes of both cores): elsewhere a compile that
    a stand-in does not replace runs a module that does not exist and ends at once without a verdict."""
    if request.node.get_closest_marker("compile") is None:
        from aot import runner
        monkeypatch.setattr(runner, "AOT_MODULE", "tests.no_real_compile_outside_the_compile_marker")


# --- `python -m trainer.local` runs of the end-to-end tests (tests/trainer/test_local_*.py) ---------------------

# After trainer.local's own --timeout it still stops its cluster, prints its table and writes its JSON: this long.
LOCAL_RUN_WIND_DOWN_S = 180.0
# SIGTERM makes trainer.local stop everything it started (its signal handler); SIGKILL only after this long.
LOCAL_RUN_STOP_S = 60.0


@dataclass
class LocalRunResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def last_step(self) -> str:
        """The last "local: step N of T" line trainer.local printed, or that it printed none."""
        steps = [line for line in self.stdout.splitlines() if line.startswith("local: step ")]
        return steps[-1].strip() if steps else "no step done"

    def driver_log_tail(self, lines: int = 40) -> str:
        """The end of the driver's log in the work directory trainer.local kept ("local: kept DIR"), without
        MaxText's config listing: why a run failed, readable after pytest has rotated its temporary directories."""
        kept = [line.split("local: kept ", 1)[1].strip() for line in self.stdout.splitlines()
                if line.startswith("local: kept ")]
        log = Path(kept[-1]) / "driver.log" if kept else None
        if log is None or not log.is_file():
            return "(no driver log kept)"
        text = [line for line in log.read_text(errors="replace").splitlines() if "Config param " not in line]
        return "\n".join(text[-lines:])

    def describe(self) -> str:
        """What a failed assertion shows: the run, how long, how far it got, and the ends of its output and of
        the driver's log."""
        return (f"python -m trainer.local {' '.join(self.argv)}\n  exit {self.returncode} after {self.wall_s:.0f}s; "
                f"last progress: {self.last_step()}\n--- stdout (end) ---\n{self.stdout[-3000:]}\n"
                f"--- stderr (end) ---\n{self.stderr[-3000:]}\n--- driver log (end) ---\n{self.driver_log_tail()}")


def run_trainer_local(argv: list[str], timeout_s: float, logs: Path) -> LocalRunResult:
    """Run `python -m trainer.local ARGV --timeout TIMEOUT_S` to its end, its output in LOGS/local.{out,err}.

    Two deadlines, both reported with how far the run got: trainer.local's own (it gives up, stops its cluster and
    exits 1), and ours, LOCAL_RUN_WIND_DOWN_S later, for a trainer.local that hangs: it gets SIGTERM (it stops every
    process it started), then SIGKILL, and the test fails naming the last step done. Never a silent wait until
    CI's own limit, and never a Ray cluster left running for the tests that follow."""
    return run_with_deadlines([sys.executable, "-m", "trainer.local"], argv, timeout_s, logs)


def run_with_deadlines(command: list[str], argv: list[str], timeout_s: float, logs: Path) -> LocalRunResult:
    """run_trainer_local's body; COMMAND is `python -m trainer.local` except in the test of the deadlines."""
    logs.mkdir(parents=True, exist_ok=True)
    argv = [*argv, "--timeout", str(timeout_s)]
    out_path, err_path = logs / "local.out", logs / "local.err"
    started = time.monotonic()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([*command, *argv], cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                text=True)
        try:
            proc.wait(timeout=timeout_s + LOCAL_RUN_WIND_DOWN_S)
        except BaseException as stop:        # our deadline, or the session interrupted (Ctrl-C)
            _stop_local_run(proc)
            if not isinstance(stop, subprocess.TimeoutExpired):
                raise
            hung = LocalRunResult(argv, proc.returncode, out_path.read_text(errors="replace"),
                                  err_path.read_text(errors="replace"), time.monotonic() - started)
            pytest.fail(f"trainer.local did not end within {timeout_s + LOCAL_RUN_WIND_DOWN_S:.0f}s (its --timeout "
                        f"{timeout_s:.0f}s + {LOCAL_RUN_WIND_DOWN_S:.0f}s to wind down); stopped it.\n"
                        + hung.describe())
    return LocalRunResult(argv, proc.returncode, out_path.read_text(errors="replace"),
                          err_path.read_text(errors="replace"), time.monotonic() - started)


def _stop_local_run(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=LOCAL_RUN_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
