"""How long a Ray run may go without training, and how many preemptions it may take, from its plan (pure).

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
# Preemptions every run may recover from, however short: a Spot slice can be reclaimed more than once in an hour.
MIN_PREEMPTIONS = 3


@dataclass(frozen=True)
class Limits:
    startup_s: float     # a (re)started group's first step, counted from the last step (or the driver's start)
    stall_s: float       # between two steps of a running group

    def describe(self) -> str:
        return (f"watchdog: first step within {self.startup_s:.0f} s of a (re)start, then a step at least every "
                f"{self.stall_s:.0f} s")


def limits_for(plan: Plan) -> Limits:
    """The watchdog's limits (trainer/watchdog.py): the start-up allowance the on-demand RayJob deadline also gives
    a start, and STALL_STEPS steps at MIN_MFU plus one checkpoint save between steps, at least STALL_FLOOR_S."""
    stall = STALL_STEPS * step_seconds(plan, MIN_MFU) + save_estimate(plan).seconds
    return Limits(startup_s=float(STARTUP_ALLOWANCE_S), stall_s=float(max(STALL_FLOOR_S, math.ceil(stall))))


def preemption_budget(plan: Plan, steps: int) -> int:
    """Preemptions Ray Train recovers from (FailureConfig.max_preemption_failures) before the run fails.

    Ray counts preemptions apart from other failures and, by default, without limit. But the kubelet marks a
    memory-pressure eviction like a preemption (Kubernetes docs, "Pod disruption conditions": DisruptionTarget)
    and Ray's `ray start` drains its node on any SIGTERM, so a host-memory overrun that comes back on every
    attempt would be retried forever. The bound: as many preemptions as could together cost what the whole run
    costs training. Each costs a save at the notice (core/preemption.save_estimate) and a restart
    (core/interruptions.RESTART_START_S); the run trains `steps` steps at core/run_time.EXPECTED_MFU. Past that
    the run has spent more chip time restarting than training, whatever the cause, and a human should look;
    never fewer than MIN_PREEMPTIONS. (Restarts that do not train again at all end sooner, at the watchdog's
    start-up allowance: trainer/watchdog.py.)"""
    training_s = steps * step_seconds(plan, EXPECTED_MFU)
    per_preemption_s = save_estimate(plan).seconds + RESTART_START_S
    return max(MIN_PREEMPTIONS, math.ceil(training_s / per_preemption_s))
