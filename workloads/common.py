"""Kubernetes vocabulary every backend shares (pure: no Pulumi import).

Labels, the system-pool and TPU node selectors, TPU pod sizing, the DRANET claim template, the trainer-code
ConfigMap and its volume, and where a run writes in the bucket. Backend packages (ray/, jobset/, pathways/)
build their own objects from these pieces and never import each other.
"""
from __future__ import annotations

from urllib.parse import quote

from core.pod_sizing import TpuPodSize
from core.pod_sizing import tpu_pod_size as _size_for_plan
from core.tpu_catalog import ACCELERATOR_SELECTOR, TOPOLOGY_SELECTOR, TPU_RESOURCE, SliceShape
from infra.config import Capacity, StackConfig

APP_LABEL = {"app.kubernetes.io/part-of": "tpu-multislice"}
# The label the stack puts on its CPU node pool (infra/cluster.py); heads and controllers select it.
SYSTEM_POOL_LABEL = "tpu-multislice/pool"
SYSTEM_POOL_SELECTOR = {SYSTEM_POOL_LABEL: "system"}
DRANET_DEVICE_CLASS = "netdev.google.com"
DRANET_CLAIM_TEMPLATE = "dcn-netdevs"
# Where the trainer code ConfigMap is mounted in pods that run it.
CODE_MOUNT = "/opt/tpu-multislice"
CODE_VOLUME = "trainer-code"


def labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**APP_LABEL, **(extra or {})}


# ---- TPU pods -----------------------------------------------------------------------------------------------

def tpu_node_selector(shape: SliceShape, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The node labels GKE puts on every TPU node of a slice pool: generation and topology."""
    return {ACCELERATOR_SELECTOR: shape.generation.accelerator_label, TOPOLOGY_SELECTOR: shape.topology,
            **(extra or {})}


# libtpu serves its runtime metrics (duty cycle, HBM use) on this port of the TPU container; GKE's TPU metrics
# (kubernetes.io/node/accelerator/*) read it. GKE's TPU Multislice JobSet example declares it:
# "containerPort: 8431 # Port to export TPU runtime metrics, if supported"
# (https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice). An assumption until a real cluster shows
# the dashboard's duty-cycle and HBM charts filled.
TPU_METRICS_PORT = {"name": "tpu-metrics", "containerPort": 8431}


def tpu_pod_size(config: StackConfig) -> TpuPodSize:
    """What each TPU pod of the stack's backend requests (its job's host memory and CPU, with headroom) and may use
    (the node's ceiling); config build has checked that the request fits (infra/config/rules.py check_pod_size)."""
    return _size_for_plan(config.workload.plan, ray=config.workload.backend == "rayjob")


def tpu_pod_resources(size: TpuPodSize) -> dict[str, dict[str, str]]:
    """Container resources: requests what the job needs, limits at what the node can give; google.com/tpu is the
    VM's whole chip count in both (extended resources need request = limit)."""
    return {"requests": size.requests(TPU_RESOURCE), "limits": size.limits(TPU_RESOURCE)}


def tpu_pod_resources_memory_bounded(size: TpuPodSize) -> dict[str, dict[str, str]]:
    """As tpu_pod_resources, with the memory limit equal to the request (the plan's need with its headroom), for
    pods whose eviction would restart a JobSet without counting. The kubelet's node-pressure eviction ranks first
    the pods whose memory use exceeds their request (Kubernetes "Node-pressure Eviction", eviction order), and an
    eviction marks the pod DisruptionTarget, which the JobSet failure policy restarts for free
    (workloads/failure_policy.py): a host-memory overrun that repeats on every attempt would loop forever. With
    use never above the request the pod is never such a candidate, and an overrun ends at its own cgroup limit
    instead: an OOM kill, exit 137 with no condition, a failure counted toward maxRestarts. CPU keeps the node's
    ceiling as its limit: a CPU limit only throttles, it never evicts or kills."""
    resources = tpu_pod_resources(size)
    resources["limits"]["memory"] = resources["requests"]["memory"]
    return resources


def capacity_selectors(config: StackConfig) -> dict[str, str]:
    """Autopilot picks TPU capacity from node selectors (Standard pools carry it in their node config)."""
    if not config.cluster.autopilot:
        return {}
    capacity = config.tpu.capacity
    if capacity is Capacity.SPOT:
        return {"cloud.google.com/gke-spot": "true"}
    if capacity is Capacity.RESERVATION:
        return {"cloud.google.com/reservation-name": config.tpu.reservation_name}
    if capacity is Capacity.FLEX_START:
        return {"cloud.google.com/gke-flex-start": "true"}
    return {}


def system_pool_selector(config: StackConfig) -> dict[str, str] | None:
    """Heads and controllers run on the stack's CPU pool; Autopilot has no pools to select."""
    return None if config.cluster.autopilot else dict(SYSTEM_POOL_SELECTOR)


def dranet_claim_template_name(config: StackConfig) -> str | None:
    return DRANET_CLAIM_TEMPLATE if config.network.dranet else None


def resource_claim_template(name: str, namespace: str, devices: int) -> dict:
    """DRANET: one request for `devices` NICs of the managed netdev class (one per extra DCN VPC)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels()},
        "spec": {"spec": {"devices": {"requests": [{
            "name": "dcn-nics",
            "exactly": {"deviceClassName": DRANET_DEVICE_CLASS, "allocationMode": "ExactCount", "count": devices},
        }]}}},
    }


# ---- the trainer code -------------------------------------------------------------------------------------

def flatten_path(path: str) -> str:
    """ConfigMap keys cannot hold '/'."""
    return path.replace("/", "__")


def code_config_map(name: str, namespace: str, files: dict[str, str]) -> dict:
    """The trainer code as an immutable ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels()},
        "immutable": True,
        "data": {flatten_path(path): text for path, text in sorted(files.items())},
    }


def code_volume(config_map_name: str, files: list[str]) -> dict:
    """The ConfigMap as a volume that restores the repository paths."""
    return {"name": CODE_VOLUME, "configMap": {
        "name": config_map_name,
        "items": [{"key": flatten_path(path), "path": path} for path in sorted(files)],
    }}


def code_mount() -> dict:
    return {"name": CODE_VOLUME, "mountPath": CODE_MOUNT, "readOnly": True}


# ---- where a run writes -------------------------------------------------------------------------------------

def output_directory(config: StackConfig) -> str:
    """gs:// (not the FUSE mount): Orbax then writes commit markers instead of relying on directory renames,
    which GCS FUSE does not make atomic without hierarchical namespace."""
    return f"gs://{config.storage.bucket_name}/maxtext"


def run_directory(config: StackConfig, run_name: str) -> str:
    return f"{output_directory(config)}/{run_name}"


def tensorboard_directory(config: StackConfig, run_name: str) -> str:
    # MaxText writes TensorBoard events under <base_output_directory>/<run_name>/tensorboard.
    return f"{run_directory(config, run_name)}/tensorboard"


# ---- where to look ------------------------------------------------------------------------------------------

CONSOLE = "https://console.cloud.google.com"


def container_logs_query(config: StackConfig, *conditions: str) -> str:
    """A Cloud Logging query for this stack's containers in the training namespace, narrowed by `conditions`."""
    return "\n".join([
        'resource.type="k8s_container"',
        f'resource.labels.cluster_name="{config.cluster.name}"',
        f'resource.labels.namespace_name="{config.kubernetes.namespace}"',
        *conditions,
    ])


def console_urls(config: StackConfig, cluster_location: str, logs_query: str) -> dict[str, str]:
    """Cloud console links to the workloads, the cluster and the training logs."""
    project = config.gcp.project
    return {
        "consoleWorkloadsUrl": f"{CONSOLE}/kubernetes/workload/overview?project={project}",
        "consoleClusterUrl": (f"{CONSOLE}/kubernetes/clusters/details/{cluster_location}/{config.cluster.name}"
                              f"/details?project={project}"),
        "consoleLogsUrl": f"{CONSOLE}/logs/query;query={quote(logs_query, safe='')}?project={project}",
    }
