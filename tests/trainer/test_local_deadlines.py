"""A local end-to-end run that waits too long ends with a report of how far it got, never a silent hang.

Two deadlines: trainer.local's own --timeout (it says the last step done and how long ago, then stops what it
started), and the tests' wrapper (tests/local_runs.py run_with_deadlines), which stops a trainer.local that hangs
past its own deadline and fails the test naming the last step it printed.
"""
from __future__ import annotations

import sys
import time

import pytest

from tests import local_runs as conftest
from trainer import progress
from trainer.local import run as local_run


def test_a_hung_run_is_stopped_and_reported_with_its_last_step(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "LOCAL_RUN_WIND_DOWN_S", 1.0)
    hang = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
            "print('local: step    3 of 30  loss 1.0000  0.50s/step  workers 4', flush=True)\n"
            "time.sleep(600)\n")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        conftest.run_with_deadlines([sys.executable, "-c", hang], ["--steps", "30"], 1.0, tmp_path)
    assert time.monotonic() - started < 30                       # stopped at the deadline, not after the sleep
    message = str(failed.value)
    assert "did not end within 2s" in message
    assert "last progress: local: step    3 of 30" in message
    assert "exit 143" in message                                 # SIGTERM first: trainer.local stops its cluster


def test_a_failed_run_is_returned_with_its_output_and_the_end_of_its_driver_log(tmp_path):
    kept = tmp_path / "work"
    kept.mkdir()
    (kept / "driver.log").write_text("Config param steps: 4\nRuntimeError: the reason it failed\n")
    ends = f"import sys; print(sys.argv[1:]); print('local: kept {kept}'); sys.exit(3)"
    run = conftest.run_with_deadlines([sys.executable, "-c", ends], ["--steps", "4"], 60.0, tmp_path)
    assert run.returncode == 3 and run.last_step() == "no step done"
    assert "['--steps', '4', '--timeout', '60.0']" in run.stdout
    assert run.driver_log_tail() == "RuntimeError: the reason it failed"
    assert "exit 3 after" in run.describe() and "RuntimeError: the reason it failed" in run.describe()


class _NeverEnds:
    returncode = None

    def poll(self):
        return None


def test_trainer_local_timeout_names_the_last_step(monkeypatch, tmp_path, capsys):
    args = local_run.build_parser().parse_args(["--timeout", "0.5", "--steps", "30"])
    run = local_run.LocalRun(args, None, tmp_path, tmp_path, [])
    monkeypatch.setattr(run, "start_cluster", lambda: None)
    monkeypatch.setattr(run, "start_driver", lambda: setattr(run, "driver", _NeverEnds()))
    progress.append(run.progress_dir, {"event": "step", "attempt": "a", "step": 7, "loss": 1.0, "step_time_s": 0.5,
                                       "workers": 4})
    assert run.run() == 1
    err = capsys.readouterr().err
    assert "local: timed out after 0s; last step done: 7 of 0..29" in err and "s ago" in err
