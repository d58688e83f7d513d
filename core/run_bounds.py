"""How long a Ray run may go without training, and how many attempts it may take without a new step (pure).

Used by the trainer (trainer/watchdog.py, trainer/failures.py) and shown by the offline plan (preview/assumptions.py).
The step time behind both is an estimate (core/run_time.py), not a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from core.interruptions import RESTART_START_S
from core.planner import Plan
from core.preemption import save_estimate
from core.run_time import EXPECTED_MFU, MIN_MFU, STARTUP_ALLOWANCE_S, step_seconds

STALL_STEPS = 10
# Ten minutes without a step is a hang on every preset: no healthy step or save of this project's models takes
# that long (core/preemption.py puts the largest save at minutes), while a stuck collective never returns.
STALL_FLOOR_S = 600.0
# Attempts in a row without progress a run may take, however cheap its restarts: a Spot slice can be reclaimed
# again while the group restarts, a few times in a bad hour, and that is a wait, not a loop.
MIN_ATTEMPTS_WITHOUT_PROGRESS = 3
# ... and however expensive: past ten, whatever keeps interrupting the run is not going away by itself.
MAX_ATTEMPTS_WITHOUT_PROGRESS = 10
# The chip time a run may lose to attempts that train nothing new before it ends and a human looks: an hour of the
# whole run's slices. A judgement (what a team running week-long Spot training would pay to ride out a bad spell),
# not a measurement.
NO_PROGRESS_BUDGET_S = 3600.0

@dataclass(frozen=True)
class Limits:
    startup_s: float     # a (re)started group's first step, counted from the last step (or the driver's start)
    stall_s: float       # between two steps of a running group
    # attempts in a row (worker groups the controller scheduled and ran) that train no step not trained before
    attempts_without_progress: int = MIN_ATTEMPTS_WITHOUT_PROGRESS
    # a wait for capacity (no group running: a reclaimed slice, an elastic run below its minimum); None: no bound
    capacity_wait_s: float | None = None

    def describe(self) -> str:
        wait = ("without bound" if self.capacity_wait_s is None else f"at most {self.capacity_wait_s:.0f} s")
        return (f"watchdog: first new step within {self.startup_s:.0f} s of a (re)start, then a step at least "
                f"every {self.stall_s:.0f} s; {self.attempts_without_progress} attempts in a row without a new "
                f"step end the run; a wait for capacity lasts {wait}")


def limits_for(plan: Plan, checkpoint_period: int | None = None, capacity_wait_s: float | None = None) -> Limits:
    """The watchdog's limits (trainer/watchdog.py): the start-up allowance the on-demand RayJob deadline also gives
    a start, and STALL_STEPS steps at MIN_MFU plus one checkpoint save between steps, at least STALL_FLOOR_S; the
    attempts without progress (attempts_without_progress) and the wait for capacity the config allows."""
    stall = STALL_STEPS * step_seconds(plan, MIN_MFU) + save_estimate(plan).seconds
    attempts = (attempts_without_progress(plan, checkpoint_period) if checkpoint_period is not None
                else MIN_ATTEMPTS_WITHOUT_PROGRESS)
    return Limits(startup_s=float(STARTUP_ALLOWANCE_S), stall_s=float(max(STALL_FLOOR_S, math.ceil(stall))),
                  attempts_without_progress=attempts, capacity_wait_s=capacity_wait_s)


def attempt_cost_seconds(plan: Plan, checkpoint_period: int) -> float:
    """What one attempt that trains nothing new costs at worst, in seconds of the whole run's slices: a restart
    (core/interruptions.RESTART_START_S: pods, install, JAX, compiled step, restore), a save at the notice
    (core/preemption.save_estimate), and the steps since the last checkpoint trained again, up to a whole
    checkpoint period at core/run_time.EXPECTED_MFU (when the notice came too late to save)."""
    return (RESTART_START_S + save_estimate(plan).seconds
            + max(checkpoint_period, 1) * step_seconds(plan, EXPECTED_MFU))


def attempts_without_progress(plan: Plan, checkpoint_period: int) -> int:
    """N: attempts in a row that train no step not trained before, after which the run ends (exit
    core/exit_codes.INTERRUPTED_WITHOUT_PROGRESS), whatever interrupted them.

    A reclaim, an eviction, a drained node or a node that died on SIGTERM is not a failure: alone, it is retried and
    never charged to the run's failure budget. But every attempt bills every slice the group holds while it
    restarts and trains again what it had trained, and a cause that comes back at every start (a host that fails
    on every start of a slice, an eviction loop, a deterministic fault that looks like a reclaim) would loop
    forever. N attempts cost at most N x attempt_cost_seconds of the run's slices; N is as many as fit in
    NO_PROGRESS_BUDGET_S (an hour of the run's chips), within MIN_ATTEMPTS_WITHOUT_PROGRESS (a few reclaims in a
    row are weather, not a loop) and MAX_ATTEMPTS_WITHOUT_PROGRESS. An attempt that trains one new step resets
    the count: a run that advances between interruptions is never ended by them."""
    fit = math.floor(NO_PROGRESS_BUDGET_S / attempt_cost_seconds(plan, checkpoint_period))
    return min(MAX_ATTEMPTS_WITHOUT_PROGRESS, max(MIN_ATTEMPTS_WITHOUT_PROGRESS, fit))
