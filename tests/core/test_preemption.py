"""The save at a Spot notice (core/preemption.py) and the step time it waits on (core/run_time.py), held to the
sources they rest on."""
from __future__ import annotations

import re

import pytest

from core import preemption
from core.memory import DTYPE_BYTES
from core.planner import PlanRequest, plan
from core.preemption import (ALLOWED_NODE_SHUTDOWN_S, CRITICAL_PODS_S, EXTENDED_NODE_SHUTDOWN_S, GKE_CRITICAL_PODS_S,
                             GKE_NODE_SHUTDOWN_S, SAFETY, checkpoint_bytes, save_estimate, shutdown_budget,
                             writer_hosts)
from core.recipes import RECIPES
from core.run_time import step_flops_per_device
from tests.infra.discovery_schema import load_discovery

DEV = PlanRequest(model="qwen3-0.6b", generation="v6e", topology="2x4", slices=2, min_slices=1)
PROD = PlanRequest(model="llama3-8b", generation="v6e", topology="4x4", slices=2)
SEVENTY = PlanRequest(model="llama3-70b", generation="v6e", topology="4x8", slices=2)


def _kubelet_config_field(name: str) -> str:
    """The GKE API's own description of a NodeKubeletConfig field: container v1's discovery document as shipped
    in google-api-python-client (googleapiclient/discovery_cache/documents/container.v1.json)."""
    schema = load_discovery("googleapiclient", "container.v1.json")["schemas"]["NodeKubeletConfig"]
    return schema["properties"][name]["description"]


def test_node_budget_values_are_what_the_gke_api_accepts():
    """GKE API (container v1 NodeKubeletConfig): shutdownGracePeriodSeconds "only valid for Spot VMs. Allowed
    values: 0, 30, 120"; shutdownGracePeriodCriticalPodsSeconds "<= shutdown_grace_period_seconds ... Range:
    [0, 120]". GKE "About Spot VMs" (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms): 30 s by
    default, 15 s for regular pods then 15 s for critical pods, extendable to 120 s."""
    total = _kubelet_config_field("shutdownGracePeriodSeconds")
    allowed = tuple(int(v) for v in re.search(r"Allowed values: ([0-9, ]+)", total).group(1).split(","))
    assert "only valid for Spot VMs" in total
    assert ALLOWED_NODE_SHUTDOWN_S == allowed
    assert EXTENDED_NODE_SHUTDOWN_S in allowed and GKE_NODE_SHUTDOWN_S in allowed
    critical = _kubelet_config_field("shutdownGracePeriodCriticalPodsSeconds")
    low, high = (int(v) for v in re.search(r"Range: \[(\d+), (\d+)\]", critical).group(1, 2))
    assert low <= CRITICAL_PODS_S <= min(high, EXTENDED_NODE_SHUTDOWN_S)
    assert GKE_NODE_SHUTDOWN_S - GKE_CRITICAL_PODS_S == 15


def test_pulumi_gcp_node_pools_take_the_kubelet_shutdown_fields():
    """pulumi-gcp (installed, the provider the stack pins): NodePoolNodeConfigKubeletConfigArgs carries both
    fields under these names (the stack passes them as keywords)."""
    import inspect

    import pulumi_gcp as gcp
    parameters = inspect.signature(gcp.container.NodePoolNodeConfigKubeletConfigArgs).parameters
    assert {"shutdown_grace_period_seconds", "shutdown_grace_period_critical_pods_seconds"} <= set(parameters)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.preset)
def test_step_flops_match_what_the_recipes_measured(recipe):
    """MaxText's own count per step (tflops_per_device x seconds from the recipe's quoted log line,
    AI-Hypercomputer/tpu-recipes via core/recipes.py) against ours, for the recipe's own batch and sequence."""
    seconds = float(re.search(r"seconds: ([0-9.]+)", recipe.measurement.quote).group(1))
    measured = recipe.measurement.tflops_per_device * 1e12 * seconds
    settings = recipe.planned_settings
    planned = plan(PlanRequest(model=recipe.preset, generation=recipe.generation, topology=recipe.topology,
                               slices=recipe.slices, per_device_batch_size=float(settings["per_device_batch_size"]),
                               max_target_length=int(settings["max_target_length"]), memory_check=False))
    assert step_flops_per_device(planned) == pytest.approx(measured, rel=0.10)


def test_the_checkpoint_is_parameters_and_both_adam_moments_written_once():
    dev, seventy = plan(DEV), plan(SEVENTY)
    assert checkpoint_bytes(dev) == 3 * dev.model.param_count * DTYPE_BYTES["float32"]
    assert checkpoint_bytes(seventy) == 3 * seventy.model.param_count * DTYPE_BYTES["bfloat16"]
    # Data parallelism across slices: each slice holds a copy, one slice writes. FSDP across slices: every host
    # of the fewest slices holds a unique part.
    assert dev.dcn_axis == "data" and writer_hosts(dev) == dev.shape.hosts
    assert seventy.dcn_axis == "fsdp" and writer_hosts(seventy) == seventy.shape.hosts * seventy.min_slices


def test_dev_saves_within_gkes_default_notice_and_changes_no_node_setting():
    budget = shutdown_budget(plan(DEV), spot=True, sees_notice=True, checkpoint_period=50)
    assert budget.needed_s == pytest.approx(SAFETY * budget.save.seconds, abs=1)
    assert budget.needed_s <= 15 and budget.pod_grace_s == budget.needed_s
    assert budget.node_shutdown_s is None and budget.fits and budget.steps_lost_per_preemption == 0
    assert budget.warnings() == []


def test_a_save_longer_than_15_s_raises_the_spot_node_budget_to_120():
    budget = shutdown_budget(plan(PROD), spot=True, sees_notice=True, checkpoint_period=50)
    assert 15 < budget.needed_s <= 105
    assert (budget.node_shutdown_s, budget.node_critical_s) == (120, 15)
    assert budget.pod_grace_s == budget.needed_s and budget.notice_s == 105 and budget.fits


def test_where_the_node_budget_cannot_be_raised_the_plan_says_what_a_preemption_costs():
    budget = shutdown_budget(plan(PROD), spot=True, sees_notice=True, checkpoint_period=50,
                             extended_node_budget="gkeVersion=1.34 is too old")
    assert budget.node_shutdown_s is None and budget.pod_grace_s == 15 and not budget.fits
    assert budget.steps_lost_per_preemption == 50
    (warning,) = budget.warnings()
    assert "gkeVersion=1.34 is too old" in warning and "up to checkpointPeriod=50 steps" in warning


def test_a_save_no_notice_can_hold_is_given_the_most_the_node_allows_and_called_out(monkeypatch):
    monkeypatch.setattr(preemption, "ASSUMED_WRITE_BYTES_PER_S", 100_000_000)   # 10x slower writes
    budget = shutdown_budget(plan(SEVENTY), spot=True, sees_notice=True, checkpoint_period=100)
    assert budget.needed_s > 105
    assert budget.node_shutdown_s == 120 and budget.pod_grace_s == 105 and not budget.fits
    assert "regular pods get 105 s" in budget.warnings()[0]


def test_a_backend_that_cannot_hear_the_notice_keeps_every_default_and_says_so():
    budget = shutdown_budget(plan(DEV), spot=True, sees_notice=False, checkpoint_period=100)
    assert budget.pod_grace_s is None and budget.node_shutdown_s is None and not budget.fits
    assert "Pathways proxy" in budget.warnings()[0]


def test_off_spot_the_pods_get_the_save_for_drains_but_no_node_setting():
    budget = shutdown_budget(plan(PROD), spot=False, sees_notice=True, checkpoint_period=50)
    assert budget.pod_grace_s == budget.needed_s and budget.node_shutdown_s is None
    assert budget.fits and budget.warnings() == []


def test_save_estimate_adds_a_step_the_write_and_the_commit():
    planned = plan(PROD)
    save = save_estimate(planned)
    assert save.write_s == pytest.approx(checkpoint_bytes(planned) / writer_hosts(planned) / 1e9)
    assert save.seconds == pytest.approx(save.step_s + save.write_s + preemption.COMMIT_S)
