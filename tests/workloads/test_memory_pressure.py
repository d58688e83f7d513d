"""A host-memory overrun on a TPU pod ends as a counted failure, never as evictions restarted for free forever.

Rules played:
- Kubernetes QoS (pkg/apis/core/v1/helper/qos GetPodQOS): BestEffort when no container requests or limits cpu or
  memory; Guaranteed when every container's cpu and memory requests equal their limits; else Burstable.
- The kubelet's memory-pressure eviction order (kubernetes/kubernetes pkg/kubelet/eviction/helpers.go
  rankMemoryPressure: exceedMemoryRequests, then priority, then usage above request; Kubernetes docs
  "Node-pressure Eviction"): pods whose working set exceeds their memory request go first. An evicted pod carries
  DisruptionTarget ("Pod disruption conditions"), which the JobSet's PreemptedOrEvicted rule restarts without
  counting (workloads/failure_policy.py).
- A container above its memory limit is OOM-killed by its cgroup: exit 137, no DisruptionTarget, so the Job fails
  BackoffLimitExceeded and JobSet's default RestartJobSet counts it (pkg/controllers/failure_policy.go).
"""
from __future__ import annotations

import pytest

from core import exit_codes
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from tests.workloads.test_jobset_restarts import BUNDLE, JobSetStatus, Pod, run_attempt
from workloads.jobset import spec as jobset_inputs
from workloads.pathways import manifests as pathways_manifests
from workloads.pathways.component import pathways_objects

GI = 2**30


def gib(quantity: str) -> float:
    for suffix, factor in (("Gi", GI), ("G", 10**9), ("Mi", 2**20), ("M", 10**6)):
        if quantity.endswith(suffix):
            return float(quantity[:-len(suffix)]) * factor / GI
    return float(quantity) / GI


def qos_class(pod: dict) -> str:
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    requests = [c.get("resources", {}).get("requests", {}) for c in containers]
    limits = [c.get("resources", {}).get("limits", {}) for c in containers]
    if not any(k in ("cpu", "memory") for r in requests + limits for k in r):
        return "BestEffort"
    if all(l.get(k) is not None and r.get(k, l.get(k)) == l.get(k) for r, l in zip(requests, limits)
           for k in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


def eviction_order(pods: list[tuple[str, float, float, int]]) -> list[str]:
    """rankMemoryPressure over (name, working set GiB, memory request GiB, priority): usage above request first,
    then lower priority, then more usage above request."""
    return [name for name, *_ in sorted(pods, key=lambda p: (not p[1] > p[2], p[3], -(p[1] - p[2])))]


def tpu_pods() -> dict[str, dict]:
    jobset = jobset_inputs.jobset_objects(build(load_stack_config("jobset", REPO)), BUNDLE)["jobset"]
    pathways = pathways_objects(build(load_stack_config("pathways", REPO)), BUNDLE)["pathways-jobset"]
    workers = {r["name"]: r for r in pathways["spec"]["replicatedJobs"]}
    return {"jobset": jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"],
            "pathways-worker": workers[pathways_manifests.WORKER_JOB]["template"]["spec"]["template"]["spec"]}


@pytest.mark.parametrize("which", ["jobset", "pathways-worker"])
def test_tpu_pods_request_memory_and_may_not_use_more(which):
    pod = tpu_pods()[which]
    (container,) = pod["containers"]
    resources = container["resources"]
    assert qos_class(pod) != "BestEffort"
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert resources["limits"]["memory"] == resources["requests"]["memory"]
    # CPU may still burst to the node's ceiling: throttling is all a CPU limit does.
    assert int(resources["limits"]["cpu"]) >= int(resources["requests"]["cpu"])


@pytest.mark.parametrize("which", ["jobset", "pathways-worker"])
def test_under_memory_pressure_the_tpu_pod_is_never_the_first_evicted(which):
    """Whatever the TPU pod uses (at most its limit = its request), a node DaemonSet above its own request goes
    first; with the old limit (the node's ceiling) the TPU pod above its request went first."""
    resources = tpu_pods()[which]["containers"][0]["resources"]
    request, limit = gib(resources["requests"]["memory"]), gib(resources["limits"]["memory"])
    daemonset = ("fluentbit", 0.5, 0.2, 2_000_001_000)      # system-node-critical priority, above its request
    for use in (0.5 * limit, limit):                         # any use the cgroup lets the pod reach
        assert eviction_order([(which, use, request, 0), daemonset])[0] == "fluentbit"
    # The old Burstable pod with a ceiling far above its request: evicted first at any use above the request.
    assert eviction_order([(which, request * 1.5, request, 0), daemonset])[0] == which


def test_a_repeated_host_memory_overrun_ends_the_jobset_after_max_restarts():
    """The overrun is an OOM kill at the pod's own limit: exit 137 without DisruptionTarget, counted."""
    jobset = jobset_inputs.jobset_objects(build(load_stack_config("jobset", REPO)), BUNDLE)["jobset"]
    status = JobSetStatus()
    for _ in range(jobset["spec"]["failurePolicy"]["maxRestarts"] + 1):
        run_attempt(jobset, {0: (Pod(exit_codes.KILLED), 10)}, status, [10])
    assert status.failed == "ReachedMaxRestarts"
    # Had the kubelet evicted it instead (DisruptionTarget), every attempt would have been free: no end.
    status = JobSetStatus()
    for _ in range(50):
        run_attempt(jobset, {0: (Pod(exit_codes.PREEMPTED, disrupted=True), 10)}, status, [10])
    assert status.failed is None and status.restarts == 50
