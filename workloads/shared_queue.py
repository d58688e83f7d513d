"""The Kueue queue every run on a shared cluster waits in (pure: plain dicts, no Pulumi import).

The cluster stack (stackRole=cluster) owns one ResourceFlavor, one ClusterQueue and the training
WorkloadPriorityClass, all cluster-scoped; each run stack owns only a LocalQueue in its own namespace pointing at
that ClusterQueue (Kueue's own split of cluster admin and batch users: "Administer cluster quotas",
https://kueue.sigs.k8s.io/docs/tasks/manage/administer_cluster_quotas/). A run asks for all of its TPU pods in one
Workload, so Kueue admits it whole or keeps it waiting; the JobSet through Kueue's JobSet integration, the RayJob
through its RayJob integration (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobs/rayjob).

Only TPU chips decide admission: the ClusterQueue's cpu and memory quotas are what the nodes behind that many
chips can hold, plus the system pool (the Ray heads run there), so they never refuse what the nodes could run.
The flavor has no node labels: each run's pods already select their own run's pools (infra/config/stack_role.py
RUN_POOL_LABEL), so Kueue adds no selector (Kueue "Resource Flavor": an empty ResourceFlavor).
"""
from __future__ import annotations

import re

from core.tpu_catalog import CATALOG, TPU_RESOURCE
from workloads.common import labels
from workloads.jobset.manifests import KUEUE_API, TRAINING_PRIORITY, workload_priority_class

CLUSTER_QUEUE = "tpu-runs"
LOCAL_QUEUE = "tpu-run"
FLAVOR = "tpu-hosts"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The labels infra/identity.py gives the training namespace.
RUN_NAMESPACE_LABELS = {"app": "tpu-multislice"}
# GiB per vCPU of Compute Engine's predefined CPU types (https://cloud.google.com/compute/docs/general-purpose-
# machines): standard 4, highmem 8, highcpu 1 (E2, N2, N2D, C3 alike; the system pool is one of these).
_GIB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}


def per_chip_ceiling() -> tuple[float, float]:
    """The most vCPUs and GiB a TPU VM of any catalogued machine type holds per chip."""
    machines = [machine for generation in CATALOG.values() for machine in generation.machine_types]
    return (max(m.vcpus / m.chips_per_vm for m in machines), max(m.memory_gib / m.chips_per_vm for m in machines))


def cpu_machine_size(machine_type: str) -> tuple[int, int]:
    """(vCPUs, GiB) of a predefined CPU type, e.g. e2-standard-16 → (16, 64); custom-N-MB types from their name."""
    if custom := re.search(r"custom-(\d+)-(\d+)", machine_type):
        return int(custom.group(1)), -(-int(custom.group(2)) // 1024)
    family = re.search(r"-(standard|highmem|highcpu)-(\d+)", machine_type)
    if not family:
        return 2, 8     # the shared-core types (e2-medium and smaller) hold at most this
    vcpus = int(family.group(2))
    return vcpus, vcpus * _GIB_PER_VCPU[family.group(1)]


def cluster_queue(tpu_quota: int, system_pool_machine: str, system_nodes: int) -> dict:
    cpu_per_chip, gib_per_chip = per_chip_ceiling()
    system_cpu, system_gib = cpu_machine_size(system_pool_machine)
    quotas = {TPU_RESOURCE: str(tpu_quota),
              "cpu": str(int(tpu_quota * cpu_per_chip) + system_cpu * system_nodes),
              "memory": f"{int(tpu_quota * gib_per_chip) + system_gib * system_nodes}Gi"}
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE, "labels": labels()},
        "spec": {
            # The label every run's namespace carries (infra/identity.py WorkloadIdentity): only runs may queue.
            "namespaceSelector": {"matchLabels": dict(RUN_NAMESPACE_LABELS)},
            # First come, first admitted; a run that does not fit does not block a smaller one behind it.
            "queueingStrategy": "BestEffortFIFO",
            # A running run is never evicted for a later one.
            "preemption": {"withinClusterQueue": "Never"},
            "resourceGroups": [{
                "coveredResources": list(quotas),
                "flavors": [{"name": FLAVOR, "resources": [
                    {"name": name, "nominalQuota": quota} for name, quota in quotas.items()]}],
            }],
        },
    }


def cluster_objects(tpu_quota: int, system_pool_machine: str, system_nodes: int) -> dict[str, dict]:
    """What the cluster stack registers for every run to queue in (logical name → manifest)."""
    return {
        "run-flavor": {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
                       "metadata": {"name": FLAVOR, "labels": labels()}, "spec": {}},
        "run-queue": cluster_queue(tpu_quota, system_pool_machine, system_nodes),
        "priority-training": workload_priority_class(*TRAINING_PRIORITY),
    }


def run_local_queue(namespace: str) -> dict:
    """A run's own LocalQueue, in its namespace, into the cluster's ClusterQueue."""
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace, "labels": labels()},
            "spec": {"clusterQueue": CLUSTER_QUEUE}}


def queued_ray_job(ray_job: dict) -> dict:
    """The RayJob of a run on a shared cluster, queued in its LocalQueue and created suspended: Kueue's RayJob
    integration admits it by unsuspending it, after which KubeRay creates its RayCluster (Kueue v0.19.2
    pkg/controller/jobs/rayjob/rayjob_webhook.go: a RayJob with a queue name is defaulted to suspended and must
    delete its cluster when it finishes, `shutdownAfterJobFinishes`, which every RayJob here does; KubeRay RayJob
    `spec.suspend`). Suspended from the start, so Pulumi's inputs and the webhook's defaulting agree."""
    metadata = {**ray_job["metadata"], "labels": {**ray_job["metadata"].get("labels", {}), QUEUE_LABEL: LOCAL_QUEUE}}
    return {**ray_job, "metadata": metadata, "spec": {**ray_job["spec"], "suspend": True}}


def cost_notes(config) -> list[str]:
    """What the plan says of the shared queue: which queue a run joins and what waiting in it costs; what a
    cluster stack bills with no run on it."""
    stack = config.stack
    if stack.run:
        return [f"queue: joins LocalQueue {config.kubernetes.namespace}/{LOCAL_QUEUE} -> ClusterQueue "
                f"{CLUSTER_QUEUE} of {stack.cluster_stack}; Kueue admits all {config.tpu.total_chips} chips at "
                "once when they fit the cluster's clusterTpuQuota beside the runs admitted before, else the run "
                "waits whole: while it waits nothing of it runs (its pools stay at 0 nodes, 0 USD/h); the "
                "cluster's system pool and GKE fee bill in the cluster stack"]
    if not stack.has_run:
        return [f"shared cluster: no TPU of its own; its runs' stacks create and bill their slices, at most "
                f"{stack.tpu_quota} chips at once (clusterTpuQuota); the system pool and GKE fee bill while it "
                "exists, with or without runs"]
    return []
