"""Every line `python -m trainer.local` prints itself fits 100 columns, with realistic long values: the plan, the
events, the closing table, where the outputs are, and the last line (trainer/local/run.py, logs.py,
heartbeat.py). The driver's own log lines (--verbose) are MaxText's and Ray's, printed as they come."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from core.cli_errors import MAX_COLUMNS
from trainer.local import heartbeat, logs, run

# A work directory as tempfile makes it (trainer/local/run.py main).
WORKDIR = Path("/tmp/tpu-local-k2j4h5g6")


def _fits(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > MAX_COLUMNS]
    assert not wide, wide


def test_the_closing_table_with_every_kind_of_event_fits(capsys):
    failures = [{"kind": kind, "at_step": 12345, "saved_at_notice": 12345 if kind == "preempted" else None,
                 "recovery_s": 1234.5, "steps_redone": 150, "workers_after": 16}
                for kind in ("preempted", "slice-added", "slice-lost", "cold-restart", "worker-killed")]
    failures.append({"kind": "worker-killed", "at_step": 9999, "recovery_s": None, "steps_redone": None,
                     "workers_after": None})
    run.print_table({"steps_completed": 9999, "target_steps": 10000, "final_loss": 11.98765,
                     "scaling": {"workers_final": 16, "workers": 16}, "attempts": 12, "wall_s": 12345.6,
                     "goodput": 0.8123, "failures": failures})
    out = capsys.readouterr().out
    assert "preempted      after step 12345, saved at 12345: back in 1234s on 16 workers, 150 steps redone" in out
    _fits(out)


def test_where_the_outputs_are_fits_with_every_kind_of_notice(capsys):
    # Where trainer.local puts its work directory (tempfile, as main does), not pytest's deeper tmp_path.
    workdir = Path(tempfile.mkdtemp(prefix="tpu-local-"))
    try:
        _report(workdir, capsys)
    finally:
        shutil.rmtree(workdir)


def _report(workdir: Path, capsys) -> None:
    for step in range(0, 1000, 50):
        (workdir / "output" / "local" / "checkpoints" / str(step)).mkdir(parents=True)
    noisy = ["[NO-OP] mldiagnostics", "huggingface/tokenizers: fork", "Platform 'cpu' is experimental",
             "UserWarning: something"]
    (workdir / "driver.log").write_text("\n".join(line for line in noisy for _ in range(1234)) + "\n")
    run.report_outputs(workdir, "local")
    out = capsys.readouterr().out
    assert "Python warnings" in out
    # A long list of saved steps is the one value that can run long: the path and its steps on their line.
    _fits("\n".join(line for line in out.splitlines() if not line.startswith("local: checkpoints")))


@pytest.mark.parametrize("ok, interrupted", [(True, False), (False, True), (False, False)])
def test_the_last_line_fits(ok, interrupted):
    _fits("local: " + run.next_step(ok, interrupted, WORKDIR))


def test_the_run_s_events_and_its_heartbeat_fit():
    events = [
        {"event": "attempt", "attempt": "0123abcd", "workers": 16, "slices": 4, "maxtext_version": "0.2.5"},
        {"event": "model", "params": 70_553_706_496, "expected": 70_553_706_496},
        {"event": "notice", "step": 12345, "reason": "scale-up: capacity for 2 more slice(s) came back"},
        {"event": "eval-start", "after_step": 12345},
        {"event": "saved-at-notice", "step": 12345},
        {"event": "failure", "kind": "worker-killed", "at_step": 12345}]
    for rec in events:
        _fits("local: " + run._describe_event(rec))
    records = [{"event": "attempt", "attempt": 12}, {"event": "step", "step": 99998}]
    for steps, period in ((100000, 0), (1000000, 1), (99999, 0)):
        _fits("local: " + heartbeat.phase_of(records, steps, period) + " (12345s so far)")
    _fits("local: " + run._how_far({"step": 99998, "t": 0.0}, 100000, 0.0))
