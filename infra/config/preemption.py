"""The stack's shutdown budget: what its TPU pods and Spot node pools are given to save at a preemption notice
(core/preemption.py sizes it from the plan; here the config decides what applies).

- Only Spot pools get a notice to race, and only there may the node pool's kubelet budget be raised (the GKE
  API's NodeKubeletConfig: "This field is only valid for Spot VMs").
- Raising it needs GKE 1.35.0-gke.1171000 (infra/versions.py SPOT_SHUTDOWN_BUDGET): with gkeVersion unset it
  becomes one more version floor (checked against what the location offers before anything is created); a
  gkeVersion the user pinned below it is kept and the budget is not raised (the plan says what that costs).
  Autopilot has no node pools of ours to configure.
- On Pathways the train state lives behind the proxy, where MaxText cannot hear the notice (Orbax's preemption
  check always says "not preempted" there): nothing is raised, and the plan says a preemption falls back to the
  last periodic checkpoint.
"""
from __future__ import annotations

from typing import Any

from core.planner import Plan
from core.preemption import ShutdownBudget, shutdown_budget
from infra import versions
from infra.config.data_rules import eval_pass_steps
from infra.config.model import Capacity, ClusterMode
from infra.config.schema import NAMESPACE

FLOOR_REASON = "a 120 s Spot shutdown budget (kubelet shutdownGracePeriodSeconds)"


def _why_not_extended(v: dict[str, Any]) -> str | None:
    if v["clusterMode"] == ClusterMode.AUTOPILOT.value:
        return "Autopilot: GKE sets the nodes' shutdown budget"
    requested = v["gkeVersion"]
    if requested is not None and not versions.satisfies(requested, versions.SPOT_SHUTDOWN_BUDGET):
        return (f"{NAMESPACE}:gkeVersion={requested} is below {versions.SPOT_SHUTDOWN_BUDGET}, the first GKE that "
                "lets a Spot node pool raise it to 120 s")
    return None


def stack_shutdown_budget(v: dict[str, Any], plan: Plan, checkpoint_period: int,
                          floors: dict[str, str]) -> ShutdownBudget:
    """The budget, adding the GKE floor to `floors` when the node pools raise theirs."""
    budget = shutdown_budget(plan, spot=v["capacity"] == Capacity.SPOT.value,
                             sees_notice=v["workloadBackend"] != "pathways", checkpoint_period=checkpoint_period,
                             extended_node_budget=_why_not_extended(v), eval_steps=eval_pass_steps(v))
    if budget.node_shutdown_s is not None:
        floors[FLOOR_REASON] = versions.SPOT_SHUTDOWN_BUDGET
    return budget
