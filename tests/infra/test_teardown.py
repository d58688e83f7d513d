"""What `pulumi destroy` deletes, and in which order."""
from __future__ import annotations

from preview.harness import run_program
from tests.conftest import MINIMAL
from tests.infra.test_stack import CLUSTER, NETWORK, SUBNET, depends_on

SERVICE = "kubernetes:core/v1:Service"


def test_the_dashboard_load_balancer_is_deleted_before_the_cluster_and_its_vpc():
    """GKE only tries to delete a LoadBalancer Service's load balancer with the cluster ("Deletion of these resources
    is not always guaranteed: ... Internal load balancers created by the cluster", `gcloud container clusters delete`,
    https://cloud.google.com/sdk/gcloud/reference/container/clusters/delete; GKE "Deleting a cluster" recommends
    deleting such Services first, https://cloud.google.com/kubernetes-engine/docs/how-to/deleting-a-cluster). A
    leaked forwarding rule keeps the subnet and VPC from being deleted. So the Service must really be deleted (no
    deletedWith, which would skip its delete) and before the cluster (Pulumi deletes dependents first)."""
    run = run_program({**MINIMAL, "dashboardExposure": "internal-lb", "dashboardSourceRanges": ["10.10.0.0/16"]},
                      stack="ilb")
    ilb = next(s for s in run.of_type(SERVICE) if s.inputs["spec"].get("type") == "LoadBalancer")
    assert ilb.deleted_with == ""
    assert depends_on(run, ilb, run.one(CLUSTER))
    assert depends_on(run, ilb, run.one(SUBNET, "nodes")) and depends_on(run, ilb, run.one(NETWORK, "primary"))
