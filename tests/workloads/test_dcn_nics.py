"""Cross-slice (megascale) traffic uses the DCN NICs only when libtpu is told their names.

Rule: with extra DCN networks, the TPU worker env carries `--megascale_grpc_interface_prefixes=eth1,eth2,lo` in
LIBTPU_INIT_ARGS, one ethN per DCN NIC plus loopback (the GKE multislice tutorial's worker env, docs FACTS §8:
"without it cross-slice traffic uses eth0"; no Google document names the flag, so docs/assumptions.md lists it
among what the stack assumes about GCP and Kubernetes). The flag is only right where the pod really has those NICs: through the
DRANET claim, or on the host network of a node the slice pool attached the DCN networks to.
"""
from __future__ import annotations

import pytest

from core.tpu_env import megascale_interface_flag, pod_dcn_nics
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.jobset.spec import jobset_objects
from workloads.pathways.component import pathways_objects
from workloads.ray.component import ray_objects

BUNDLE = load_bundle()
FLAG = "--megascale_grpc_interface_prefixes="
THREE_DCN = {"dcn": True, "dcnSubnets": ["10.50.0.0/16", "10.60.0.0/16", "10.70.0.0/16"]}
PATHWAYS = {**MINIMAL, "workloadBackend": "pathways", "systemPoolMachineType": "n2-standard-64"}


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def interface_flag(container: dict) -> str | None:
    flags = (env_of(container).get("LIBTPU_INIT_ARGS") or "").split()
    found = [f for f in flags if f.startswith(FLAG)]
    assert len(found) <= 1
    return found[0] if found else None


def claim_count(objects: dict[str, dict]) -> int | None:
    template = objects.get("dcn-netdevs")
    if template is None:
        return None
    [request] = template["spec"]["spec"]["devices"]["requests"]
    return request["exactly"]["count"]


def ray_worker(objects: dict[str, dict]) -> dict:
    cluster = objects["ray-job"]["spec"]["rayClusterSpec"]
    return cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


def jobset_pod(objects: dict[str, dict]) -> dict:
    return objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_flag_names_one_interface_per_dcn_nic_then_loopback():
    assert megascale_interface_flag(2) == FLAG + "eth1,eth2,lo"
    assert megascale_interface_flag(3) == FLAG + "eth1,eth2,eth3,lo"
    assert pod_dcn_nics(2, dranet_claim=True, host_network=False) == 2
    assert pod_dcn_nics(2, dranet_claim=False, host_network=True) == 2
    assert pod_dcn_nics(2, dranet_claim=False, host_network=False) == 0


def test_ray_workers_with_the_dranet_claim_name_its_nics():
    config = build(load_stack_config("prod", REPO))          # 2 DCN networks, DRANET, 2 slices
    objects = ray_objects(config, BUNDLE)
    assert interface_flag(ray_worker(objects)) == FLAG + "eth1,eth2,lo"
    assert claim_count(objects) == 2


def test_ray_workers_follow_the_number_of_dcn_networks():
    config = build({**load_stack_config("prod", REPO), **THREE_DCN})
    objects = ray_objects(config, BUNDLE)
    assert interface_flag(ray_worker(objects)) == FLAG + "eth1,eth2,eth3,lo"
    assert claim_count(objects) == 3


@pytest.mark.parametrize("overrides", [{}, {"dcn": True}])
def test_ray_workers_without_extra_nics_do_not_name_any(overrides):
    """No DCN, or DCN without DRANET: a Ray worker pod has its own network namespace with eth0 only."""
    objects = ray_objects(build({**MINIMAL, **overrides}), BUNDLE)
    assert interface_flag(ray_worker(objects)) is None


def test_jobset_pods_name_the_nics_of_the_claim_or_of_the_host():
    dranet = jobset_objects(build(load_stack_config("jobset", REPO)), BUNDLE)
    assert "resourceClaims" in jobset_pod(dranet)
    assert interface_flag(jobset_pod(dranet)["containers"][0]) == FLAG + "eth1,eth2,lo"
    assert claim_count(dranet) == 2
    host = jobset_objects(build({**MINIMAL, "workloadBackend": "jobset", **THREE_DCN}), BUNDLE)
    assert jobset_pod(host)["hostNetwork"] is True
    assert interface_flag(jobset_pod(host)["containers"][0]) == FLAG + "eth1,eth2,eth3,lo"
    plain = jobset_objects(build({**MINIMAL, "workloadBackend": "jobset"}), BUNDLE)
    assert interface_flag(jobset_pod(plain)["containers"][0]) is None


def test_pathways_workers_run_libtpu_and_get_the_flag_the_head_does_not():
    jobset = pathways_objects(build({**PATHWAYS, **THREE_DCN}))["pathways-jobset"]
    by_name = {job["name"]: job["template"]["spec"]["template"]["spec"] for job in jobset["spec"]["replicatedJobs"]}
    [worker] = by_name["worker"]["containers"]
    assert interface_flag(worker) == FLAG + "eth1,eth2,eth3,lo"
    head = by_name["pathways-head"]
    for container in head.get("initContainers", []) + head["containers"]:
        assert interface_flag(container) is None
    plain = pathways_objects(build(PATHWAYS))["pathways-jobset"]
    [worker] = [job for job in plain["spec"]["replicatedJobs"] if job["name"] == "worker"]
    assert interface_flag(worker["template"]["spec"]["template"]["spec"]["containers"][0]) is None


def test_tpu_containers_expose_the_libtpu_metrics_port():
    """GKE's TPU Multislice JobSet example: "containerPort: 8431 # Port to export TPU runtime metrics, if
    supported" (https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice); without it the dashboard's
    duty-cycle and HBM charts stay empty."""
    from preview.stack_files import load_stack_config
    from tests.conftest import REPO
    from workloads.bundle import load_bundle
    from workloads.jobset.spec import jobset_objects
    from workloads.ray.component import ray_objects
    from infra.config import build
    ray = ray_objects(build(load_stack_config("prod", REPO)), load_bundle())["ray-job"]["spec"]["rayClusterSpec"]
    [worker] = ray["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    jobset = jobset_objects(build(load_stack_config("jobset", REPO)), load_bundle())["jobset"]
    [pod] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    pathways = pathways_objects(build(load_stack_config("pathways", REPO)))["pathways-jobset"]
    [pathways_job] = [job for job in pathways["spec"]["replicatedJobs"] if job["name"] == "worker"]
    [pathways_worker] = pathways_job["template"]["spec"]["template"]["spec"]["containers"]
    for container in (worker, pod, pathways_worker):
        assert any(port["containerPort"] == 8431 and port.get("name") == "tpu-metrics"
                   for port in container["ports"]), container["name"]
