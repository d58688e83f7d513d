"""The progress watchdog: a Ray run ends when it stops making progress, with the reason and its exit code.

Progress is one thing: a training step the run has not trained before (above the high-water mark of the steps
any group reported), or a step of an eval pass that has not run before. A step trained again after a restore is
not progress, nor is an eval pass run again; the time such reports take is not held against the run either (the
clock pauses between them), so a long re-train after a restore is judged neither way. Everything else is waiting
or a hang.

On Spot and flex-start capacity the RayJob has no deadline (workloads/ray/deadline.py), and Ray Train waits
without limit for what it cannot get: a worker group whose start keeps failing or timing out is rescheduled
forever (ray/train/v2/api/config.py FailureConfig.controller_failure_limit, default -1; the failures are
WorkerGroupStartupFailedError/WorkerGroupStartupTimeoutError, RETRYABLE_CONTROLLER_ERRORS in
ray/train/v2/_internal/execution/failure_handling/default.py), a worker whose process cannot start at all keeps
the controller in its scheduling state with no error (seen on Ray 2.60), and a hung collective is a step that
never ends. Each keeps every slice billing. Four limits, all shown in the plan (core/run_bounds.py `limits_for`):
- attempts without progress: a worker group the controller scheduled and ran that left its running state
  (an interruption, a failure, a resize) without one new step is an attempt without progress, and so is one
  that lost a host while it started (the failure policy's interruption during the scheduling); N in a row of one
  group size (core/run_bounds.attempts_without_progress) end the run with exit 8 (INTERRUPTED_WITHOUT_PROGRESS),
  one line naming what kept ending them. Counted per size so that an elastic run whose optional slice fails at
  every start ends too, although its minimum trains between the failures (Ray's elastic policy grows into the
  broken slice again each time). Interruptions are never charged to Ray's failure budget (trainer/
  elastic_control.py), so this is what bounds their loops.
- a wait for capacity: no group running (the controller between a group's end and the next group's running
  state: Restarting, Rescheduling, a scheduling that waits for a slice; a fixed run waiting for a reclaimed slice,
  an elastic run below its minimum). Not a stall: the start-up clock stops while it lasts. It ends at
  `capacity_wait_s` (config tpu-multislice:capacityWaitSeconds), exit 7, with its own line: a wait is the
  watchdog's verdict on slices held (the head, the slices that did arrive) without training, like the others,
  and retrying it in a new RayJob would wait again. One scheduling that lasts longer than the start-up allowance
  is no wait: Ray Train times a start out after 60 s and reschedules (ray/train/v2/_internal/constants.py
  DEFAULT_WORKER_GROUP_START_TIMEOUT_S), so a start that never ends nor times out is a worker that cannot start
  (exit 7 at the allowance).
- start-up: from a (re)start of the worker group to its first new step: core/run_time.STARTUP_ALLOWANCE_S (pools
  from zero, image and lock, smoke test, compile, restore). The clock runs from the last progress, less waits
  for capacity and re-done reports, not from each retry.
- stall: between two steps of a running group: STALL_STEPS steps at core/run_time.MIN_MFU plus one checkpoint
  save (core/preemption.save_estimate), and never less than STALL_FLOOR_S. An eval pass's start has the start-up
  allowance until its first step.

An attempt's identity comes from the controller, never from the order of reports: each SchedulingState the
controller callback sees starts a new generation, and rank 0 of the group it starts says hello with its own
attempt id at once, which binds that id to the generation. A report of an older generation (MaxText writes a
step's metrics one step late, also after a notice took the group out of its running state) is not progress of
the group that replaced it.

How it sees progress: a small actor (`RunProgress`) on the driver's node, pinned there like the resize notice
(trainer/resize.py): rank 0 tells it of every step without waiting for an answer, the controller callback tells
it of schedulings and of the group entering and leaving its running state, and the failure policy of each
interruption's kind. The driver's `Watchdog` thread reads it; when a limit is passed it prints the reason and
exits the driver with the verdict's code. The controller and the workers are owned by the driver and end with
it (Ray's ownership: non-detached actors die with their owner); on KubeRay the job then fails and
shutdownAfterJobFinishes deletes the cluster, freeing the slices.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from core import exit_codes
from core.cli_errors import fit_columns
from core.run_bounds import STALL_FLOOR_S, STALL_STEPS, Limits, limits_for  # noqa: F401 - limits_for re-exported
from core.run_time import MIN_MFU
from trainer.head_actors import pinned_actor

POLL_S = 10.0


def verdict(status: dict, limits: Limits) -> tuple[int, str] | None:
    """Why the run must end and its exit code, or None. `status` is RunProgress.status()."""
    age, last = status["age_s"], status.get("last_step")
    after = f"step {last}" if last is not None else "the driver's start"
    streak = status.get("attempts_without_progress", 0)
    if streak >= limits.attempts_without_progress:
        size = status.get("group_workers")
        of = f" of the {size}-worker group" if size is not None else ""
        return (exit_codes.INTERRUPTED_WITHOUT_PROGRESS,
                f"{streak} attempts{of} in a row trained no step after {after} (limit "
                f"{limits.attempts_without_progress}, core/run_bounds.py): each ended by {_what(status)}")
    if status.get("waiting"):
        waited = status.get("waited_s", 0.0)
        stuck = status.get("scheduling_s", 0.0)
        if stuck > limits.startup_s:
            return (exit_codes.NO_PROGRESS,
                    f"one start of the worker group has lasted {stuck:.0f} s, beyond the start-up allowance of "
                    f"{limits.startup_s:.0f} s, with no timeout and no error: its workers cannot start")
        if limits.capacity_wait_s is not None and waited > limits.capacity_wait_s:
            return (exit_codes.NO_PROGRESS,
                    f"waited {waited:.0f} s for capacity after {after} with no worker group running (bound "
                    f"{limits.capacity_wait_s:.0f} s, capacityWaitSeconds); the head and the slices that did "
                    "arrive billed meanwhile")
        return None
    if status["starting"] or status.get("compiling"):
        if age > limits.startup_s:
            what = ("the eval pass did not compile and take its first step" if status.get("compiling") and
                    not status["starting"] else "the worker group did not (re)start and train a new step")
            return (exit_codes.NO_PROGRESS,
                    f"no new training step for {age:.0f} s since {after}: {what} within the start-up allowance "
                    f"of {limits.startup_s:.0f} s")
        return None
    if age > limits.stall_s:
        return (exit_codes.NO_PROGRESS,
                f"no training or eval step for {age:.0f} s after step {last}: the group is stalled (limit "
                f"{limits.stall_s:.0f} s = {STALL_STEPS} steps at {MIN_MFU:.0%} MFU plus a checkpoint save, at "
                f"least {STALL_FLOOR_S:.0f} s)")
    return None


def _what(status: dict) -> str:
    kinds = status.get("endings") or []
    counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
    return ", ".join(f"{kind} x{count}" for kind, count in counts.items()) or "an unknown cause"


class RunProgress:
    """What the watchdog knows (a Ray actor on the driver's node). Times are this process's monotonic clock."""

    def __init__(self, clock=None) -> None:
        self.clock = clock if clock is not None else (lambda: time.monotonic())
        self.since = self.clock()           # the last progress, moved on by waits and by re-done reports
        self.high_water: int | None = None  # the newest step any group trained
        self.eval_high: int | None = None   # the step after which the newest eval pass ran
        self.starting = True
        self.compiling = False
        self.waiting_since: float | None = None
        # Attempt identity: the controller's schedulings (module docstring).
        self.generation = 0
        self.groups: dict[str, int] = {}
        self.group_last: int | None = None  # the current group's newest reported step
        self.tick: float | None = None      # the current group's last report
        self.eval_new = False               # the current eval pass has not run before
        self.progressed = False             # the running group trained something new
        self.size: int | None = None        # the running group's workers (the controller's scheduling decision)
        # per group size: attempts in a row without progress, and what ended each of them
        self.streaks: dict[int | None, int] = {}
        self.endings: dict[int | None, list[str]] = {}
        self.pending_kind: str | None = None
        self.scheduling_since: float | None = None   # the current SchedulingState's start, while it lasts

    # -- the controller: its callback and its failure policy
    def scheduling(self, workers: int | None = None) -> None:
        """A SchedulingState: a new group of `workers` is being started; every older group's reports are stale."""
        self.generation += 1
        self.group_last, self.tick, self.eval_new, self.progressed = None, None, False, False
        self.size = workers
        self.scheduling_since = self.clock()

    def scheduling_ended(self) -> None:
        """The controller left its SchedulingState (for its running state, or to reschedule). When the failure
        policy told of an interruption meanwhile, a host of the group was lost while the group started (its
        launch: trainer/elastic_control.py `_lost_while_starting`): an attempt without progress like one lost in
        its first step, or a host that dies at every start would loop uncounted. A start that timed out is no
        interruption: a wait for capacity."""
        self.scheduling_since = None
        if self.pending_kind is not None:
            self._ended(self.pending_kind)

    def running(self) -> None:
        """The group reached its running state: a wait for capacity, if any, is over; the start-up clock goes on
        from where the wait stopped it."""
        if self.waiting_since is not None:
            self.since += self.clock() - self.waiting_since
            self.waiting_since = None
        self.scheduling_since = None

    def interrupted(self, kind: str) -> None:
        """The failure policy retried an interruption (trainer/elastic_control.py): the kind of the next end."""
        self.pending_kind = kind

    def left_running(self, state: str) -> None:
        """The running group left its running state (`state`: the controller's next state): the attempt ends."""
        self.starting, self.compiling = True, False
        self._ended(self.pending_kind or _STATE_ENDINGS.get(state, f"the controller's {state}"))

    def _ended(self, kind: str) -> None:
        """The current attempt ended by `kind`: its group size's count goes back to 0 if it progressed, else on."""
        self.pending_kind = None
        if self.progressed:
            self.streaks[self.size], self.endings[self.size] = 0, []
        else:
            self.streaks[self.size] = self.streaks.get(self.size, 0) + 1
            self.endings.setdefault(self.size, []).append(kind)
        self.progressed = False

    def waiting_for_capacity(self) -> None:
        """No group is running: the start-up clock stops until one is."""
        self.starting, self.compiling = True, False
        if self.waiting_since is None:
            self.waiting_since = self.clock()

    # -- rank 0 of the group
    def hello(self, attempt: str) -> None:
        """Rank 0 of a newly started group: its attempt id belongs to the newest scheduling."""
        self.groups[attempt] = self.generation

    def _current(self, attempt: str | None) -> bool:
        if attempt is None:
            return True
        return self.groups.setdefault(attempt, self.generation) == self.generation

    def _pause(self, now: float) -> None:
        # A re-done report: the time since the group's previous report is not held against the run.
        if self.tick is not None:
            self.since += now - self.tick
        self.tick = now

    def step(self, step: int, attempt: str | None = None) -> None:
        if not self._current(attempt):
            return
        now = self.clock()
        self.group_last, self.compiling = step, False
        if self.high_water is None or step > self.high_water:
            self.high_water, self.since, self.tick = step, now, now
            self.starting, self.progressed = False, True
        else:
            self._pause(now)

    def eval_started(self, attempt: str | None = None) -> None:
        """An eval pass begins after the group's last step: new if no pass ran after that step before."""
        if not self._current(attempt):
            return
        now = self.clock()
        key = self.group_last
        self.eval_new = key is not None and (self.eval_high is None or key > self.eval_high)
        self.compiling = True
        if self.eval_new:
            self.since, self.tick = now, now
        else:
            self._pause(now)

    def eval_step(self, count: int, attempt: str | None = None) -> None:
        if not self._current(attempt):
            return
        now = self.clock()
        self.compiling = False
        if self.eval_new:
            self.eval_high, self.since, self.tick, self.progressed = self.group_last, now, now, True
        else:
            self._pause(now)

    def status(self) -> dict:
        now = self.clock()
        worst = max(self.streaks, key=lambda size: self.streaks[size], default=None)
        frozen = self.waiting_since if self.waiting_since is not None else now
        return {"age_s": frozen - self.since, "starting": self.starting, "last_step": self.high_water,
                "compiling": self.compiling, "waiting": self.waiting_since is not None,
                "waited_s": now - self.waiting_since if self.waiting_since is not None else 0.0,
                "attempts_without_progress": self.streaks.get(worst, 0), "group_workers": worst,
                "scheduling_s": now - self.scheduling_since if self.scheduling_since is not None else 0.0,
                "endings": list(self.endings.get(worst, []))}


# What a left running state says when the failure policy named no interruption (controller/state.py).
_STATE_ENDINGS = {"ResizingState": "a resize", "RestartingState": "a failure",
                  "ReschedulingState": "a failure", "PreemptingState": "a preemption"}


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

    def hello(self) -> None:
        """At the group's start, before MaxText: binds this attempt to the controller's newest scheduling."""
        if self.attempt is not None:
            self._tell("hello", self.attempt)

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


def _states():
    """Ray Train 2.60's controller state classes (ray/train/v2/_internal/execution/controller/state.py), matched by
    class: a renamed or moved class fails the import at start-up (trainer/elastic_control.py check_seam) instead of
    silently never matching."""
    from ray.train.v2._internal.execution.controller.state import (PreemptingState, RunningState,
                                                                   SchedulingState)

    return (RunningState, PreemptingState), SchedulingState


def controller_callback(run_name: str):
    """Tells RunProgress of each scheduling, of the group reaching and leaving its running state (a preempting
    group still runs: it commits its checkpoint at the notice, controller.py `_handle_preempting_state`), and of
    waits for capacity (module docstring)."""
    from ray.train.v2._internal.execution.callback import ControllerCallback

    running_states, scheduling_state = _states()

    class ProgressStates(ControllerCallback):
        # The controller calls this hook every loop iteration, also when the state stays the same (controller.py
        # `_set_state`): tell the actor of changes only.
        def __init__(self) -> None:
            self._waiting = False

        def after_controller_state_update(self, previous_state, current_state) -> None:
            from ray.exceptions import RayError

            was, now = isinstance(previous_state, running_states), isinstance(current_state, running_states)
            calls: list[tuple] = []
            if isinstance(current_state, scheduling_state) and not isinstance(previous_state, scheduling_state):
                decision = getattr(current_state, "scaling_decision", None)
                calls.append(("scheduling", getattr(decision, "num_workers", None)))
            elif isinstance(previous_state, scheduling_state) and not isinstance(current_state, scheduling_state):
                calls.append(("scheduling_ended",))
            if was and not now:
                calls.append(("left_running", type(current_state).__name__))
            if not now and not self._waiting:
                calls.append(("waiting_for_capacity",))
                self._waiting = True
            elif now and self._waiting:
                calls.append(("running",))
                self._waiting = False
            try:
                actor = progress_actor(run_name) if calls else None
                for name, *args in calls:
                    getattr(actor, name).remote(*args)
            except (ValueError, RayError):
                pass        # the watchdog then measures against the stall limit: it ends the run sooner

    return ProgressStates()


def tell_interruption(run_name: str, kind: str) -> None:
    """The failure policy's word on what ended the running group (RunProgress.interrupted); never raises."""
    from ray.exceptions import RayError

    try:
        progress_actor(run_name).interrupted.remote(kind)
    except (ValueError, RayError):
        pass


class Watchdog(threading.Thread):
    """The driver's thread: reads `status()` every `poll_s`; on a verdict prints it and exits with its code."""

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
            found = verdict(status, self.limits)
            if found:
                code, self.fired = found
                print(fit_columns(f"trainer: ending the run ({exit_codes.describe(code)}): {self.fired}"),
                      file=sys.stderr, flush=True)
                sys.stdout.flush()
                self._exit(code)
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
