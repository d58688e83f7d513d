"""A JobSet that never gets all its pods Ready is requeued a bounded number of times, then deactivated: a long
stock-out does not bill the slices that did come up again and again without end.

Kueue v0.19.2, the rules played:
- apis/config/v1beta2/configuration_types.go RequeuingStrategy: `backoffLimitCount` "defines the maximum number of
  re-queuing retries. Once the number is reached, the workload is deactivated (.spec.active=false). When it is
  null, the workloads will repeatedly and endless re-queueing"; each backoff is about base*2^(n-1) (+ jitter),
  base 60 s and at most backoffMaxSeconds 3600 s (defaults.go).
- pkg/controller/core/workload_controller.go: a PodsReady timeout evicts the workload and increments
  status.requeueState.count (`triggerDeactivation`, then pkg/workload/workload.go `UpdateRequeueState`), the
  recovery timeout after a restart too (`admittedNotReadyWorkload`, reason WaitForRecovery,
  waitForPodsReady.recoveryTimeout defaulting to `timeout`); the count is cleared only in the branch for a
  deactivated workload (`RequeueState = nil`), so setting spec.active back to true gives it a fresh count and
  nothing else does: it is the Workload's whole life.
- config/components/crd/bases/kueue.x-k8s.io_workloads.yaml (v1beta1 and v1beta2): `spec.active`, boolean,
  default true, "false: indicates that a workload should never be admitted and evicts running workloads".
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
    # Long enough for a stock-out of some hours, short enough to stop paying overnight.
    assert 4 * 3600 <= spent <= 12 * 3600


def kueue_life(timeouts_at: list[str], limit: int) -> tuple[bool, int]:
    """A Workload's life under Kueue's count: each entry a PodsReady timeout, "start" (the first wait) or
    "recovery" (after a restart), with any number of healthy days between them; ("deactivated", timeouts seen)."""
    count = 0
    for seen, _kind in enumerate(timeouts_at, start=1):
        if count + 1 > limit:                  # triggerDeactivation: count + 1 > backoffLimitCount
            return True, seen
        count += 1                             # UpdateRequeueState; nothing between timeouts clears it
    return False, len(timeouts_at)


def test_the_count_is_the_jobsets_whole_life_and_the_limit_covers_a_week_of_slow_recoveries():
    limit = rendered_requeuing("jobset")["backoffLimitCount"]
    # One slow recovery a day for a week (a Spot slice reclaimed whose capacity takes longer than the timeout):
    # the run keeps going.
    assert kueue_life(["start"] + ["recovery"] * 7, limit) == (False, 8)
    # Slow recoveries never stop it for good: the (limit + 1)-th over its whole life deactivates it.
    assert kueue_life(["recovery"] * (limit + 5), limit) == (True, limit + 1)
    # The earlier limit (6) stopped such a week at its 7th slow recovery.
    assert kueue_life(["start"] + ["recovery"] * 7, 6) == (True, 7)


def test_the_resume_command_sets_the_workloads_active_field_on_the_jobsets_workload():
    from workloads.jobset.exports import kueue_resume_command

    command = kueue_resume_command("tpu-training", "maxtext-train-abc12")
    assert command.startswith("kubectl patch -n tpu-training $(kubectl get workloads.kueue.x-k8s.io ")
    assert "-l kueue.x-k8s.io/job-uid=$(kubectl get jobset -n tpu-training maxtext-train-abc12 -o jsonpath=" \
        "'{.metadata.uid}')" in command
    assert command.endswith("""--type=merge -p '{"spec":{"active":true}}'""")


def test_the_player_is_endless_without_a_limit():
    deactivated, admissions, _ = kueue_requeues({"timestamp": "Eviction"}, ADMISSIONS_PLAYED)
    assert not deactivated and admissions == ADMISSIONS_PLAYED


def test_the_plan_says_what_the_requeues_cost_and_how_to_start_again():
    notes = " ".join(cost_summary([], build(load_stack_config("jobset", REPO))).notes)
    assert f"after {slice_wait.REQUEUE_LIMIT} requeues" in notes
    assert "deactivates" in notes and "relaunchCommand" in notes
    # What deactivates it over a long run, and the one command that resumes it.
    assert "whole life" in notes and f"{slice_wait.REQUEUE_LIMIT + 1}th slow recovery" in notes
    assert "kueueResumeCommand" in notes
