"""The TPU pods of every backend request their job's host memory and CPU, not the node.

- Requests are what the scheduler must find; the kubelet's memory capacity is the kernel's MemTotal, below the
  VM's nominal memory (tests/core/test_pod_sizing.py has the bound and its sources), so a pod sized to a computed
  allocatable stays Pending on a real node. The old pods asked 87 CPU / 694 GiB of a ct6e-standard-4t.
- Limits are the node's ceiling, and KubeRay advertises a Ray container's CPU and memory limits to Ray ("The CPU,
  GPU, and memory limits specified in the Ray container config will be automatically advertised to Ray", Ray docs,
  RayCluster Configuration: https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/config.html), so Ray sees
  the host's size. Ray's object store is set from the plan (`--object-store-memory`), not 30 % of that limit.
- Kueue admits on requests: the JobSet backend's ClusterQueue quota is what the pods request. JobSet and Pathways
  TPU pods' memory limit is their request (workloads/common.py tpu_pod_resources_memory_bounded).
- A run whose host memory need does not fit the machine is refused in config build, in one line naming the key.
"""
from __future__ import annotations

import pytest

from core.pod_sizing import tpu_pod_size
from infra.config import ConfigError, build
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.jobset.spec import jobset_objects
from workloads.ray.component import ray_objects


def _ray_worker(stack: str):
    config = build(load_stack_config(stack, REPO))
    job = ray_objects(config, load_bundle())
    cluster = next(o for o in job.values() if o["kind"] in ("RayJob", "RayCluster"))
    spec = cluster["spec"].get("rayClusterSpec", cluster["spec"])
    [group] = spec["workerGroupSpecs"]
    [container] = group["template"]["spec"]["containers"]
    return config, group, container


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_ray_workers_request_the_plan_and_let_ray_see_the_host(stack):
    config, group, container = _ray_worker(stack)
    size = tpu_pod_size(config.workload.plan, ray=True)
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert requests["google.com/tpu"] == limits["google.com/tpu"] == str(config.tpu.shape.chips_per_host)
    assert requests["memory"] == f"{size.memory_request_gib}Gi" and limits["memory"] == f"{size.memory_limit_gib}Gi"
    assert int(requests["memory"][:-2]) < int(limits["memory"][:-2])
    assert int(requests["cpu"]) < int(limits["cpu"])
    if config.tpu.shape.machine.name == "ct6e-standard-4t":
        assert int(limits["memory"][:-2]) < 694 and int(limits["cpu"]) <= 87
    assert group["rayStartParams"]["object-store-memory"] == str(size.object_store_gib * 1024**3)


def test_jobset_pods_and_their_kueue_quota_use_the_requests():
    config = build(load_stack_config("jobset", REPO))
    objects = jobset_objects(config, load_bundle())
    size = tpu_pod_size(config.workload.plan, ray=False)
    [container] = objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["memory"] == f"{size.memory_request_gib}Gi"
    # Memory limit = request on the JobSet path: an overrun is a counted OOM kill, not a free eviction
    # (tests/workloads/test_memory_pressure.py); CPU keeps the node's ceiling.
    assert container["resources"]["limits"]["memory"] == f"{size.memory_request_gib}Gi"
    assert container["resources"]["limits"]["cpu"] == str(size.cpu_limit)
    queue = next(o for o in objects.values() if o["kind"] == "ClusterQueue")
    quotas = {r["name"]: r["nominalQuota"] for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    pods = config.tpu.slices * config.tpu.shape.hosts
    workloads = int(quotas["google.com/tpu"]) // (pods * config.tpu.shape.chips_per_host)
    assert quotas["memory"] == f"{pods * size.memory_request_gib * workloads}Gi"
    assert quotas["cpu"] == str(pods * size.cpu_request * workloads)


def test_a_host_memory_need_over_the_machine_is_refused_naming_the_key():
    raw = {**MINIMAL, "zone": "us-east5-a", "tpuGeneration": "v5p", "tpuTopology": "2x2x2", "model": "llama3-8b",
           "slices": 2, "perDeviceBatchSize": 12}
    with pytest.raises(ConfigError) as caught:
        build(raw)
    [line] = [p for p in caught.value.problems if "host memory" in p]
    assert "perDeviceBatchSize" in line and "12" in line and "at most 419 GiB" in line
