"""trainer.local gives each Spot notice to a worker group that trains on the optional slice now, never to the
group an earlier notice ended: until the group that follows a notice writes its first record, the newest step on
record is still the ended group's, with every slice's workers (seen in an elastic life run: the fourth notice went
to a slice the group had not grown onto, and no group was preempted). An event listed after an injected failure
(--inject fail@24,preempt@17) waits for the group that replaced the failed one: the failed group's last step is
past the next event's step, and a notice given to it would go to workers already killed."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

from trainer.local.run import LocalRun


class _Cluster:
    def __init__(self):
        self.preempted: list[int] = []
        self.slices = 2

    def preempt_slice(self, index: int) -> None:
        self.preempted.append(index)

    def kill_slice(self, index: int) -> None:
        self.slices -= 1

    def slice_count(self) -> int:
        return self.slices


def _run(tmp_path: Path, inject=None, elastic=True) -> LocalRun:
    args = argparse.Namespace(preempt_slice_at=None if inject else [4, 8], add_slice_at=None, fail_at=None,
                              kill_slice_at=None, grace_period=0.0, recovery="warm", inject=inject,
                              fail_slice_from=None, hold_slice=None)
    plan = SimpleNamespace(workers=4, slices=2, elastic=elastic)
    run = LocalRun(args=args, plan=plan, workdir=tmp_path, ray_temp=tmp_path, driver_argv=[])
    run.cluster = _Cluster()
    run.progress_dir.mkdir(parents=True, exist_ok=True)
    return run


def test_a_second_notice_waits_for_a_group_formed_after_the_first(tmp_path):
    run = _run(tmp_path)
    run.attempt = "a1"
    run.maybe_inject({"step": 4, "workers": 4, "attempt": "a1"})
    assert run.cluster.preempted == [1]
    run.maybe_end_grace()                       # the slice is gone; the next group has not written a record yet
    run.maybe_inject({"step": 8, "workers": 4, "attempt": "a1"})
    assert run.cluster.preempted == [1], "a notice went to the group the first notice ended"
    run.attempt = "a2"                          # the group re-formed on the minimum
    run.maybe_inject({"step": 9, "workers": 2, "attempt": "a2"})
    assert run.cluster.preempted == [1]
    run.attempt = "a3"                          # grown back onto both slices
    run.maybe_inject({"step": 10, "workers": 4, "attempt": "a3"})
    assert run.cluster.preempted == [1, 1]


def test_a_notice_listed_after_a_failure_goes_to_the_group_that_redoes_its_steps(tmp_path, monkeypatch):
    import subprocess
    import sys
    import time

    from trainer import progress

    run = _run(tmp_path, inject=((24, "fail"), (17, "preempt")), elastic=False)
    # The worker the failure kills: a real process, as trainer.local finds it in the progress directory.
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    # Written by the current group's rank (after every record of older groups: trainer/local/run.py).
    monkeypatch.setattr(progress, "read_worker", lambda _dir, rank: {"pid": worker.pid, "t": time.time()})
    run.attempt = "a1"
    run.maybe_inject({"step": 24, "workers": 4, "attempt": "a1"})
    assert worker.wait(timeout=30) == -9 and run.cluster.preempted == []
    # The killed group's last step (24) is past the notice's (17): still no notice to it.
    run.maybe_inject({"step": 24, "workers": 4, "attempt": "a1"})
    run.attempt = "a2"                          # the new group has started, not yet written a step
    run.maybe_inject({"step": 24, "workers": 4, "attempt": "a1"})
    assert run.cluster.preempted == []
    run.maybe_inject({"step": 16, "workers": 4, "attempt": "a2"})   # redoing the steps since the checkpoint
    assert run.cluster.preempted == []
    run.maybe_inject({"step": 17, "workers": 4, "attempt": "a2"})
    assert run.cluster.preempted == [1]
