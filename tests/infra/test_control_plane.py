"""How the control plane is reached, and what keeps GKE from recreating a slice mid-run.

Sources:
- CIS GKE Benchmark 5.6.3 "Ensure Control Plane Authorized Networks is Enabled" and 5.6.4 "Ensure clusters are
  created with Private Endpoint Enabled and Public Access Disabled"; cluster-toolkit's gke-cluster module always
  sets master_authorized_networks_config.
- GKE DNS-based control-plane endpoint (GKE "About network isolation"; `gcloud container clusters get-credentials
  --dns-endpoint`): `control_plane_endpoints_config.dns_endpoint_config.allow_external_traffic`, requests authorised
  by IAM (container.clusters.connect), a publicly trusted certificate (no CA data in the kubeconfig).
- GKE "Maintenance windows and exclusions"
  (https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions): scope
  NO_MINOR_OR_NODE_UPGRADES blocks node upgrades and minor upgrades, lets control-plane patches through, needs a
  release channel, and may last until the minor version's end of support (end_time_behavior UNTIL_END_OF_SUPPORT;
  terraform-provider-google resource_container_cluster.go; a window is required: ExactlyOneOf).
"""
from __future__ import annotations

import json

import pytest

from infra.config import ConfigError, build
from preview.harness import run_program
from tests.conftest import MINIMAL, committed_stack_run

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"


@pytest.mark.parametrize("stack", ["prod", "dev", "jobset", "pathways"])
def test_no_public_ip_endpoint_by_default_and_the_dns_endpoint_serves_pulumi_and_kubectl(stack):
    run = committed_stack_run(stack)
    cluster = run.one(CLUSTER).inputs
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": True}
    assert cluster["masterAuthorizedNetworksConfig"].get("cidrBlocks", []) == []
    assert cluster["controlPlaneEndpointsConfig"]["dnsEndpointConfig"]["allowExternalTraffic"] is True
    # The stack's own Kubernetes provider and the exported kubeconfig use the DNS endpoint with a Google token.
    kubeconfig = json.loads(run.outputs["kubeconfig"])
    [entry] = kubeconfig["clusters"]
    assert entry["cluster"]["server"] == f"https://{run.outputs['endpoint']}"
    assert run.outputs["endpoint"].endswith(".gke.goog")
    assert "certificate-authority-data" not in entry["cluster"]
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert run.outputs["getCredentialsCommand"].endswith(" --dns-endpoint")
    provider = next(r for r in run.resources if r.type == "pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"]["value"] == run.outputs["kubeconfig"]   # a secret


def test_authorized_networks_open_the_public_ip_endpoint_to_those_ranges_only():
    run = run_program({**MINIMAL, "controlPlaneAuthorizedNetworks": ["203.0.113.0/24"]}, stack="man")
    cluster = run.one(CLUSTER).inputs
    assert cluster["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"] == [
        {"cidrBlock": "203.0.113.0/24", "displayName": "controlPlaneAuthorizedNetworks[0]"}]


@pytest.mark.parametrize("cidr,words", [("0.0.0.0/0", "narrower than every address"),
                                        ("203.0.113.7", "explicit prefix"), ("203.0.113.1/24", "explicit prefix")])
def test_bad_authorized_networks_are_refused_in_one_line(cidr, words):
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, "controlPlaneAuthorizedNetworks": json.dumps([cidr])})
    [problem] = error.value.problems
    assert problem.startswith(f"tpu-multislice:controlPlaneAuthorizedNetworks[0]={cidr!r}") and words in problem


@pytest.mark.parametrize("stack", ["prod", "dev", "jobset", "pathways"])
def test_no_auto_upgrade_recreates_a_slice_while_the_cluster_is_on_its_minor(stack):
    policy = committed_stack_run(stack).one(CLUSTER).inputs["maintenancePolicy"]
    [exclusion] = policy["maintenanceExclusions"]
    assert exclusion["exclusionOptions"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES",
                                             "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}
    assert "endTime" not in exclusion and exclusion["startTime"].endswith("Z")
    assert policy["dailyMaintenanceWindow"]["startTime"] == "03:00"


def test_without_a_release_channel_the_tpu_pools_do_not_auto_upgrade():
    """NO_MINOR_OR_NODE_UPGRADES needs a release channel; without one, node auto-upgrade can simply be off."""
    run = run_program({**MINIMAL, "releaseChannel": "UNSPECIFIED", "gkeVersion": "1.35"}, stack="nochannel")
    assert "maintenancePolicy" not in run.one(CLUSTER).inputs
    pools = [p for p in run.of_type(NODE_POOL) if p.name.startswith("slice-")]
    assert pools and all(p.inputs["management"]["autoUpgrade"] is False for p in pools)
