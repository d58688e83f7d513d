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
    reason = verdict(status, LIMITS)
    assert (reason is None) if fires is None else (fires in reason)


def test_a_restart_does_not_reset_the_start_up_clock(monkeypatch):
    """Restarts that never train again (a failure that looks like a preemption, a start that keeps failing) are
    bounded by the allowance counted from the last step, not from each retry."""
    now = [1000.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    progress = watchdog.RunProgress()
    progress.step(7)
    now[0] += 30
    progress.restarting()
    now[0] += 60
    progress.restarting()
    assert progress.status() == {"age_s": 90, "starting": True, "last_step": 7, "compiling": False, "waiting": False}
    progress.step(8)
    assert progress.status() == {"age_s": 0, "starting": False, "last_step": 8, "compiling": False, "waiting": False}


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
    assert "stalled" in verdict(progress.status(), LIMITS)


def test_an_eval_compile_that_never_ends_still_ends_the_run():
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.step(20)
    progress.eval_started()
    now[0] += 101
    assert "eval pass did not compile" in verdict(progress.status(), LIMITS)


def test_a_wait_for_capacity_does_not_spend_the_start_up_allowance():
    """A Spot stockout longer than the allowance (an hour on TPU): the controller waits with no group scheduled.
    The clock stops while it waits and goes on, from where it stopped, once a group is scheduled; a group that is
    scheduled and never trains still ends the run."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.step(7)
    now[0] += 30
    progress.restarting()
    progress.waiting_for_capacity()
    now[0] += 3 * 3600
    assert progress.status()["age_s"] == 30 and verdict(progress.status(), LIMITS) is None
    progress.waiting_for_capacity()               # told again: the wait started when it first did
    progress.scheduled()
    assert progress.status()["age_s"] == 30
    now[0] += 69
    assert verdict(progress.status(), LIMITS) is None
    now[0] += 2                                   # 101 s of start-up with capacity, no step
    assert "start-up allowance" in verdict(progress.status(), LIMITS)
    progress.step(8)
    assert verdict(progress.status(), LIMITS) is None


def test_watchdog_thread_exits_with_no_progress_and_keeps_going_on_unreadable_status(capsys):
    calls = iter([RuntimeError("actor restarting"), {"age_s": 5, "starting": False, "last_step": 1},
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


def test_controller_callback_tells_of_restarts_waits_for_capacity_and_scheduling_once_each():
    """Ray Train calls after_controller_state_update every loop iteration, also with the same state
    (ray/train/v2/_internal/execution/controller/controller.py `_set_state`, called from `run`'s loop)."""
    calls = []

    class Actor:
        def __getattr__(self, name):
            return type("Method", (), {"remote": staticmethod(lambda: calls.append(name))})

    callback = watchdog.controller_callback("r")
    state = lambda name: type(name, (), {})()      # noqa: E731 - the controller's state classes, by name
    original = watchdog.progress_actor
    watchdog.progress_actor = lambda run_name, create=False: Actor()
    try:
        callback.after_controller_state_update(state("InitializingState"), state("InitializingState"))
        callback.after_controller_state_update(state("InitializingState"), state("InitializingState"))
        callback.after_controller_state_update(state("InitializingState"), state("SchedulingState"))
        callback.after_controller_state_update(state("SchedulingState"), state("RunningState"))
        callback.after_controller_state_update(state("RunningState"), state("RunningState"))
        assert calls == ["waiting_for_capacity", "scheduled"]
        calls.clear()
        for after in ("RestartingState", "PreemptingState", "ResizingState"):
            callback.after_controller_state_update(state("RunningState"), state(after))
        assert calls == ["restarting", "waiting_for_capacity", "restarting", "restarting"]
        calls.clear()
        callback.after_controller_state_update(state("PreemptingState"), state("ReschedulingState"))
        callback.after_controller_state_update(state("ReschedulingState"), state("ReschedulingState"))
        callback.after_controller_state_update(state("ReschedulingState"), state("SchedulingState"))
        assert calls == ["scheduled"]             # still waiting since the RestartingState above
    finally:
        watchdog.progress_actor = original


DRIVER = textwrap.dedent("""
    import sys, time, ray
    from trainer import watchdog
    for attempt in range(3):      # on a loaded machine ray.init's node may miss Ray's fixed 30 s to register
        try:
            ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
            break
        except Exception as err:
            if "timed out during startup" not in str(err) or attempt == 2:
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
    assert reason in done.stderr and "never reached" not in done.stdout


def test_a_real_driver_that_keeps_stepping_is_left_alone():
    # 8 s of steps every 0.5 s against a 3 s stall limit, then a normal end.
    done = _driver("8", "600", "finish")
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-2000:]


def test_a_late_step_report_of_a_group_that_left_its_running_state_does_not_end_its_start_up():
    """Rank 0 reports a step when MaxText writes its metrics, one step late, and a Spot notice takes the group
    out of its running state before rank 0 even sees it: the old group's last report comes after the controller
    said "restarting". Counted, it ended the start-up allowance and the stall limit ran during the restart (seen
    in the local elastic run with a 25 s stall limit: exit 7 while the group re-formed)."""
    now, clock = _fake_clock()
    progress = watchdog.RunProgress(clock)
    progress.step(52, "old")
    progress.restarting()                         # the notice: the controller leaves its running state
    progress.step(53, "old")                      # the old group's late report
    now[0] += 30
    assert progress.status()["starting"] and verdict(progress.status(), LIMITS) is None
    progress.step(55, "new")                      # the new group's first step
    assert not progress.status()["starting"] and progress.status()["last_step"] == 55
