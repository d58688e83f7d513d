"""The progress watchdog: a Ray run that holds its slices without training ends, with the reason and exit code 7.

On Spot and flex-start capacity the RayJob has no deadline (workloads/ray/deadline.py), and Ray Train waits
without limit for what it cannot get: a worker group whose start keeps failing or timing out is rescheduled
forever (ray/train/v2/api/config.py FailureConfig.controller_failure_limit, default -1; the failures are
WorkerGroupStartupFailedError/WorkerGroupStartupTimeoutError, RETRYABLE_CONTROLLER_ERRORS in
ray/train/v2/_internal/execution/failure_handling/default.py), a worker whose process cannot start at all keeps
the controller in its scheduling state with no error (seen on Ray 2.60: `ray.get` of the workers' metadata
waits), and a hung collective is a step that never ends. Each keeps every slice billing.

Two limits, both from the plan (core/run_bounds.py `limits_for`):
- start-up: from a (re)start of the worker group to its first step: core/run_time.STARTUP_ALLOWANCE_S, the
  allowance the on-demand RayJob deadline gives a run to come up (pools from zero, image and lock, smoke test,
  compile, restore). The clock runs from the last step, not from each retry: restarts that never train again
  (a failure that looks like a preemption, a start that keeps failing) end once the allowance is spent. Time the
  controller spends waiting for capacity (no group scheduled because too few slices are there: Ray Train's
  Initializing/Restarting/Rescheduling states) is not counted: a Spot stockout longer than the allowance is a
  wait, not a hang; the clock goes on once a group is scheduled. (That wait is not bounded here: what bills
  meanwhile is the head and any slice that came up; on KubeRay, Kueue's waitForPodsReady bounds a late slice.)
- stall: between two steps of a running group: STALL_STEPS steps at core/run_time.MIN_MFU (already 4-5 times
  slower than the tuned recipes) plus one checkpoint save (core/preemption.save_estimate), and never less than
  STALL_FLOOR_S, so a storage hiccup on a small model is not taken for a hang.
Eval is progress too: rank 0 reports the start of an eval pass and every eval step like a training step. An eval
pass's first step compiles the eval program (on every new group), so from an eval start to its first step the
start-up allowance, which covers a compile, applies instead of the stall limit.

How it sees progress: a small actor (`RunProgress`) on the driver's node, pinned there like the resize notice
(trainer/resize.py): rank 0 tells it of every step without waiting for an answer, and a controller callback
tells it when the group leaves its running state (a failure, a preemption, a resize), which starts the start-up
clock. The driver's `Watchdog` thread reads it; when a limit is passed it prints the reason and exits the
driver with core/exit_codes.NO_PROGRESS. The controller and the workers are owned by the driver and end with
it (Ray's ownership: non-detached actors die with their owner); on KubeRay the job then fails and
shutdownAfterJobFinishes deletes the cluster, freeing the slices.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from core import exit_codes
from core.run_bounds import STALL_FLOOR_S, STALL_STEPS, Limits, limits_for  # noqa: F401 - limits_for re-exported
from core.run_time import MIN_MFU
from trainer.head_actors import pinned_actor

POLL_S = 10.0


def verdict(status: dict, limits: Limits) -> str | None:
    """Why the run must end, or None. `status` is RunProgress.status(): seconds since the last progress (or the
    start, less any wait for capacity), whether the group is (re)starting or waiting for capacity, whether an eval
    pass is compiling, the last step."""
    age, last = status["age_s"], status.get("last_step")
    if status.get("waiting"):
        return None
    if status["starting"] or status.get("compiling"):
        if age > limits.startup_s:
            since = f"step {last}" if last is not None else "the driver started"
            what = ("the eval pass did not compile and take its first step" if status.get("compiling") and
                    not status["starting"] else "the worker group did not (re)start and train")
            return (f"no training step for {age:.0f} s since {since}: {what} within the start-up allowance of "
                    f"{limits.startup_s:.0f} s")
        return None
    if age > limits.stall_s:
        return (f"no training or eval step for {age:.0f} s after step {last}: the group is stalled (limit "
                f"{limits.stall_s:.0f} s = {STALL_STEPS} steps at {MIN_MFU:.0%} MFU plus a checkpoint save, at least "
                f"{STALL_FLOOR_S:.0f} s)")
    return None


class RunProgress:
    """What the watchdog knows (a Ray actor on the driver's node). Times are this process's monotonic clock."""

    def __init__(self, clock=None) -> None:
        self.clock = clock if clock is not None else (lambda: time.monotonic())
        self.since = self.clock()
        self.last_step: int | None = None
        self.starting = True
        self.compiling = False
        self.waiting_since: float | None = None
        # Worker groups (rank 0's attempt id) that have left their running state: a report of theirs that comes
        # after (rank 0 reports a step when it writes its metrics, one step late, also after a notice has already
        # taken the group out of its running state) is not progress of the group that replaces them.
        self.attempt: str | None = None
        self.retired: set[str] = set()

    def _current(self, attempt: str | None) -> bool:
        if attempt is not None and attempt in self.retired:
            return False
        self.attempt = attempt if attempt is not None else self.attempt
        return True

    def step(self, step: int, attempt: str | None = None) -> None:
        if self._current(attempt):
            self.since, self.last_step, self.starting, self.compiling = self.clock(), step, False, False

    def eval_started(self, attempt: str | None = None) -> None:
        """An eval pass begins: its first step compiles (module docstring)."""
        if self._current(attempt):
            self.since, self.compiling = self.clock(), True

    def eval_step(self, count: int, attempt: str | None = None) -> None:
        if self._current(attempt):
            self.since, self.compiling = self.clock(), False

    def restarting(self) -> None:
        # The start-up clock runs from the last step: a restart does not reset it.
        self.starting, self.compiling = True, False
        if self.attempt is not None:
            self.retired.add(self.attempt)

    def waiting_for_capacity(self) -> None:
        """No group is scheduled: too few slices. The start-up clock stops until one is."""
        self.starting, self.compiling = True, False
        if self.waiting_since is None:
            self.waiting_since = self.clock()

    def scheduled(self) -> None:
        """A group is being started: the start-up clock goes on from where the wait stopped it."""
        if self.waiting_since is not None:
            self.since += self.clock() - self.waiting_since
            self.waiting_since = None

    def status(self) -> dict:
        now = self.waiting_since if self.waiting_since is not None else self.clock()
        return {"age_s": now - self.since, "starting": self.starting, "last_step": self.last_step,
                "compiling": self.compiling, "waiting": self.waiting_since is not None}


def actor_name(run_name: str) -> str:
    return f"run-progress-{run_name}"


def progress_actor(run_name: str, create: bool = False):
    """Create (on this process's node, hard-pinned, restarted in place) or look up the run's RunProgress actor."""
    return pinned_actor(RunProgress, actor_name(run_name), create)


class StepBeat:
    """Rank 0's per-step report (`beat(step)`), and its eval reports (`eval_started()`, `eval_step(n)`). Never
    waits and never raises: a lost actor only blinds the watchdog's stall check until the next lookup, it must not
    fail a step."""

    def __init__(self, run_name: str, attempt: str | None = None) -> None:
        self.run_name, self.attempt = run_name, attempt
        self._actor = None

    def __call__(self, step: int) -> None:
        self._tell("step", step, self.attempt)

    def eval_started(self) -> None:
        self._tell("eval_started", self.attempt)

    def eval_step(self, count: int) -> None:
        self._tell("eval_step", count, self.attempt)

    def _tell(self, method: str, *args) -> None:
        from ray.exceptions import RayError

        try:
            if self._actor is None:
                self._actor = progress_actor(self.run_name)
            getattr(self._actor, method).remote(*args)
        except (ValueError, RayError):
            self._actor = None


# Ray Train 2.60 controller states (ray/train/v2/_internal/execution/controller/state.py) with no group scheduled,
# where the controller asks the scaling policy each iteration whether enough workers fit (controller.py
# `_make_and_handle_scaling_decision_for_non_running_worker_group`): a wait for capacity.
WAITING_STATES = ("InitializingState", "RestartingState", "ReschedulingState")


def controller_callback(run_name: str):
    """Tells RunProgress when the worker group leaves its running state, waits for capacity, or is scheduled
    (module docstring)."""
    from ray.train.v2._internal.execution.callback import ControllerCallback

    class ProgressStates(ControllerCallback):
        # The controller calls this hook every loop iteration, also when the state stays the same (controller.py
        # `_set_state`): tell the actor of changes only.
        def __init__(self) -> None:
            self._waiting = False

        def after_controller_state_update(self, previous_state, current_state) -> None:
            from ray.exceptions import RayError

            before, now = type(previous_state).__name__, type(current_state).__name__
            calls = []
            if before == "RunningState" and now != "RunningState":
                calls.append("restarting")
            if now in WAITING_STATES and not self._waiting:
                calls.append("waiting_for_capacity")
                self._waiting = True
            elif now == "SchedulingState" and self._waiting:
                calls.append("scheduled")
                self._waiting = False
            try:
                actor = progress_actor(run_name) if calls else None
                for call in calls:
                    getattr(actor, call).remote()
            except (ValueError, RayError):
                pass        # the watchdog then measures against the stall limit: it ends the run sooner

    return ProgressStates()


class Watchdog(threading.Thread):
    """The driver's thread: reads `status()` every `poll_s`; on a verdict prints it and exits the process."""

    def __init__(self, status, limits: Limits, poll_s: float = POLL_S, exit=os._exit) -> None:
        super().__init__(name="progress-watchdog", daemon=True)
        self.status, self.limits, self.poll_s, self._exit = status, limits, poll_s, exit
        self.fired: str | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            try:
                status = self.status()
            except Exception as err:     # an unreadable actor is no evidence of a hang
                print(f"trainer: watchdog could not read the run's progress ({type(err).__name__})", flush=True)
                continue
            reason = verdict(status, self.limits)
            if reason:
                self.fired = reason
                print(f"trainer: ending the run ({exit_codes.describe(exit_codes.NO_PROGRESS)}): {reason}",
                      file=sys.stderr, flush=True)
                sys.stdout.flush()
                self._exit(exit_codes.NO_PROGRESS)
                return

    def stop(self) -> None:
        self._stopping.set()


def start(run_name: str, limits: Limits, poll_s: float = POLL_S) -> Watchdog:
    """Create the run's RunProgress actor here (the driver's node) and start watching it."""
    import ray

    actor = progress_actor(run_name, create=True)
    watchdog = Watchdog(lambda: ray.get(actor.status.remote(), timeout=max(poll_s, 10.0)), limits, poll_s)
    watchdog.start()
    return watchdog
