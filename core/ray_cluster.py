"""The job's RayCluster as both sides of an elastic start see it (pure; shipped to the cluster).

KubeRay v1.7.0 submits a RayJob only once its RayCluster is Ready, and a RayCluster is Ready only when every pod it
wants, head + replicas x numOfHosts of each worker group, is Running and Ready (ray-project/kuberay
ray-operator/controllers/ray/rayjob_controller.go `Reconcile`, case Initializing; raycluster_controller.go
`calculateStatus`; utils/util.go `GetWorkerGroupDesiredReplicas`, `CheckAllPodsRunning`). An elastic run that may
start on elasticMinSlices therefore has its TPU group created at that many replicas (workloads/ray/manifests.py),
and once it runs, its driver raises the group to all its slices (trainer/grow.py): KubeRay then creates the other
slices' pods, which wait for capacity and join when it comes; Ray Train's elastic policy grows the worker group
onto them. The replicas stay at the maximum, so a slice lost later is asked for again at once.

This module holds what both sides must agree on: the group's name and where it sits, the API path of a RayCluster
and the JSON patch (RFC 6902) the driver sends.
"""
from __future__ import annotations

# The TPU worker group of the job's RayCluster: its name and its index in spec.workerGroupSpecs.
TPU_WORKER_GROUP = "tpu-slices"
TPU_WORKER_GROUP_INDEX = 0
RAYCLUSTER_API = "ray.io/v1"
# A JSON patch (RFC 6902) request's content type (Kubernetes API conventions, "Patch operations").
JSON_PATCH = "application/json-patch+json"


def raycluster_path(namespace: str, name: str) -> str:
    """The Kubernetes API path of a RayCluster."""
    group, version = RAYCLUSTER_API.split("/")
    return f"/apis/{group}/{version}/namespaces/{namespace}/rayclusters/{name}"


def grow_patch(slices: int) -> list[dict]:
    """Set the TPU group's replicas to `slices`; the `test` makes the API server refuse the whole patch if the
    group at that index is not the TPU group (RFC 6902 §4.6), so no other group is ever resized."""
    group = f"/spec/workerGroupSpecs/{TPU_WORKER_GROUP_INDEX}"
    return [{"op": "test", "path": f"{group}/groupName", "value": TPU_WORKER_GROUP},
            {"op": "replace", "path": f"{group}/replicas", "value": slices}]
