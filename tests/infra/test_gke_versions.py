"""The cluster version: floors are checked against what GKE offers, never used as the version to create.

Sources:
- terraform-provider-google `google/services/container/resource_container_cluster.go`:
  `InitialClusterVersion: d.Get("min_master_version")` — the provider creates the cluster at exactly that version.
- terraform-google-kubernetes-engine#2177: GKE refuses a version it no longer offers ("Master version must be
  one of ... supported versions").
- GKE API `Cluster.initialClusterVersion`: "" picks the default version; the release notes list the per-channel
  "Default patch version for cluster creation" (https://cloud.google.com/kubernetes-engine/docs/release-notes).
"""
from __future__ import annotations

import pytest

from infra.config import build
from infra.gke_versions import OfferedVersions, check_offered
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, MINIMAL, REPO

CLUSTER = "gcp:container/cluster:Cluster"
OFFERED = OfferedVersions(
    default_cluster_version="1.35.5-gke.1163012",
    channel_defaults={"RAPID": "1.36.0-gke.3302004", "REGULAR": "1.35.5-gke.1163012", "STABLE": "1.33.5-gke.1956000"},
    valid_master_versions=["1.36.0-gke.3302004", "1.35.5-gke.1163012", "1.34.8-gke.1000000", "1.33.5-gke.1956000"])


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_no_committed_stack_creates_its_cluster_at_a_floor(stack):
    """The old code set min_master_version to the highest floor (e.g. prod 1.34.1-gke.1829001, an old patch)."""
    run = run_program(load_stack_config(stack, REPO), stack=stack)
    [cluster] = run.of_type(CLUSTER)
    assert cluster.inputs.get("minMasterVersion") is None


def test_a_version_the_user_sets_is_created_as_asked():
    run = run_program({**load_stack_config("prod", REPO), "gkeVersion": "1.35"}, stack="prod")
    [cluster] = run.of_type(CLUSTER)
    assert cluster.inputs["minMasterVersion"] == "1.35"


def test_a_channel_default_that_meets_every_floor_passes():
    config = build({**MINIMAL, "dcn": "true", "dranet": "true"})
    assert check_offered(config.cluster, "us-east5-b", OFFERED) == []


def test_a_channel_default_below_a_floor_is_refused_naming_the_channel_and_the_way_out():
    config = build({**MINIMAL, "dcn": "true", "dranet": "true", "releaseChannel": "STABLE"})
    [problem] = check_offered(config.cluster, "us-east5-b", OFFERED)
    assert "releaseChannel='STABLE' creates clusters at 1.33.5-gke.1956000" in problem
    assert "dranet=true needs 1.34.1-gke.1829001" in problem
    assert "use releaseChannel RAPID or REGULAR" in problem and "1.36.0-gke.3302004" in problem


def test_a_gke_version_that_is_not_offered_is_refused():
    config = build({**MINIMAL, "gkeVersion": "1.34.1-gke.1829001"})
    [problem] = check_offered(config.cluster, "us-east5-b", OFFERED)
    assert "gkeVersion='1.34.1-gke.1829001' is not offered in us-east5-b" in problem
    assert check_offered(build({**MINIMAL, "gkeVersion": "1.35"}).cluster, "us-east5-b", OFFERED) == []


def test_the_refusal_happens_before_anything_is_registered(monkeypatch):
    from preview import harness
    monkeypatch.setitem(harness.OFFERED_GKE_VERSIONS, "releaseChannelDefaultVersion",
                        {"REGULAR": "1.33.5-gke.1956000"})
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(Exception, match="releaseChannel='REGULAR' creates clusters at 1.33.5-gke.1956000"):
        run_program(load_stack_config("prod", REPO), stack="prod", monitor=monitor)
    assert [r.type for r in monitor.registrations if r.custom] == []
