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
  (a failure that looks like a preemption, a start that keeps failing) end once the allowance is spent.
- stall: between two steps of a running group: STALL_STEPS steps at core/run_time.MIN_MFU (already 4-5 times
  slower than the tuned recipes) plus one checkpoint save (core/preemption.save_estimate), and never less than
  STALL_FLOOR_S, so a storage hiccup on a small model is not taken for a hang.

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
    """Why the run must end, or None. `status` is RunProgress.status(): seconds since the last step (or the start),
    whether the group is (re)starting, the last step."""
    age, last = status["age_s"], status.get("last_step")
    if status["starting"]:
        if age > limits.startup_s:
            since = f"step {last}" if last is not None else "the driver started"
            return (f"no training step for {age:.0f} s since {since}: the worker group did not (re)start and train "
                    f"within the start-up allowance of {limits.startup_s:.0f} s")
        return None
    if age > limits.stall_s:
        return (f"no training step for {age:.0f} s after step {last}: the group is stalled (limit "
                f"{limits.stall_s:.0f} s = {STALL_STEPS} steps at {MIN_MFU:.0%} MFU plus a checkpoint save, at least "
                f"{STALL_FLOOR_S:.0f} s)")
    return None


class RunProgress:
    """What the watchdog knows (a Ray actor on the driver's node). Times are this process's monotonic clock."""

    def __init__(self) -> None:
        self.since = time.monotonic()
        self.last_step: int | None = None
        self.starting = True

    def step(self, step: int) -> None:
        self.since, self.last_step, self.starting = time.monotonic(), step, False

    def restarting(self) -> None:
        # The start-up clock runs from the last step: a restart does not reset it.
        self.starting = True

    def status(self) -> dict:
        return {"age_s": time.monotonic() - self.since, "starting": self.starting, "last_step": self.last_step}


def actor_name(run_name: str) -> str:
    return f"run-progress-{run_name}"


def progress_actor(run_name: str, create: bool = False):
    """Create (on this process's node, hard-pinned, restarted in place) or look up the run's RunProgress actor."""
    return pinned_actor(RunProgress, actor_name(run_name), create)


class StepBeat:
    """Rank 0's per-step report. Never waits and never raises: a lost actor only blinds the watchdog's stall
    check until the next lookup, it must not fail a step."""

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name
        self._actor = None

    def __call__(self, step: int) -> None:
        from ray.exceptions import RayError

        try:
            if self._actor is None:
                self._actor = progress_actor(self.run_name)
            self._actor.step.remote(step)
        except (ValueError, RayError):
            self._actor = None


def controller_callback(run_name: str):
    """Tells RunProgress when the worker group leaves its running state (module docstring)."""
    from ray.train.v2._internal.execution.callback import ControllerCallback

    class ProgressStates(ControllerCallback):
        def after_controller_state_update(self, previous_state, current_state) -> None:
            from ray.exceptions import RayError

            running = ("RunningState",)
            if type(previous_state).__name__ in running and type(current_state).__name__ not in running:
                try:
                    progress_actor(run_name).restarting.remote()
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
