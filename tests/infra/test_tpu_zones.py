"""Which zones the stack offers for each TPU generation.

Source: Cloud TPU "TPU regions and zones" (https://cloud.google.com/tpu/docs/regions-zones), the page GKE's "Plan
TPUs in GKE" (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus, "Validate TPU availability") points
to. Its current revision lists general zones only; an earlier one also listed "(single tenant)" zones, which a
general project's node pools do not get.
"""
from __future__ import annotations

import pytest

from infra.config import ConfigError, build, tpu_zones
from tests.conftest import MINIMAL

# The page's earlier revision: zones marked "(single tenant)" and not listed as general zones for that generation.
SINGLE_TENANT_ONLY = [("v6e", "us-east4-a"), ("v6e", "us-east4-b"), ("v6e", "us-east5-c"), ("v6e", "us-west1-c"),
                      ("v5p", "us-east5-b"), ("v5p", "us-south1-a"), ("v5e", "us-east5-a"), ("v5e", "us-east5-c")]


@pytest.mark.parametrize("generation,zone", SINGLE_TENANT_ONLY)
def test_single_tenant_only_zones_are_not_offered(generation, zone):
    assert zone not in tpu_zones.zones_offering(generation)


def test_a_single_tenant_zone_is_refused_naming_why_and_the_way_out():
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, "zone": "us-east4-a"})
    [problem] = error.value.problems
    assert problem.startswith("tpu-multislice:zone='us-east4-a' has the default tpu-multislice:tpuGeneration='v6e' "
                              "only as single-tenant capacity")
    assert "us-east5-b" in problem and "tpuZoneCheck=false" in problem
    # Whoever holds single-tenant capacity there can still use it, on their word.
    assert build({**MINIMAL, "zone": "us-east4-a", "tpuZoneCheck": "false"}).gcp.zone == "us-east4-a"


def test_general_zones_stay_offered():
    """us-west1-c is single-tenant for v6e but a general v5e zone; us-east5-a the reverse."""
    assert "us-west1-c" in tpu_zones.zones_offering("v5e")
    assert "us-east5-a" in tpu_zones.zones_offering("v6e") and "us-east5-a" in tpu_zones.zones_offering("v5p")
