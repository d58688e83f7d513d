"""The dashboard and the goodput IAM under Pulumi mocks (preview/harness.py): what the program registers for
every committed stack, checked against the other resources it registers rather than against the config."""
from __future__ import annotations

import json
import re

import pytest

from infra.dashboard import ACCELERATOR_FIELD, NODE_POOL_FIELD, chart_filters
from infra.identity import TELEMETRY_ROLES, goodput_role_id
from preview.harness import FAKE_DASHBOARD_ID, FAKE_PROJECT_NUMBER, ProgramRun, account_unique_id, run_program
from preview.k8s.manifests import is_kubernetes_type
from tests.conftest import COMMITTED_STACKS, MINIMAL, committed_stack_run

DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
COMPONENT = "tpu-multislice:infra:TrainingDashboard"
NODE_POOL = "gcp:container/nodePool:NodePool"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
SERVICE = "gcp:projects/service:Service"
WORKLOAD_IDENTITY = "tpu-multislice:infra:WorkloadIdentity"


def dashboard_spec_of(run: ProgramRun) -> dict:
    return json.loads(run.one(DASHBOARD).inputs["dashboardJson"])


def all_filters(spec: dict) -> list[str]:
    return [f for _, filters in chart_filters(spec) for f in filters]


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_one_dashboard_inside_its_component_in_the_stacks_project(stack):
    run = committed_stack_run(stack)
    dashboard = run.one(DASHBOARD)
    assert run.by_urn(dashboard.parent).type == COMPONENT
    assert dashboard.inputs["project"] == run.one(ACCOUNT, "nodes").inputs["project"]
    # Created only once the Monitoring API is on.
    monitoring_api = next(s for s in run.of_type(SERVICE) if s.inputs["service"] == "monitoring.googleapis.com")
    assert monitoring_api.urn in dashboard.dependencies


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_dashboard_charts_the_node_pools_the_stack_creates(stack):
    run = committed_stack_run(stack)
    pools = sorted(p.inputs["name"] for p in run.of_type(NODE_POOL) if p.inputs["name"] != "system")
    assert pools
    clause = "one_of(" + ",".join(f'"{p}"' for p in pools) + ")"
    filters = all_filters(dashboard_spec_of(run))
    node_filters = [f for f in filters if 'resource.type="k8s_node"' in f]
    assert node_filters and all(f"{NODE_POOL_FIELD}={clause}" in f for f in node_filters)
    pool_filters = [f for f in filters if 'resource.type="k8s_node_pool"' in f]
    assert pool_filters and all(f"resource.labels.node_pool_name={clause}" in f for f in pool_filters)
    cluster = run.one("gcp:container/cluster:Cluster").inputs["name"]
    assert all(f'resource.labels.cluster_name="{cluster}"' in f for f in node_filters + pool_filters)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_goodput_charts_follow_the_run_the_backend_launches(stack):
    run = committed_stack_run(stack)
    ids = {m for f in all_filters(dashboard_spec_of(run)) for m in re.findall(r'workload_id="([^"]+)"', f)}
    assert len(ids) == 1
    (workload_id,) = ids
    # MaxText's goodput job name is its run_name: find it in the launched objects (the trainer code
    # ConfigMap left out: its source text mentions run names too).
    launched = json.dumps([r.inputs for r in run.resources
                           if is_kubernetes_type(r.type) and r.type != "kubernetes:core/v1:ConfigMap"])
    assert re.search(rf'(run_name=|--run-name\s+){re.escape(workload_id)}(["\s]|$)', launched), workload_id


def test_autopilot_dashboard_picks_tpu_nodes_by_accelerator():
    run = run_program({**MINIMAL, "clusterMode": "autopilot"})
    node_filters = [f for f in all_filters(dashboard_spec_of(run)) if 'resource.type="k8s_node"' in f]
    assert node_filters and all(f'{ACCELERATOR_FIELD}="tpu-v6e-slice"' in f for f in node_filters)
    assert not any(NODE_POOL_FIELD + "=" in f for f in node_filters)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_dashboard_url_export_names_the_created_dashboard(stack):
    run = committed_stack_run(stack)
    project = run.one(DASHBOARD).inputs["project"]
    assert run.outputs["dashboardUrl"] == (
        f"https://console.cloud.google.com/monitoring/dashboards/builder/{FAKE_DASHBOARD_ID}?project={project}")
    assert "dashboardUrl" not in run.secret_outputs


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_goodput_roles_go_to_the_identity_the_training_pods_use(stack):
    """Workload Identity principal always; the node account too, and only, when pods use the host network
    (they then authenticate as the node). Project-level, exactly TELEMETRY_ROLES, nothing broader."""
    run = committed_stack_run(stack)
    host_network = any('"hostNetwork": true' in json.dumps(r.inputs)
                       for r in run.resources if is_kubernetes_type(r.type))
    node_account = run.one(ACCOUNT, "nodes").inputs
    node_member = f"serviceAccount:{node_account['accountId']}@{node_account['project']}.iam.gserviceaccount.com"
    principal = (f"principal://iam.googleapis.com/projects/{FAKE_PROJECT_NUMBER}/locations/global/"
                 f"workloadIdentityPools/{node_account['project']}.svc.id.goog/subject/ns/tpu-training/sa/tpu-trainer")
    goodput = [b for b in run.of_type(PROJECT_IAM) if b.name.startswith("goodput-")]
    granted = {(b.inputs["member"], b.inputs["role"]) for b in goodput}
    role_id = goodput_role_id(run.outputs["clusterName"],
                              account_unique_id(node_account["project"], node_account["accountId"]))
    reader = f"projects/{node_account['project']}/roles/{role_id}"
    roles = {*TELEMETRY_ROLES, reader}
    expected = {(principal, role) for role in roles}
    if host_network:
        expected |= {(node_member, role) for role in roles}
    assert granted == expected
    assert set(TELEMETRY_ROLES) == {"roles/monitoring.metricWriter", "roles/logging.logWriter"}
    for binding in goodput:
        assert binding.inputs["project"] == node_account["project"]
        assert run.by_urn(binding.parent).type == WORKLOAD_IDENTITY
    # Logical names are part of the state: renaming them would re-create the grants.
    names = {"roles/monitoring.metricWriter": "goodput-monitoring.metricWriter",
             "roles/logging.logWriter": "goodput-logging.logWriter", reader: "goodput-log-reader"}
    assert {b.name for b in goodput} == {f"{names[r]}{'-nodes' if m == node_member else ''}" for m, r in expected}


def test_the_principal_binding_waits_for_the_identity_pool():
    # PROJECT.svc.id.goog exists once the cluster exists; binding earlier fails with an unknown principal.
    run = committed_stack_run("prod")
    cluster = run.one("gcp:container/cluster:Cluster")
    for binding in run.of_type(PROJECT_IAM):
        if binding.inputs["member"].startswith("principal://"):
            assert cluster.urn in binding.dependencies, binding.name
