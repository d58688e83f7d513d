"""The Compute Engine TPU quotas each stack spends, by Cloud Quotas' names (infra/tpu_quota.py).

Sources: GKE "Ensure quota" (https://cloud.google.com/kubernetes-engine/docs/how-to/tpus#ensure-quota: Compute
Engine quota, per region, in chips, on-demand and preemptible apart); the Compute API's Quota.metric enum
(discovery revision 20261106) holds TPU_PODSLICE_V4, TPU_LITE_PODSLICE_V5, TPU_LITE_DEVICE_V5 and their PREEMPTIBLE_
forms only; the v6e guide names TPUS_PER_TPU_FAMILY (https://cloud.google.com/tpu/docs/v6e-intro); flex-start spends
preemptible quota, then standard (https://cloud.google.com/compute/docs/instances/provisioning-models); gcloud's
`--filter` `~` is a regular-expression match (https://cloud.google.com/sdk/gcloud/reference/topic/filters).
"""
from __future__ import annotations

import io
import re

import pytest

from core.tpu_catalog import CATALOG
from infra.tpu_quota import QUOTAS, quota_need
from infra.config import build
from preview.assumptions import assumptions
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO

# What `gcloud compute regions describe` can show (the Compute API's TPU quota metrics).
COMPUTE_API_TPU_METRICS = {"TPU_PODSLICE_V4", "TPU_LITE_PODSLICE_V5", "TPU_LITE_DEVICE_V5",
                           "PREEMPTIBLE_TPU_PODSLICE_V4", "PREEMPTIBLE_TPU_LITE_PODSLICE_V5",
                           "PREEMPTIBLE_TPU_LITE_DEVICE_V5"}


def test_every_generation_of_the_catalog_names_its_quotas():
    assert set(QUOTAS) == set(CATALOG)


@pytest.mark.parametrize("generation", ["v5p", "v6e", "tpu7x"])
def test_the_generations_the_compute_api_does_not_list_are_not_given_its_metric_names(generation):
    """The deploy guide grepped `gcloud compute regions describe`, which shows nothing for these."""
    for quota in (QUOTAS[generation].on_demand, QUOTAS[generation].preemptible):
        assert quota.published not in COMPUTE_API_TPU_METRICS
        assert quota.quota_id.upper().replace("-", "_") not in COMPUTE_API_TPU_METRICS


@pytest.mark.parametrize("generation", sorted(QUOTAS))
def test_the_listing_filter_finds_both_quotas_of_the_generation(generation):
    need = quota_need(generation, "us-east5", 16, "flex-start")
    command = need.list_command("my-project")
    assert command.startswith("gcloud beta quotas info list --service=compute.googleapis.com --project=my-project ")
    words = re.findall(r"quotaId~([^' ]+)", command)
    for quota in need.quotas:
        assert any(re.search(word, quota.quota_id) for word in words), (quota.quota_id, words)


@pytest.mark.parametrize("capacity, spent", [
    ("on-demand", ["on_demand"]), ("spot", ["preemptible"]), ("flex-start", ["preemptible", "on_demand"]),
    ("reservation", [])])
def test_the_capacity_decides_which_quota_is_spent(capacity, spent):
    need = quota_need("v6e", "us-east5", 32, capacity)
    assert list(need.quotas) == [getattr(QUOTAS["v6e"], name) for name in spent]
    assert ("32 chips" in need.request()) and (("us-east5" in need.request()) == bool(spent))


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_the_plan_names_the_quota_each_stack_spends_and_says_the_ids_are_assumed(stack):
    from preview.cli import render_text
    from preview.harness import run_program
    from preview.model import build_plan
    raw = load_stack_config(stack, REPO)
    config = build(raw)
    plan = build_plan(run_program(raw, stack=stack), config, stack, None)
    out = io.StringIO()
    render_text(plan, None, out)
    text = out.getvalue()
    need = quota_need(config.tpu.shape.generation.name, config.gcp.region, config.tpu.total_chips,
                      config.tpu.capacity.value)
    assert f"TPU quota to have: {config.tpu.total_chips} {need.generation} chips in {config.gcp.region}" in text
    assert all(quota.describe() in text for quota in need.quotas) and "quota ids assumed" in text
    assert any(line.startswith("TPU quota:") and "assumed" in line for line in assumptions(config))
    if need.generation == "v6e":
        # What the old guide's grep could not show.
        assert "V6E" in text or "TPUS-PER-TPU-FAMILY" in text
