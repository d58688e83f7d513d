"""trainer.local's injected events as the harness plays them (trainer/local/run.py LocalRun), on a stand-in
cluster that records what it is told: which process a `fail` kills, what `sigterm`, `--fail-slice-from` and
`--hold-slice` do to the last slice, and when its capacity returns. Pure: no Ray, no MaxText."""
from __future__ import annotations

import io
import signal

import pytest

from core.planner import PlanRequest, plan
from trainer import progress
from trainer.local import run as local
from trainer.local.heartbeat import Heartbeat


class Cluster:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def _run(tmp_path, argv: list[str], elastic: bool):
    args = local.build_parser().parse_args(argv)
    chosen = plan(PlanRequest("tiny", "v6e", "2x4", slices=2, min_slices=1 if elastic else None))
    run = local.LocalRun(args, chosen, tmp_path, tmp_path, [], heartbeat=Heartbeat(io.StringIO()))
    run.cluster = Cluster()
    return run


def test_fail_after_a_notice_on_an_elastic_run_kills_the_current_group_s_worker_never_a_stale_pid(tmp_path,
                                                                                                    monkeypatch):
    """Issue 43 item 13: after a notice the elastic group is smaller (2 workers, not 4); the full group's last
    rank left its file with the pid of a process that is gone (or, worse, reused). The kill goes to the last rank
    of the group that wrote the step, and waits while its file is older than the groups before (each rank has its
    own attempt id: a file is told current by its time)."""
    killed = []
    monkeypatch.setattr(local.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    run = _run(tmp_path, ["--elastic", "1,2", "--inject", "fail@20"], elastic=True)
    files = {3: {"pid": 1111, "t": 100.0}, 1: {"pid": 2222, "t": 105.0}}       # the full group's ranks
    monkeypatch.setattr(progress, "read_worker", lambda directory, rank: files.get(rank))
    run.records = [{"event": "step", "attempt": "full-0", "step": 19, "workers": 4, "t": 110.0},
                   {"event": "attempt", "attempt": "small-0", "workers": 2, "t": 120.0},
                   {"event": "step", "attempt": "small-0", "step": 20, "workers": 2, "t": 130.0}]
    last = run.records[-1]
    run.attempt = "small-0"
    run.maybe_inject(last)
    assert killed == [] and run.schedule == [(20, "fail")]  # rank 1's file is still the full group's
    files[1] = {"pid": 4242, "t": 118.0}                      # the small group's rank 1 started
    run.maybe_inject(last)
    assert killed == [(4242, signal.SIGKILL)] and run.schedule == []


def test_sigterm_sends_the_last_slice_s_raylets_sigterm_and_a_fixed_run_gets_its_slice_back(tmp_path, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(local.time, "time", lambda: now[0])
    run = _run(tmp_path, ["--inject", "sigterm@5", "--grace-period", "15"], elastic=False)
    run.attempt = "a"
    run.maybe_inject({"step": 5, "workers": 4, "attempt": "a"})
    assert run.cluster.calls == [("sigterm_raylets", 1)]
    assert [r["kind"] for r in progress.read(run.progress_dir)] == ["sigterm"]
    now[0] += 16                                          # the grace ends: SIGKILL, then the replacement slice
    run.maybe_end_grace()
    assert run.cluster.calls[1:] == [("kill_slice", 1), ("add_slice", 1)]


def test_fail_slice_from_fails_each_group_with_the_slice_once_in_its_first_step(tmp_path, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(local.time, "time", lambda: now[0])
    run = _run(tmp_path, ["--elastic", "1,2", "--fail-slice-from", "8"], elastic=True)
    records = [{"event": "attempt", "attempt": "a", "workers": 4}, {"event": "step", "step": 7, "workers": 4}]
    run.maybe_fail_or_hold_slice(records, records[-1])
    assert run.cluster.calls == []                        # before STEP: nothing
    records.append({"event": "step", "step": 8, "workers": 4})
    run.maybe_fail_or_hold_slice(records, records[-1])
    run.maybe_fail_or_hold_slice(records, records[-1])
    assert run.cluster.calls == [("sigterm_raylets", 1)]  # once per group
    records = run.records = records + [{"event": "step", "step": 9, "workers": 4}]    # one more, in flight
    now[0] += 16
    run.maybe_end_grace()
    assert run.cluster.calls[1:] == [("kill_slice", 1)]
    records += [{"event": "attempt", "attempt": "b", "workers": 2}, {"event": "step", "step": 8, "workers": 2},
                {"event": "step", "step": 9, "workers": 2}]
    run.maybe_fail_or_hold_slice(records, records[-1])    # the minimum re-trains what the full group had trained
    assert run.cluster.calls[2:] == []                    # ... the slice's pods are not back yet
    records.append({"event": "step", "step": 10, "workers": 2})
    run.maybe_fail_or_hold_slice(records, records[-1])    # a new step on the minimum: KubeRay's pods are back
    assert run.cluster.calls[2:] == [("add_slice", 1)]
    records.append({"event": "attempt", "attempt": "c", "workers": 4})
    run.maybe_fail_or_hold_slice(records, records[-2])    # the group grew into the slice again: it fails
    assert run.cluster.calls[3:] == [("sigterm_raylets", 1)]


@pytest.mark.parametrize("elastic", [False, True])
def test_hold_slice_reclaims_the_last_slice_and_returns_its_capacity_only_after_the_hold(tmp_path, monkeypatch,
                                                                                       elastic):
    now = [1000.0]
    monkeypatch.setattr(local.time, "time", lambda: now[0])
    argv = (["--elastic", "1,2"] if elastic else []) + ["--hold-slice", "6:300", "--grace-period", "15"]
    run = _run(tmp_path, argv, elastic=elastic)
    last = {"step": 6, "workers": 4, "attempt": "a"}
    run.maybe_fail_or_hold_slice([], last)
    run.maybe_fail_or_hold_slice([], last)
    assert run.cluster.calls == [("preempt_slice", 1)]
    now[0] += 16
    run.maybe_end_grace()
    assert run.cluster.calls[1:] == [("kill_slice", 1)]   # no replacement: the capacity is held
    now[0] += 200
    run.maybe_end_grace()
    assert run.cluster.calls[2:] == []
    now[0] += 100
    run.maybe_end_grace()
    assert run.cluster.calls[2:] == [("add_slice", 1)]
    run.maybe_fail_or_hold_slice([], {"step": 9, "workers": 4, "attempt": "b"})
    assert run.cluster.calls[3:] == []                    # one hold per run


def test_a_notice_at_start_reaches_the_next_full_group_before_its_first_step_report(tmp_path, monkeypatch):
    """`--inject KIND@start` (issue 43 case (d)): not the group the last event played on, not a group without
    the slice, not a group that already reported a step; the first full group formed after the last event,
    while it has reported nothing (MaxText reports a step one step late)."""
    monkeypatch.setattr(local.time, "time", lambda: 1000.0)
    run = _run(tmp_path, ["--inject", "preempt@5,sigterm@start"], elastic=False)
    assert run.args.inject == ((5, "preempt"), (0, "sigterm"))
    run.records = [{"event": "attempt", "attempt": "a", "workers": 4}]
    run.attempt = "a"
    run.maybe_inject({"step": 5, "workers": 4, "attempt": "a"})     # the notice to group a
    run.preempt_deadline = None                                      # its grace is over, the slice is back
    run.maybe_inject({"step": 6, "workers": 4, "attempt": "a"})
    assert run.schedule == [(0, "sigterm")]                          # group a had its event: wait for the next
    run.records += [{"event": "attempt", "attempt": "b", "workers": 4},
                    {"event": "step", "attempt": "b", "step": 6, "workers": 4}]
    run.attempt = "b"
    run.maybe_inject(run.records[-1])
    assert run.schedule == [(0, "sigterm")]                          # b reported a step already: too late
    run.records.append({"event": "attempt", "attempt": "c", "workers": 4})
    run.attempt = "c"
    run.maybe_inject(run.records[2])
    assert run.schedule == [] and run.cluster.calls[-1] == ("sigterm_raylets", 1)
    assert [r["kind"] for r in progress.read(run.progress_dir)] == ["preempted", "sigterm"]


def test_start_is_a_step_only_for_the_slice_notices():
    from trainer.local.injections import _events

    assert _events("sigterm@start,preempt@start,fail@start") == ((0, "sigterm"), (0, "preempt"), (-1, "fail@start"))


def test_a_notice_at_start_never_goes_to_the_group_an_event_just_ended(tmp_path, monkeypatch):
    """After a slice is killed, the newest attempt on record is still the dead group's until the next one says
    hello: KIND@start waits for that next group."""
    monkeypatch.setattr(local.time, "time", lambda: 1000.0)
    run = _run(tmp_path, ["--inject", "kill-slice@5,sigterm@start"], elastic=False)
    run.records = [{"event": "attempt", "attempt": "a", "workers": 4}]
    run.attempt = "a"
    run.maybe_inject({"step": 5, "workers": 4, "attempt": "a"})
    run.maybe_inject({"step": 5, "workers": 4, "attempt": "a"})
    assert run.schedule == [(0, "sigterm")] and "sigterm_raylets" not in [c[0] for c in run.cluster.calls]


def test_hold_slice_with_inject_holds_the_slice_of_the_list_s_own_notice_and_the_next_event_waits_for_it(
        tmp_path, monkeypatch):
    """The e2e run's events (issue 43 cases a, c and d in one fixed run): `preempt@17` of the list is the held
    notice, played in its turn (after the earlier events of the list, not at the first step 17 of the run); the
    slice comes back only at the end of the hold, and `sigterm@start` goes to the first full group after it."""
    now = [1000.0]
    monkeypatch.setattr(local.time, "time", lambda: now[0])
    run = _run(tmp_path, ["--inject", "preempt@5,preempt@17,sigterm@start", "--hold-slice", "17:300",
                          "--grace-period", "15"], elastic=False)
    run.records = [{"event": "attempt", "attempt": "a", "workers": 4}]
    run.attempt = "a"
    run.maybe_inject({"step": 5, "workers": 4, "attempt": "a"})      # the first notice: not held
    run.maybe_fail_or_hold_slice(run.records, {"step": 5, "workers": 4, "attempt": "a"})
    assert run.cluster.calls == [("preempt_slice", 1)] and run.hold_until is None
    now[0] += 16
    run.maybe_end_grace()
    assert run.cluster.calls[1:] == [("kill_slice", 1), ("add_slice", 1)]   # back at once
    run.records.append({"event": "attempt", "attempt": "b", "workers": 4})
    run.attempt = "b"
    run.maybe_inject({"step": 17, "workers": 4, "attempt": "b"})     # the list's preempt@17: held
    assert run.cluster.calls[3:] == [("preempt_slice", 1)] and run.held
    now[0] += 16
    run.maybe_end_grace()
    run.maybe_inject({"step": 18, "workers": 4, "attempt": "b"})
    assert run.cluster.calls[4:] == [("kill_slice", 1)]              # no replacement while held
    assert run.schedule == [(0, "sigterm")]                          # no group after b yet
    now[0] += 300
    run.maybe_inject({"step": 18, "workers": 4, "attempt": "b"})
    assert run.cluster.calls[5:] == [("add_slice", 1)]               # the hold is over
    run.records.append({"event": "attempt", "attempt": "c", "workers": 4})
    run.attempt = "c"
    run.maybe_inject({"step": 18, "workers": 4, "attempt": "b"})
    assert run.schedule == [] and run.cluster.calls[-1] == ("sigterm_raylets", 1)
    assert [r["kind"] for r in progress.read(run.progress_dir)] == ["preempted", "preempted", "sigterm"]


def test_hold_while_a_file_exists_writes_it_when_the_hold_begins_and_waits_for_its_removal(tmp_path, monkeypatch):
    """`--hold-while FILE` (the suite makes its next local runs in the hold: tests/local_runs.py hold_lease): the
    file is written once the notice's grace is over and its hosts are gone (never during the save at the notice,
    which the next run's start would slow); the capacity returns after the hold's seconds only once it is gone."""
    now = [1000.0]
    monkeypatch.setattr(local.time, "time", lambda: now[0])
    lease = tmp_path / "lease"
    run = _run(tmp_path, ["--hold-slice", "6:300", "--grace-period", "15", "--hold-while", str(lease)],
               elastic=False)
    run.maybe_fail_or_hold_slice([], {"step": 6, "workers": 4, "attempt": "a"})
    assert run.cluster.calls == [("preempt_slice", 1)]
    now[0] += 10
    run.maybe_end_grace()
    assert not lease.exists()                             # the group may still be saving at the notice
    now[0] += 6
    run.maybe_end_grace()
    assert lease.exists()
    now[0] += 1000                                        # long past the hold's 300 s: still held
    run.maybe_end_grace()
    assert run.cluster.calls[1:] == [("kill_slice", 1)]
    lease.unlink()
    run.maybe_end_grace()
    assert run.cluster.calls[2:] == [("add_slice", 1)]
