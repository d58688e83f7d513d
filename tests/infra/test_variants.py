"""The first-run rules hold on every variant the stack renders, not only the committed stacks: flex-start,
Autopilot, tpu7x, the runtime install (the built worker image is the default) and a reservation (sources in the
tests each rule has: test_iam.py, test_control_plane.py, test_services.py)."""
from __future__ import annotations

import json

import pytest

from preview.harness import run_program
from tests.conftest import MINIMAL
from tests.infra.test_stack import depends_on

VARIANTS = {
    "flex-start": {"capacity": "flex-start"},
    "autopilot": {"clusterMode": "autopilot"},
    "tpu7x": {"zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x4"},
    "runtime": {"workerEnvironment": "runtime"},
    "reservation": {"capacity": "reservation", "reservationName": "tpu-res"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_keeps_the_first_run_rules(variant):
    run = run_program({**MINIMAL, **VARIANTS[variant]}, stack=variant)
    cluster = run.one("gcp:container/cluster:Cluster").inputs
    # Control plane: DNS endpoint with IAM, no public IP endpoint; kubeconfig on the DNS endpoint.
    assert cluster["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert cluster["controlPlaneEndpointsConfig"]["dnsEndpointConfig"]["allowExternalTraffic"] is True
    assert json.loads(run.outputs["kubeconfig"])["clusters"][0]["cluster"]["server"].endswith(".gke.goog")
    # No auto-upgrade recreates a slice.
    [exclusion] = cluster["maintenancePolicy"]["maintenanceExclusions"]
    assert exclusion["exclusionOptions"]["scope"] == "NO_MINOR_OR_NODE_UPGRADES"
    # The trainer can get its bucket; goodput reads logs without logging.viewer.
    bucket_roles = {b.inputs["role"] for b in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")}
    assert {"roles/storage.objectUser", "roles/storage.legacyBucketReader"} <= bucket_roles
    project_grants = run.of_type("gcp:projects/iAMMember:IAMMember")
    assert "roles/logging.viewer" not in {g.inputs["role"] for g in project_grants}
    # Workloads wait for every grant of their identity.
    account = run.one("kubernetes:core/v1:ServiceAccount", "trainer")
    trainer_grants = [g for g in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
                      if "WorkloadIdentity" in g.urn]
    assert trainer_grants
    for grant in trainer_grants + [g for g in project_grants if g.name.startswith("goodput-")]:
        assert depends_on(run, account, grant), grant.name
    # The image path (every variant but the runtime install) enables the registry it pushes to.
    services = {s.inputs["service"] for s in run.of_type("gcp:projects/service:Service")}
    assert ("artifactregistry.googleapis.com" in services) == (variant != "runtime")
