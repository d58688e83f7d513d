"""What an interruption costs, in TPU chip-minutes paid for without training (pure).

Three events, each priced as the chips of the whole run times the seconds they hold without making progress:
- a Spot preemption: the save at the notice (the pods hold their chips while they write), the restart, and the
  steps redone (none when the save fits the notice, else up to checkpointPeriod);
- a restart after a failure a retry may fix (a lost host, a runtime error): the restart and up to
  checkpointPeriod steps redone (the last periodic checkpoint; no notice, no save);
- a failed smoke test: the start-up up to the smoke verdict, once. The run ends there (the JobSet's FailJobSet
  rule, the RayJob's backoffLimit 0); without the failure policy a JobSet paid it maxRestarts + 1 times.

The restart is an assumption, not a measurement (no TPU here): RESTART_START_S for pods to be recreated on the
slice's nodes, the workers' lock installed (a cold install took 141-189 s on the development machine,
benchmarks/startup_bench.py; a restarted pod installs from the node's cache), JAX to join the hosts and the step to
load from the compile cache in the bucket, plus the checkpoint read back at the write rate core/preemption.py
assumes. Waiting for Spot capacity to return is not counted: nothing is billed for
VMs that do not exist, and slices that survive a JobSet restart scale away after GKE's idle delay.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.preemption import ShutdownBudget

RESTART_START_S = 300.0     # assumed: pods back on the nodes, lock installed, JAX joined, compiled step loaded
SMOKE_TEST_S = 60.0         # assumed: trainer/smoke.py's device count and cross-slice all-reduce, with JAX start


@dataclass(frozen=True)
class InterruptionCosts:
    chips: int
    preemption_s: float         # chips held without progress per Spot preemption
    restart_s: float            # per restart after a retryable failure
    smoke_failure_s: float | None   # per failed smoke test; None: the run has no smoke test
    spot: bool                  # only Spot capacity gets preemption notices

    def chip_minutes(self, seconds: float) -> float:
        return self.chips * seconds / 60

    def describe(self) -> list[str]:
        lines = [
            f"a Spot preemption costs up to ~{self.chip_minutes(self.preemption_s):,.0f} TPU chip-minutes "
            f"({self.preemption_s / 60:.1f} min x {self.chips} chips: save, restart, steps redone)",
            f"a restart after a failure costs up to ~{self.chip_minutes(self.restart_s):,.0f} TPU chip-minutes "
            f"({self.restart_s / 60:.1f} min x {self.chips} chips: restart, up to checkpointPeriod steps redone)",
        ]
        if self.smoke_failure_s is not None:
            lines.append(f"a failed smoke test costs ~{self.chip_minutes(self.smoke_failure_s):,.0f} TPU "
                         "chip-minutes, once (start-up to the verdict; the run then ends)")
        return lines if self.spot else lines[1:]

    def as_dict(self) -> dict[str, Any]:
        return {"chips": self.chips,
                "preemption_chip_minutes": round(self.chip_minutes(self.preemption_s), 1) if self.spot else None,
                "restart_chip_minutes": round(self.chip_minutes(self.restart_s), 1),
                "smoke_failure_chip_minutes": (round(self.chip_minutes(self.smoke_failure_s), 1)
                                               if self.smoke_failure_s is not None else None),
                "assumed_restart_start_seconds": RESTART_START_S, "assumed_smoke_test_seconds": SMOKE_TEST_S}


def interruption_costs(budget: ShutdownBudget, *, chips: int, smoke_test: bool) -> InterruptionCosts:
    """Costs for a run whose save and notice are `budget` (core/preemption.py), on `chips` chips in all."""
    plan_step_s = budget.save.step_s   # one step at core.run_time.EXPECTED_MFU, as the save estimate counts it
    restart = RESTART_START_S + budget.save.write_s
    save = min(budget.needed_s, budget.notice_s) if budget.spot and budget.sees_notice else 0.0
    return InterruptionCosts(
        chips=chips,
        preemption_s=save + restart + budget.steps_lost_per_preemption * plan_step_s,
        restart_s=restart + budget.checkpoint_period * plan_step_s,
        smoke_failure_s=RESTART_START_S + SMOKE_TEST_S if smoke_test else None,
        spot=budget.spot,
    )
