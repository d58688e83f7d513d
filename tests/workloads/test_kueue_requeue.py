"""A JobSet that never gets all its pods Ready is requeued a bounded number of times, then deactivated: a long
stock-out does not bill the slices that did come up again and again without end.

Kueue v0.19.2, the rules played:
- apis/config/v1beta2/configuration_types.go RequeuingStrategy: `backoffLimitCount` "defines the maximum number of
  re-queuing retries. Once the number is reached, the workload is deactivated (.spec.active=false). When it is
  null, the workloads will repeatedly and endless re-queueing"; each backoff is about base*2^(n-1) (+ jitter),
  base 60 s and at most backoffMaxSeconds 3600 s (defaults.go).
- pkg/controller/core/workload_controller.go: a PodsReady timeout evicts the workload and increments
  status.requeueState.count; a deactivated workload is evicted, its requeueState cleared, so setting spec.active
  back to true gives it a fresh count.
"""
from __future__ import annotations

import yaml

from core import slice_wait
from infra.config import build
from preview.costs import cost_summary
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.controllers import kueue_values

# Far more admissions than any bounded limit: an unset limit never deactivates within them.
ADMISSIONS_PLAYED = 1000


def kueue_requeues(requeuing: dict, admissions: int) -> tuple[bool, int, int]:
    """A workload whose pods never all become Ready: (deactivated, admissions, seconds spent) after at most
    `admissions` admissions, under Kueue's requeuing rules with `requeuing` (requeuingStrategy)."""
    limit = requeuing.get("backoffLimitCount")
    timeout = slice_wait.PODS_READY_TIMEOUT_S
    base = requeuing.get("backoffBaseSeconds", 60)
    ceiling = requeuing.get("backoffMaxSeconds", 3600)
    count, spent = 0, 0
    for admission in range(1, admissions + 1):
        spent += timeout                                   # admitted, PodsReady timeout, evicted
        if limit is not None and count >= limit:
            return True, admission, spent                  # deactivated: nothing admitted again
        count += 1
        spent += min(base * 2 ** (count - 1), ceiling)     # backoff before the requeue
    return False, admissions, spent


def rendered_requeuing(stack: str) -> dict:
    config = build(load_stack_config(stack, REPO))
    kueue = yaml.safe_load(kueue_values(config)["managerConfig"]["controllerManagerConfigYaml"])
    return kueue["waitForPodsReady"]["requeuingStrategy"]


def test_a_workload_that_never_gets_ready_is_deactivated_after_the_limit():
    requeuing = rendered_requeuing("jobset")
    deactivated, admissions, spent = kueue_requeues(requeuing, ADMISSIONS_PLAYED)
    assert deactivated, "Kueue would requeue the JobSet without end (backoffLimitCount unset)"
    assert admissions == slice_wait.REQUEUE_LIMIT + 1
    # The horizon the plan states is the one Kueue plays (no jitter).
    assert spent == slice_wait.requeue_horizon_s()
    # Long enough for a stock-out of some hours, short enough to stop paying within a working day.
    assert 2 * 3600 <= spent <= 8 * 3600


def test_the_player_is_endless_without_a_limit():
    deactivated, admissions, _ = kueue_requeues({"timestamp": "Eviction"}, ADMISSIONS_PLAYED)
    assert not deactivated and admissions == ADMISSIONS_PLAYED


def test_the_plan_says_what_the_requeues_cost_and_how_to_start_again():
    notes = " ".join(cost_summary([], build(load_stack_config("jobset", REPO))).notes)
    assert f"after {slice_wait.REQUEUE_LIMIT} requeues" in notes
    assert "deactivates" in notes and "relaunchCommand" in notes
