"""The shutdown budget wired through config, node pools and pods (infra/config/preemption.py, infra/tpu_pools.py,
the JobSet and Ray TPU pod templates)."""
from __future__ import annotations

from infra import versions
from infra.config import build
from preview.harness import run_program
from tests.conftest import MINIMAL

NODE_POOL = "gcp:container/nodePool:NodePool"
FLOOR = "a 120 s Spot shutdown budget (kubelet shutdownGracePeriodSeconds)"


def tpu_pools(run):
    return [r for r in run.of_type(NODE_POOL) if r.name.startswith("slice-")]


def ray_tpu_worker_pod(run) -> dict:
    """The TPU worker pod template, in a RayCluster or in the cluster spec a RayJob creates."""
    for r in run.resources:
        if r.type == "kubernetes:ray.io/v1:RayCluster":
            cluster = r.inputs["spec"]
        elif r.type == "kubernetes:ray.io/v1:RayJob" and "rayClusterSpec" in r.inputs["spec"]:
            cluster = r.inputs["spec"]["rayClusterSpec"]
        else:
            continue
        return cluster["workerGroupSpecs"][0]["template"]["spec"]
    raise AssertionError("no Ray TPU worker group")


def test_gke_documents_the_version_that_allows_a_120_s_spot_budget():
    """GKE "About Spot VMs" (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms): to extend the
    termination period of a Standard node pool "the cluster's control plane must run GKE version
    1.35.0-gke.1171000 or later"."""
    assert versions.SPOT_SHUTDOWN_BUDGET == "1.35.0-gke.1171000"


def test_spot_llama3_8b_raises_its_pools_budget_and_adds_the_version_floor():
    config = build({**MINIMAL, "capacity": "spot", "model": "llama3-8b"})
    budget = config.workload.shutdown
    assert budget.node_shutdown_s == 120 and 15 < budget.pod_grace_s <= 105
    assert dict(config.cluster.version_floors)[FLOOR] == versions.SPOT_SHUTDOWN_BUDGET
    assert config.cluster.minimum_version == versions.SPOT_SHUTDOWN_BUDGET
    run = run_program({**MINIMAL, "capacity": "spot", "model": "llama3-8b"}, stack="budget-spot")
    for pool in tpu_pools(run):
        assert pool.inputs["nodeConfig"]["kubeletConfig"] == {"shutdownGracePeriodSeconds": 120,
                                                              "shutdownGracePeriodCriticalPodsSeconds": 15}
    worker = ray_tpu_worker_pod(run)
    assert worker["terminationGracePeriodSeconds"] == budget.pod_grace_s
    # Ray 2.60 `ray start --block` drains for RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S after SIGTERM (default 30 s,
    # ray/_private/ray_constants.py and node.py) and then kills the node's processes: with a grace period above
    # 30 s the save at the notice would be cut at 30 s unless the drain is stretched to just under the grace.
    env = {e["name"]: e.get("value") for e in worker["containers"][0]["env"]}
    drain = int(env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"])
    assert 30 < drain < budget.pod_grace_s


def test_a_pinned_older_gke_keeps_its_version_and_the_default_budget():
    config = build({**MINIMAL, "capacity": "spot", "gkeVersion": "1.34.8-gke.1000000"})
    budget = config.workload.shutdown
    assert budget.node_shutdown_s is None and not budget.fits
    assert FLOOR not in dict(config.cluster.version_floors)
    assert "gkeVersion=1.34.8-gke.1000000 is below 1.35.0-gke.1171000" in budget.warnings()[0]


def test_on_demand_pools_get_no_kubelet_budget_but_jobset_pods_get_the_save(schemas_dir):
    run = run_program({**MINIMAL, "workloadBackend": "jobset"}, stack="budget-jobset")
    config = build({**MINIMAL, "workloadBackend": "jobset"})
    assert all("kubeletConfig" not in pool.inputs["nodeConfig"] for pool in tpu_pools(run))
    (jobset,) = [r for r in run.resources if r.type == "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"]
    pod = jobset.inputs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == config.workload.shutdown.pod_grace_s > 30


def test_dev_spot_save_fits_gkes_default_so_its_pools_are_untouched(dev):
    assert all("kubeletConfig" not in pool.inputs["nodeConfig"] for pool in tpu_pools(dev))


def test_autopilot_has_no_pools_to_raise_so_the_plan_says_the_save_does_not_fit():
    config = build({**MINIMAL, "clusterMode": "autopilot", "capacity": "spot"})
    budget = config.workload.shutdown
    assert budget.node_shutdown_s is None and not budget.fits
    assert FLOOR not in dict(config.cluster.version_floors)
    assert "Autopilot" in budget.warnings()[0]
