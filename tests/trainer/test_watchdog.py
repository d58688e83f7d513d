"""The progress watchdog (trainer/watchdog.py): limits from the plan, the verdict, and a real driver process on
a real Ray that ends with exit 7 and the reason when steps stop — and not while they come.

Why it is needed (Ray 2.60, read and run here): Ray Train reschedules a worker group whose start fails or times out
without limit (ray/train/v2/_internal/execution/failure_handling/default.py RETRYABLE_CONTROLLER_ERRORS, charged to
FailureConfig.controller_failure_limit, default -1 in ray/train/v2/api/config.py); a worker whose process cannot
start keeps the controller in SchedulingState with no error at all (measured: PYTHONHOME broken in the worker
runtime env, 100 s and no state change); and the Spot RayJob has no deadline (workloads/ray/deadline.py).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from core import exit_codes
from core.planner import PlanRequest, plan
from core.presets import PRESETS
from core.preemption import save_estimate
from core.run_time import MIN_MFU, STARTUP_ALLOWANCE_S, step_seconds
from tests.conftest import REPO
from trainer import watchdog
from trainer.watchdog import Limits, verdict


def test_limits_come_from_the_plan():
    big = plan(PlanRequest("llama3-70b", "v6e", "8x8", slices=2))
    limits = watchdog.limits_for(big)
    expected = watchdog.STALL_STEPS * step_seconds(big, MIN_MFU) + save_estimate(big).seconds
    assert expected > watchdog.STALL_FLOOR_S                  # this plan is above the floor: the formula decides
    assert limits.stall_s == pytest.approx(expected, abs=1)
    assert limits.startup_s == STARTUP_ALLOWANCE_S
    small = watchdog.limits_for(plan(PlanRequest("tiny", "v6e", "2x4", slices=2)))
    assert small.stall_s == watchdog.STALL_FLOOR_S


LIMITS = Limits(startup_s=100, stall_s=10)


@pytest.mark.parametrize("status, fires", [
    ({"age_s": 99, "starting": True, "last_step": None}, None),
    ({"age_s": 101, "starting": True, "last_step": None}, "start-up allowance of 100 s"),
    ({"age_s": 101, "starting": True, "last_step": 40}, "since step 40"),
    ({"age_s": 9, "starting": False, "last_step": 40}, None),
    ({"age_s": 11, "starting": False, "last_step": 40}, "after step 40: the group is stalled"),
    ({"age_s": 50, "starting": True, "last_step": 40}, None),     # restarting: the start-up allowance applies
])
def test_verdict(status, fires):
    found = verdict(status, LIMITS)
    assert (found is None) if fires is None else (found[0] == exit_codes.NO_PROGRESS and fires in found[1])


def _reason(status: dict, limits: Limits = LIMITS) -> str | None:
    found = verdict(status, limits)
    return found[1] if found else None


def test_a_restart_does_not_reset_the_start_up_clock(monkeypatch):
    """Restarts that never train again (a failure that looks like a preemption, a start that keeps failing) are
    bounded by the allowance counted from the last progress, not from each retry."""
    now = [1000.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    progress = watchdog.RunProgress()
    progress.step(7)
    now[0] += 30
    progress.left_running("RestartingState")
    now[0] += 60
    progress.left_running("RestartingState")
    status = progress.status()
    assert (status["age_s"], status["starting"], status["last_step"]) == (90, True, 7)
    progress.step(8)
    assert (progress.status()["age_s"], progress.status()["starting"]) == (0, False)


def _fake_clock():
    now = [1000.0]
    return now, (lambda: now[0])


def test_an_eval_pass_longer_than_the_stall_limit_is_progress():
    """An eval pass reads the whole split (eval_steps=0) and its first step compiles the eval program: together
    longer than the stall limit. Each eval step is progress, and the compile before the first one has the
    start-up allowance. Without it the watchdog counted training steps only and ended the run with exit 7."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.step(20)
    now[0] += 5
    progress.eval_started()
    now[0] += 60                                  # the eval program compiles: > stall (10), < start-up (100)
    assert verdict(progress.status(), LIMITS) is None
    for count in range(12):                       # a pass of 12 eval steps, 8 s each: 96 s, far over 10 s
        progress.eval_step(count)
        now[0] += 8
        assert verdict(progress.status(), LIMITS) is None
    progress.step(21)
    now[0] += 11                                  # then training stalls: the stall limit applies again
    assert "stalled" in _reason(progress.status())


def test_an_eval_compile_that_never_ends_still_ends_the_run():
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.step(20)
    progress.eval_started()
    now[0] += 101
    assert "eval pass did not compile" in _reason(progress.status())


def test_a_wait_for_capacity_does_not_spend_the_start_up_allowance_and_ends_at_its_bound():
    """A Spot stockout longer than the allowance (an hour on TPU), or a fixed run whose reclaimed slice is away:
    the controller cycles Scheduling and Rescheduling with no group running (a worker group's start times out
    after 60 s, ray/train/v2/_internal/constants.py DEFAULT_WORKER_GROUP_START_TIMEOUT_S). The clock stops while
    it waits and goes on, from where it stopped, once a group runs; a group that runs and never trains still ends
    the run; the wait itself ends at capacity_wait_s with its own line."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.scheduling()
    progress.running()
    progress.step(7)
    now[0] += 30
    progress.left_running("RestartingState")
    progress.waiting_for_capacity()
    for _ in range(3 * 60):                       # three hours of 60 s schedulings that time out
        progress.scheduling()
        now[0] += 60
        progress.scheduling_ended()
    assert progress.status()["age_s"] == 30 and verdict(progress.status(), LIMITS) is None
    bounded = Limits(startup_s=100, stall_s=10, capacity_wait_s=3 * 3600 - 1)
    code, reason = verdict(progress.status(), bounded)
    assert code == exit_codes.NO_PROGRESS and "waited 10800 s for capacity after step 7" in reason
    assert "capacityWaitSeconds" in reason and progress.status()["attempts_without_progress"] == 0
    progress.waiting_for_capacity()               # told again: the wait started when it first did
    progress.running()
    assert progress.status()["age_s"] == 30
    now[0] += 69
    assert verdict(progress.status(), bounded) is None
    now[0] += 2                                   # 101 s of start-up with capacity, no step
    assert "start-up allowance" in _reason(progress.status(), bounded)
    progress.step(8)
    assert verdict(progress.status(), bounded) is None


def test_one_start_that_never_ends_is_no_wait_and_ends_at_the_start_up_allowance():
    """A worker whose process cannot start keeps the controller in one SchedulingState with no error and no
    timeout (measured on Ray 2.60: 100 s, no state change); a wait for capacity times out every 60 s and
    reschedules. The first ends at the start-up allowance, not hours later at the capacity wait."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.waiting_for_capacity()
    progress.scheduling(4)
    now[0] += 99
    limits = Limits(startup_s=100, stall_s=10, capacity_wait_s=6 * 3600)
    assert verdict(progress.status(), limits) is None
    now[0] += 2
    code, reason = verdict(progress.status(), limits)
    assert code == exit_codes.NO_PROGRESS and "its workers cannot start" in reason
    progress.scheduling_ended()
    assert verdict(progress.status(), limits) is None


def _attempt(progress, now, first_step, last_step, ending="RestartingState", group="g", kind=None, workers=None):
    """One scheduled group of `workers` that runs, says hello, trains `first_step`..`last_step` (one second
    each), and is ended by `kind` (what the failure policy says) into the controller's `ending` state."""
    progress.scheduling(workers)
    progress.hello(group)
    progress.running()
    for step in range(first_step, last_step + 1):
        now[0] += 1
        progress.step(step, group)
    if kind:
        progress.interrupted(kind)
    progress.left_running(ending)
    progress.waiting_for_capacity()


def test_only_new_steps_are_progress_and_n_attempts_without_one_end_the_run_with_exit_8():
    """Item 2 of issue 43: restore, re-train the same steps, lose the slice, retry. Each attempt re-trains steps
    below the high-water mark: not progress. The third in a row ends the run with exit 8 and one line naming
    what kept ending them; an attempt that trains one new step resets the count."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    limits = Limits(startup_s=100, stall_s=10, attempts_without_progress=3)
    _attempt(progress, now, 0, 20, group="a", kind="a preempted node")          # progress: 0..20 are new
    assert progress.status()["attempts_without_progress"] == 0
    _attempt(progress, now, 10, 20, group="b", kind="a preempted node")         # restored at 10, re-trained
    _attempt(progress, now, 10, 20, group="c", kind="a node that died on SIGTERM")
    assert progress.status()["attempts_without_progress"] == 2 and verdict(progress.status(), limits) is None
    assert progress.status()["last_step"] == 20
    _attempt(progress, now, 10, 21, group="d", kind="a preempted node")         # one new step: progress
    assert progress.status()["attempts_without_progress"] == 0
    for group in "efg":
        _attempt(progress, now, 15, 21, group=group, kind="a node that died on SIGTERM")
    code, reason = verdict(progress.status(), limits)
    assert code == exit_codes.INTERRUPTED_WITHOUT_PROGRESS == 8
    assert reason.startswith("3 attempts in a row trained no step after step 21")
    assert "a node that died on SIGTERM x3" in reason


def test_an_optional_slice_that_fails_at_every_start_ends_the_run_though_the_minimum_trains_between():
    """Issue 43 item 2 and case (b): elastic 1..2, a host of the optional slice dies at each start. Ray's elastic
    policy re-forms the group on the minimum slice (which trains new steps and saves before the resize), then
    grows into the broken slice again, whose group never trains a new step. Counted per group size, the third
    such attempt ends the run with exit 8, naming the group and what ended it."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    limits = Limits(startup_s=100, stall_s=10, attempts_without_progress=3)
    _attempt(progress, now, 0, 10, workers=4, group="full")
    step = 10
    for cycle in range(3):
        assert verdict(progress.status(), limits) is None
        _attempt(progress, now, step, step, workers=4, group=f"broken-{cycle}", kind="a node that died on SIGTERM")
        _attempt(progress, now, step, step + 5, workers=2, ending="ResizingState", group=f"min-{cycle}")
        step += 5
    code, reason = verdict(progress.status(), limits)
    assert code == exit_codes.INTERRUPTED_WITHOUT_PROGRESS
    assert reason.startswith("3 attempts of the 4-worker group in a row trained no step after step 25")


def test_a_group_lost_while_it_starts_is_an_attempt_without_progress_and_a_timed_out_start_is_not():
    """A host that dies at every start of a slice can die while the group starts (the launch of the training
    function: trainer/elastic_control.py `_lost_while_starting`); the controller then reschedules from its
    SchedulingState and the group never reaches its running state. Seen in the local fail-slice run on 1-host
    slices: the third start of the full group died so, was not counted, and the run went on a fourth time. Each
    such start counts like a loss in the first step; a start that times out (no interruption told) stays a wait
    for capacity."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    limits = Limits(startup_s=100, stall_s=10, attempts_without_progress=2)
    _attempt(progress, now, 0, 10, workers=2, group="full")
    _attempt(progress, now, 10, 10, workers=2, group="broken", kind="a node that died on SIGTERM")
    _attempt(progress, now, 10, 15, workers=1, ending="ResizingState", group="min")
    for timed_out in range(3):               # Scheduling -> Rescheduling with no interruption: not an attempt
        progress.scheduling(2)
        now[0] += 60
        progress.scheduling_ended()
    assert progress.status()["attempts_without_progress"] == 1 and verdict(progress.status(), limits) is None
    progress.scheduling(2)
    progress.hello("lost-while-starting")
    progress.interrupted("a node that died on SIGTERM while the group started")
    progress.scheduling_ended()              # Scheduling -> Rescheduling: it never ran
    code, reason = verdict(progress.status(), limits)
    assert code == exit_codes.INTERRUPTED_WITHOUT_PROGRESS
    assert reason.startswith("2 attempts of the 2-worker group in a row trained no step after step 15")
    assert "while the group started x1" in reason


def test_re_trained_steps_neither_count_as_progress_nor_against_the_run():
    """A restore re-trains the steps since the checkpoint: the group is starting until it passes the high-water
    mark, and the time between its re-done reports is not held against it (a long re-train is not a hang), while
    the time before its first report is (the start-up allowance)."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    _attempt(progress, now, 0, 50, group="a")
    progress.scheduling()
    progress.hello("b")
    progress.running()
    now[0] += 60                                  # schedule, restore, compile: 60 s of the 100 s allowance
    for step in range(0, 50):                     # 50 re-trained steps, 5 s each: 250 s
        progress.step(step, "b")
        now[0] += 5
        assert progress.status()["starting"] and verdict(progress.status(), LIMITS) is None
    assert 60 < progress.status()["age_s"] < 70
    progress.step(51, "b")
    assert not progress.status()["starting"] and progress.status()["age_s"] == 0


def test_an_eval_pass_run_again_is_not_progress():
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    _attempt(progress, now, 0, 20, group="a")                  # trains to 20, no eval yet
    progress.scheduling()
    progress.hello("b")
    progress.running()
    progress.step(20, "b")                                     # re-trained
    progress.eval_started("b")
    progress.eval_step(0, "b")                                 # a pass after step 20: never ran: progress
    assert progress.progressed and progress.status()["age_s"] == 0
    progress.left_running("RestartingState")
    progress.scheduling()
    progress.hello("c")
    progress.running()
    progress.step(20, "c")
    progress.eval_started("c")
    for count in range(5):
        now[0] += 5
        progress.eval_step(count, "c")                         # the same pass again: not progress
    assert not progress.progressed and progress.status()["starting"]
    progress.left_running("RestartingState")
    assert progress.status()["attempts_without_progress"] == 1


def test_watchdog_thread_exits_with_no_progress_and_keeps_going_on_unreadable_status(capsys):
    calls = iter([RuntimeError("actor restarting"), {"age_s": 5, "starting": False, "last_step": 1},
                  {"age_s": 5, "starting": False, "last_step": 1, "attempts_without_progress": 1},
                  {"age_s": 11, "starting": False, "last_step": 1}])

    def status():
        item = next(calls, None)
        if item is None:
            dog.stop()                     # nothing left to read: the verdict never came
            exited.set()
            raise RuntimeError("no more statuses")
        if isinstance(item, Exception):
            raise item
        return item

    exited = threading.Event()
    codes = []
    dog = watchdog.Watchdog(status, LIMITS, poll_s=0.01, exit=lambda code: (codes.append(code), exited.set()))
    dog.start()
    assert exited.wait(10)
    assert codes == [exit_codes.NO_PROGRESS] and "stalled" in dog.fired
    dog.join(10)                           # a Thread subclass must stay joinable (Thread keeps its own _stop)
    assert not dog.is_alive()
    assert "ending the run (no progress (watchdog))" in capsys.readouterr().err


def test_the_watchdog_thread_exits_with_exit_8_on_attempts_without_progress(capsys):
    exited = threading.Event()
    codes = []
    statuses = iter([{"age_s": 1, "starting": True, "last_step": 9, "waiting": True, "waited_s": 5,
                      "attempts_without_progress": 3, "endings": ["a preempted node"] * 3}])
    dog = watchdog.Watchdog(lambda: next(statuses), Limits(100, 10, attempts_without_progress=3), poll_s=0.01,
                            exit=lambda code: (codes.append(code), exited.set()))
    dog.start()
    assert exited.wait(10)
    dog.join(10)
    assert codes == [exit_codes.INTERRUPTED_WITHOUT_PROGRESS]
    assert "a preempted node x3" in capsys.readouterr().err


def _state(cls):
    """A Ray Train controller state object (ray/train/v2/_internal/execution/controller/state.py) without its
    constructor's arguments: the callback matches states by class."""
    return cls.__new__(cls)


def test_controller_callback_tells_of_schedulings_running_and_waits_once_each():
    """Ray Train calls after_controller_state_update every loop iteration, also with the same state
    (ray/train/v2/_internal/execution/controller/controller.py `_set_state`, called from `run`'s loop). States are
    Ray's classes: a class with the right name but not Ray's is not matched."""
    from ray.train.v2._internal.execution.controller.state import (
        InitializingState, PreemptingState, ReschedulingState, ResizingState, RestartingState, RunningState,
        SchedulingState)

    calls = []

    class Actor:
        def __getattr__(self, name):
            return type("Method", (), {"remote": staticmethod(lambda *args: calls.append((name, *args)))})

    callback = watchdog.controller_callback("r")
    original = watchdog.progress_actor
    watchdog.progress_actor = lambda run_name, create=False: Actor()
    step = lambda before, after: callback.after_controller_state_update(_state(before), _state(after))  # noqa
    try:
        step(InitializingState, InitializingState)
        step(InitializingState, InitializingState)
        step(InitializingState, SchedulingState)
        step(SchedulingState, RunningState)
        step(RunningState, RunningState)
        assert calls == [("waiting_for_capacity",), ("scheduling", None), ("scheduling_ended",), ("running",)]
        calls.clear()
        step(RunningState, PreemptingState)       # a preempting group still runs: it saves at the notice
        assert calls == []
        step(PreemptingState, RestartingState)
        step(RestartingState, SchedulingState)
        step(SchedulingState, ReschedulingState)  # the start timed out: still waiting, a new scheduling
        step(ReschedulingState, SchedulingState)
        step(SchedulingState, RunningState)
        step(RunningState, ResizingState)
        assert calls == [("left_running", "RestartingState"), ("waiting_for_capacity",), ("scheduling", None),
                         ("scheduling_ended",), ("scheduling", None), ("scheduling_ended",), ("running",),
                         ("left_running", "ResizingState"), ("waiting_for_capacity",)]
        calls.clear()
        from ray.train.v2._internal.execution.scaling_policy import ResizeDecision

        callback.after_controller_state_update(_state(ReschedulingState), SchedulingState(
            ResizeDecision(num_workers=4, resources_per_worker={"TPU": 4})))
        assert calls == [("scheduling", 4)]
        calls.clear()
        impostor = type("RunningState", (), {})
        callback.after_controller_state_update(_state(ResizingState), impostor())
        assert calls == []                        # matched by class, not by name
    finally:
        watchdog.progress_actor = original


DRIVER = textwrap.dedent("""
    import sys, time, ray
    from trainer import watchdog
    # On a loaded machine (seen at load 20) ray.init's node may miss Ray's fixed 30 s to register with its GCS
    # (ray/_private/node.py, raylet_start_wait_time_s): a retry is what fixes that.
    for attempt in range(5):
        try:
            # address="local": a cluster of its own. Without it ray.init joins the newest cluster on this machine
            # (/tmp/ray/ray_current_cluster), e.g. a local run the suite starts in the background, and refuses
            # num_cpus there ("When connecting to an existing cluster, num_cpus ... must not be provided").
            ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
            break
        except Exception as err:
            if "timed out during startup" not in str(err) or attempt == 4:
                raise
            ray.shutdown()
    steps_for_s = float(sys.argv[1])
    dog = watchdog.start("wd-test", watchdog.Limits(startup_s=float(sys.argv[2]), stall_s=3.0), poll_s=0.5)
    beat = watchdog.StepBeat("wd-test")          # what rank 0 does on a TPU host, here in the driver
    started, step = time.monotonic(), 0
    while time.monotonic() - started < steps_for_s:
        beat(step); step += 1; time.sleep(0.5)
    if len(sys.argv) > 3:
        dog.stop(); print("finished"); sys.exit(0)
    time.sleep(120)                               # a hung collective: no more steps
    print("never reached")
""")


def _driver(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DRIVER, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("steps_for_s, startup_s, reason", [
    ("0", "4", "within the start-up allowance of 4 s"),      # never a first step
    ("8", "600", "the group is stalled (limit 3 s"),          # steps, then none
])
def test_a_real_driver_ends_with_exit_7_and_the_reason(steps_for_s, startup_s, reason):
    done = _driver(steps_for_s, startup_s)
    assert done.returncode == exit_codes.NO_PROGRESS, done.stdout[-2000:] + done.stderr[-2000:]
    # The line is wrapped at 100 columns (core/cli_errors.fit_columns): read it joined.
    assert reason in " ".join(done.stderr.split()) and "never reached" not in done.stdout


def test_a_real_driver_that_keeps_stepping_is_left_alone():
    # 8 s of steps every 0.5 s against a 3 s stall limit, then a normal end.
    done = _driver("8", "600", "finish")
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-2000:]


def test_a_late_step_report_of_an_older_group_does_not_end_the_new_group_s_start_up():
    """Item 4 of issue 43. Rank 0 reports a step when MaxText writes its metrics, one step late, and a notice can
    take the group out of its running state before its first report: that group never reported, so nothing tied
    its id to it, and its late report ended the next group's start-up allowance (a 70B restart judged by the stall
    limit: exit 7). The attempt's identity now comes from the controller's schedulings: rank 0 says hello at its
    start, before MaxText, and a report of an older scheduling is never the current group's."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    _attempt(progress, now, 0, 52, group="first")
    progress.scheduling()
    progress.hello("old")                         # a group that gets its notice before its first report
    progress.running()
    progress.left_running("RestartingState")
    progress.scheduling()                         # the controller schedules the next group
    progress.hello("new")
    progress.running()
    progress.step(53, "old")                      # the old group's late report
    progress.step(52, "first")                    # and an even older one
    now[0] += 30
    assert progress.status()["starting"] and progress.status()["last_step"] == 52
    assert verdict(progress.status(), LIMITS) is None
    progress.step(53, "new")                      # the new group's first new step
    assert not progress.status()["starting"] and progress.status()["last_step"] == 53


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_the_save_first_wait_stays_below_the_stall_limit_on_every_preset(model):
    """Issue 43 item 10: the save-first resize waited 600 s, the stall floor, for the group's save, so the
    watchdog's exit 7 could win the race against the resize. The wait is derived below the limit: the request
    comes at most a step (at MIN_MFU) after the group's last report, then the wait and the margin; and it still
    leaves the group the step and the save it needs."""
    from trainer import resize

    chosen = plan(PlanRequest(model, "v6e", "8x8" if "70b" in model or "405b" in model else "4x4", slices=2,
                              memory_check=False))
    limits = watchdog.limits_for(chosen)
    wait = resize.save_timeout_s(limits.stall_s)
    step = step_seconds(chosen, MIN_MFU)
    assert step + wait + resize.SAVE_TIMEOUT_MARGIN_S <= limits.stall_s
    # A stall limit given short on the command line (the local life run's 25 s) still leaves the save time.
    assert resize.save_timeout_s(25.0) == 20.0
    assert wait >= step + save_estimate(chosen).seconds
    assert resize.DEFAULT_SAVE_TIMEOUT_S < watchdog.STALL_FLOOR_S
