"""The offline plan says what the stack costs while it trains and while it idles, and when slices are released."""
from __future__ import annotations

import io
import json

import pytest

from infra.config import build
from preview import prices
from preview.cli import render_cost
from preview.harness import run_program
from preview.k8s.validation import default_schemas_dir
from preview.model import build_plan
from preview.stack_files import load_stack_config
from workloads.backends import backend_for
from tests.conftest import COMMITTED_STACKS, MINIMAL, REPO, committed_stack_run


def plan_of(raw: dict, stack: str, run=None):
    return build_plan(run or run_program(raw, stack=stack), build(raw), stack, default_schemas_dir())


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_no_committed_stack_pays_for_a_tpu_while_idle(stack):
    """Every committed stack's slice pools scale to zero when no job runs: idle, only the CPU pool and GKE's
    fee bill; training, every slice's chips at the stack's capacity price."""
    raw = load_stack_config(stack, REPO)
    plan = plan_of(raw, stack, committed_stack_run(stack))
    cost = plan.cost
    assert cost.tpu_idle_usd_per_hour == 0 and cost.warm_chips == 0
    assert cost.idle_usd_per_hour == round(cost.system_usd_per_hour + cost.gke_fee_usd_per_hour, 2)
    assert cost.tpu_training_usd_per_hour == plan.tpu.estimate.on_demand_usd_per_hour or (
        raw.get("capacity") == "spot" and cost.tpu_training_usd_per_hour == plan.tpu.estimate.spot_usd_per_hour)
    assert cost.training_usd_per_hour > cost.idle_usd_per_hour
    document = json.loads(json.dumps(plan.as_dict()))
    assert document["cost"]["per_hour"]["tpu_idle_usd"] == 0
    assert document["cost"]["slices_released"] == cost.released
    text = io.StringIO()
    render_cost(cost, text)
    lines = text.getvalue().splitlines()
    assert any(line.startswith("  cost while idle: ") for line in lines)
    assert any(line.startswith("  slices released when ") for line in lines)
    assert max(len(line) for line in lines) <= 100
    # When, on its own line (whole, with any "(...; ...)" of the backend's), and what GKE does after, on the next.
    [released] = [line for line in lines if line.startswith("  slices released ")]
    assert released == "  slices released " + backend_for(build(raw)).slices_released
    after = lines[lines.index(released) + 1]
    assert after.startswith("    ") and ("GKE removes the slice nodes" in after or "Autopilot" in after)


def test_prod_costs_what_its_32_on_demand_v6e_chips_and_system_pool_cost():
    plan = plan_of(load_stack_config("prod", REPO), "prod", committed_stack_run("prod"))
    assert plan.cost.tpu_training_usd_per_hour == round(32 * prices.PRICES["v6e"].on_demand_usd, 2)
    assert plan.cost.system_usd_per_hour == 0.54      # one e2-standard-16
    assert "RayJob ends" in plan.cost.released


def test_warm_slices_are_what_an_idle_stack_pays_for():
    raw = {**MINIMAL, "capacity": "spot", "warmSlices": 1}
    plan = plan_of(raw, "warm")
    # One warm v6e 4x4 slice: 16 chips at the (assumed) Spot price, around the clock.
    assert plan.cost.warm_chips == 16
    assert plan.cost.tpu_idle_usd_per_hour == round(16 * prices.PRICES["v6e"].spot_usd, 2)
    assert "1 warm slice(s) stay" in plan.cost.released


def test_autopilot_has_no_tpu_pool_to_keep_and_says_what_it_cannot_price():
    raw = {**MINIMAL, "clusterMode": "autopilot"}
    cost = plan_of(raw, "ap").cost
    assert cost.tpu_idle_usd_per_hour == 0 and cost.system_usd_per_hour is None and cost.idle_usd_per_hour is None
    assert any("Autopilot bills" in note for note in cost.notes)
