"""Kubernetes vocabulary every backend shares (pure: no Pulumi import).

Labels, the system-pool and TPU node selectors, TPU pod sizing, the DRANET claim template, the trainer-code
ConfigMap and its volume, and where a run writes in the bucket. Backend packages (ray/, jobset/, pathways/)
build their own objects from these pieces and never import each other.
"""
from __future__ import annotations

from urllib.parse import quote

from core.pod_sizing import TpuPodSize
from core.tpu_catalog import ACCELERATOR_SELECTOR, TOPOLOGY_SELECTOR, TPU_RESOURCE, SliceShape
from infra.config import Capacity, StackConfig
from infra.config.data_globs import literal_folder
from infra.config.key_checks import split_gs_path
from workloads import fuse_cache

APP_LABEL = {"app.kubernetes.io/part-of": "tpu-multislice"}
# The label the stack puts on its CPU node pool (infra/cluster.py); heads and controllers select it.
SYSTEM_POOL_LABEL = "tpu-multislice/pool"
SYSTEM_POOL_SELECTOR = {SYSTEM_POOL_LABEL: "system"}
DRANET_DEVICE_CLASS = "netdev.google.com"
DRANET_CLAIM_TEMPLATE = "dcn-netdevs"
# Where the trainer code ConfigMap is mounted in pods that run it.
CODE_MOUNT = "/opt/tpu-multislice"
CODE_VOLUME = "trainer-code"


# Every job object and pod of a run carries the run's name (runName: DNS-1035, at most 40 characters, so a valid
# label value): `kubectl get pods -l tpu-multislice/run=NAME`, and one Cloud Logging query for the whole run across
# its jobs, restarts and re-ups.
RUN_LABEL = "tpu-multislice/run"


def labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**APP_LABEL, **(extra or {})}


def run_labels(run_name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """labels() of the run's job objects and pods."""
    return labels({RUN_LABEL: run_name, **(extra or {})})


def run_logs_condition(run_name: str) -> str:
    """The Cloud Logging condition on the run's pods (Logging keeps pod labels as k8s-pod/<key>, dots turned into
    underscores)."""
    return f'labels."k8s-pod/{RUN_LABEL.replace(".", "_")}"="{run_name}"'


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
    (the node's ceiling): sized and checked once, in config build (infra/config/plan_rules.py check_pod_size)."""
    return config.workload.tpu_pod


def tpu_pod_resources(size: TpuPodSize) -> dict[str, dict[str, str]]:
    """Container resources: requests what the job needs, limits at what the node can give; google.com/tpu is the
    VM's whole chip count in both (extended resources need request = limit)."""
    return {"requests": size.requests(TPU_RESOURCE), "limits": size.limits(TPU_RESOURCE)}


# What the offline plan cannot verify about tpu_pod_resources_memory_bounded (shown among its assumptions).
MEMORY_BOUND_ASSUMPTION = (
    "host memory: TPU pods' memory limit is their request (the plan's need + 25 %), so a run that needs more is "
    "OOM-killed (exit 137, counted toward maxRestarts) instead of using the rest of the host; the kubelet is "
    "assumed to rank eviction candidates by use over request (Kubernetes \"Node-pressure Eviction\"). Check "
    "`kubectl describe pod` for OOMKilled")


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
    """Autopilot picks TPU capacity from node selectors (Standard pools carry it in their node config). A run on a
    shared cluster selects its own pools (infra/tpu_pools.py labels them), never another run's of its shape."""
    if not config.cluster.autopilot:
        return dict(config.stack.pool_labels)
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


def code_volume(config_map_name: str, files: list[str], lock_config_map: str | None = None,
                lock_files: list[str] = ()) -> dict:
    """The ConfigMap as a volume that restores the repository paths; with `lock_config_map`, that ConfigMap's
    files too, in the same directory (a projected volume: each ConfigMap stays far below the 1 MiB an object may
    have)."""
    code = {"name": config_map_name,
            "items": [{"key": flatten_path(path), "path": path} for path in sorted(files)]}
    if lock_config_map is None:
        return {"name": CODE_VOLUME, "configMap": code}
    lock = {"name": lock_config_map,
            "items": [{"key": flatten_path(path), "path": path} for path in sorted(lock_files)]}
    return {"name": CODE_VOLUME, "projected": {"sources": [{"configMap": code}, {"configMap": lock}]}}


# A ConfigMap (or projected) volume is written by the kubelet's AtomicWriter (kubernetes pkg/volume/util/
# atomic_writer.go): the files sit in a hidden `..<timestamp>` directory, `..data` is a symlink to it, and each
# top-level path is a symlink through `..data`. A walk that follows symlinks (Ray's working_dir upload:
# ray/_private/runtime_env/packaging.py `_dir_travel` descends with Path.is_dir/iterdir, which follow them) sees
# every file three times. These gitwildmatch patterns (Ray's runtime_env `excludes`, relative to the working_dir)
# leave out the two hidden entries, so the upload holds the top-level paths alone: one copy. A layout without
# them excludes nothing.
CONFIGMAP_VOLUME_INTERNALS = ("/..*",)


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


# ---- what a run reads: its data through Cloud Storage FUSE, read-only ------------------------------------

# MaxText's Grain pipeline reads files from a local path: a bucket is read through Cloud Storage FUSE mounted on
# every worker (MaxText docs/guides/data_input_grain.md, "Using Grain" step 2; grain_train_files then names the
# files on the mount). Each data bucket is mounted at DATA_MOUNT/BUCKET/FOLDER, FOLDER being the folder all of
# its globs lie under, so a path reads the same on the mount as in the bucket. Starting weights
# (load_parameters_path) are not mounted: Orbax reads gs:// itself, through no FUSE cache.
DATA_MOUNT = "/mnt/training-data"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# The GCS FUSE CSI driver injects its sidecar only into pods with this annotation (GKE "Access Cloud Storage
# buckets with the Cloud Storage FUSE CSI driver").
GCSFUSE_ANNOTATION = {"gke-gcsfuse/volumes": "true"}
# Mount options for a read-only training data set, from GKE "Optimize Cloud Storage FUSE CSI driver for GKE
# performance" (https://cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-perf) and
# Cloud Storage FUSE's "Performance tuning best practices"
# (https://cloud.google.com/storage/docs/cloud-storage-fuse/performance), whose option names are those of the
# Cloud Storage FUSE configuration file (https://cloud.google.com/storage/docs/cloud-storage-fuse/config-file):
# - implicit-dirs: folders that exist only as object-name prefixes can be listed, so the pipeline's glob finds
#   files under them;
# - metadata-cache ttl -1 and unlimited stat/type caches, kernel list cache -1: the data does not change during
#   a run, so each file's metadata and each listing is fetched once (the docs' setting for read-only data);
#   bounded by the mount's folder (only-dir below), not the bucket;
# - file-cache:enable-parallel-downloads: a file read for the first time is fetched in parallel chunks into the
#   file cache (parallel downloads need the file cache, sized by fileCacheCapacity below), and
#   fileCacheForRangeRead caches a file read at random offsets (ArrayRecord's global shuffle) too.
DATA_MOUNT_OPTIONS = ",".join((
    "implicit-dirs",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-system:kernel-list-cache-ttl-secs:-1",
    "file-cache:enable-parallel-downloads:true",
))


def _data_paths(config: StackConfig) -> tuple[str, ...]:
    run = config.workload.run
    return tuple(path for path in (run.dataset_path, run.eval_dataset_path) if path)


def data_mount_folders(config: StackConfig) -> tuple[tuple[str, str], ...]:
    """(bucket, folder) of each FUSE mount, in order: one per bucket of the training and eval files, the folder
    being the deepest one all of that bucket's globs lie under ('' for the whole bucket)."""
    folders: dict[str, list[str]] = {}
    for path in _data_paths(config):
        bucket, pattern = split_gs_path(path)
        parts = literal_folder(pattern).split("/") if literal_folder(pattern) else []
        if bucket not in folders:
            folders[bucket] = parts
            continue
        shared = folders[bucket]
        length = next((i for i, (a, b) in enumerate(zip(shared, parts)) if a != b), min(len(shared), len(parts)))
        folders[bucket] = shared[:length]
    return tuple((bucket, "/".join(parts)) for bucket, parts in folders.items())


def data_buckets(config: StackConfig) -> tuple[str, ...]:
    """The buckets a run reads through FUSE: those of its training and eval files, each once, in order."""
    return tuple(bucket for bucket, _ in data_mount_folders(config))


def mounted_path(gs_path: str) -> str:
    """Where a pod sees gs://BUCKET/PATH: DATA_MOUNT/BUCKET/PATH (globs are kept: the pipeline expands them)."""
    bucket, _, path = gs_path[len("gs://"):].partition("/")
    return f"{DATA_MOUNT}/{bucket}/{path}"


def _data_volume_name(index: int) -> str:
    return f"training-data-{index}"


def data_volumes(config: StackConfig, on_tpu: bool = True) -> list[dict]:
    """One read-only CSI ephemeral volume per data bucket, mounting only its folder (the driver's only-dir mount
    option: gcs-fuse-csi-driver docs/sub-directory-mounts.md), so the metadata prefetch on mount (`ls -R` of the
    mount point, cmd/metadata_prefetch/main.go) and the unlimited stat and type caches hold that folder, not the
    bucket; and the pod's own cache disk (workloads/fuse_cache.py), which the buckets share. `on_tpu`: the pods
    run on TPU hosts (else on the CPU pool), which decides the disk's type. Host-network pods (Pathways, JobSet
    without DRANET) authenticate the mount as the pod's Kubernetes service account through hostNetworkPodKSA
    (GKE: Cloud Storage FUSE for host network Pods, GKE 1.33.3-gke.1226000 and later)."""
    mounts = data_mount_folders(config)
    if not mounts:
        return []
    attributes = {"fileCacheCapacity": f"{fuse_cache.bucket_cache_mib(config, len(mounts))}Mi",
                  "fileCacheForRangeRead": "true", "gcsfuseMetadataPrefetchOnMount": "true"}
    if config.pods_use_host_network:
        attributes["hostNetworkPodKSA"] = "true"
    volumes = []
    for index, (bucket, folder) in enumerate(mounts):
        options = DATA_MOUNT_OPTIONS + (f",only-dir={folder}" if folder else "")
        volumes.append({"name": _data_volume_name(index), "csi": {
            "driver": GCSFUSE_DRIVER, "readOnly": True,
            "volumeAttributes": {"bucketName": bucket, "mountOptions": options, **attributes}}})
    return [*volumes, fuse_cache.cache_volume(config, on_tpu, labels())]


def data_mounts(config: StackConfig) -> list[dict]:
    return [{"name": _data_volume_name(index), "mountPath": "/".join(filter(None, (DATA_MOUNT, bucket, folder))),
             "readOnly": True}
            for index, (bucket, folder) in enumerate(data_mount_folders(config))]


def data_pod_annotations(config: StackConfig) -> dict[str, str]:
    """The sidecar annotation when the pod mounts data; nothing otherwise (synthetic runs stay as they were)."""
    return dict(GCSFUSE_ANNOTATION) if data_buckets(config) else {}


def data_pod_security_context(config: StackConfig) -> dict:
    """The pod securityContext the cache disk needs when the pod mounts data; {} otherwise."""
    return fuse_cache.pod_security_context() if data_buckets(config) else {}


def data_storage_classes(config: StackConfig, on_tpu: bool = True) -> dict[str, dict]:
    """Logical name -> the StorageClass of the pods' cache disks, when the run mounts data."""
    if not data_buckets(config):
        return {}
    kind = fuse_cache.disk_type(config, on_tpu)
    return {"fuse-cache-class": fuse_cache.storage_class(kind, labels(), config.stack.run)}


def add_pod_annotations(pod_template: dict, annotations: dict[str, str]) -> None:
    """Merge annotations into a pod template's metadata (the FUSE sidecar's, when the pod mounts data)."""
    if annotations:
        metadata = pod_template.setdefault("metadata", {})
        metadata["annotations"] = {**metadata.get("annotations", {}), **annotations}


def run_inputs(config: StackConfig) -> dict:
    """core.maxtext_args.RunSettings fields for what the run reads, as every backend passes them: the data on the
    FUSE mount, the starting weights as gs:// and the further MaxText settings."""
    run = config.workload.run
    return {
        "dataset_type": run.dataset_type,
        "dataset_path": mounted_path(run.dataset_path) if run.dataset_path else "",
        "eval_dataset_path": mounted_path(run.eval_dataset_path) if run.eval_dataset_path else "",
        "eval_interval": run.eval_interval,
        "eval_steps": run.eval_steps,
        "load_parameters_path": run.load_parameters_path,
    }
