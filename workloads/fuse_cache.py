"""Where Cloud Storage FUSE keeps its file cache of the run's data, and how big it may grow (pure: no Pulumi).

The GCS FUSE CSI driver caches files in the sidecar's `gke-gcsfuse-cache` volume: an emptyDir on the node's boot
disk unless the pod brings its own volume of that name (gcs-fuse-csi-driver pkg/webhook/sidecar_spec.go
SidecarContainerCacheVolumeName and GetSidecarContainerVolumeSpec, which skips the emptyDir when the pod has one).
On the boot disk a cache beside the image and the install cache can fill the node, and the kubelet's eviction
marks the pod DisruptionTarget, which restarts a JobSet without counting (workloads/failure_policy.py): a loop
that bills TPU time. The driver's troubleshooting guide (docs/troubleshooting.md, "File cache") recommends a
Balanced or SSD Persistent Disk cache volume for TPU families, larger than fileCacheCapacity.

So each pod that mounts data gets its own disk as a generic ephemeral volume of that name: created with the pod,
deleted with it (Kubernetes "Generic ephemeral volumes"), never billed while no run is up. Its size is the
config's dataCacheGiB; the data buckets share it, each capped at its share less FS_HEADROOM. TPU v6e and TPU7x
attach only Hyperdisk (Cloud TPU "Storage options": Hyperdisk Balanced, Hyperdisk ML), v4, v5e and v5p Balanced
Persistent Disk; the CPU pool's disk follows its machine series (cpu_disk_type).
"""
from __future__ import annotations

import math

from infra.config import StackConfig

# The volume name the driver's sidecar mounts at /gcsfuse-cache (pkg/webhook/sidecar_spec.go).
CACHE_VOLUME = "gke-gcsfuse-cache"
# The Compute Engine Persistent Disk CSI driver GKE runs (its StorageClasses name this provisioner).
PD_CSI_PROVISIONER = "pd.csi.storage.gke.io"
# Disk type each TPU generation can attach (Cloud TPU "Storage options for Cloud TPU data", supported disk types).
TPU_DISK_TYPES = {"v4": "pd-balanced", "v5e": "pd-balanced", "v5p": "pd-balanced",
                  "v6e": "hyperdisk-balanced", "tpu7x": "hyperdisk-balanced"}
CPU_DISK_TYPE = "pd-balanced"
# The CPU machine series that take Persistent Disk: Compute Engine's default disk type per series (API reference,
# instances: AttachedDiskInitializeParams.diskType, https://cloud.google.com/compute/docs/reference/rest/v1/
# instances): "For first- and second-generation machine series like N1, N2, T2, and M1, the default disk type is
# Standard Persistent Disk (pd-standard). For C3, C3D, and M3 the default is Balanced Persistent Disk
# (pd-balanced). For other third-generation machine series like A3, H3, Z3, all fourth-generation types like C4,
# N4, M4, and newer machine series, the default is Hyperdisk Balanced"; a series whose default is Persistent Disk
# attaches pd-balanced (Compute Engine "Machine series support for Persistent Disk"). Every other series, known or
# newer, gets hyperdisk-balanced, the default it is documented to take.
PD_SERIES = frozenset({"e2", "n1", "n2", "n2d", "t2d", "t2a", "c2", "c2d", "m1", "m2", "m3", "c3", "c3d", "a2",
                       "g2", "f1", "g1"})
# Hyperdisk Balanced includes 3,000 IOPS and 140 MiB/s at no extra charge (Compute Engine "About Hyperdisk
# Balanced", baseline performance); provisioning exactly that keeps the disk billed for its capacity only.
HYPERDISK_BASELINE = {"provisioned-iops-on-create": "3000", "provisioned-throughput-on-create": "140Mi"}
# The sidecar runs as uid/gid 65534 (pkg/webhook/sidecar_spec.go NobodyUID, NobodyGID) and can write a custom
# cache volume only with a pod fsGroup (docs/troubleshooting.md, "Volume mount failure with custom caching
# volumes"): the sidecar's own group, and no recursive chown when the volume's root already has it.
CACHE_FS_GROUP = 65534
# The PD CSI driver formats the disk ext4 with no blocks reserved for root (k8s.io/mount-utils mount_linux.go,
# formatAndMountSensitive: `mkfs.ext4 -F -m0`), but ext4's journal and inode tables still take a few percent:
# each bucket's fileCacheCapacity leaves this share of the disk free so the cache never reaches "no space left on
# device".
FS_HEADROOM = 0.10


def disk_type(config: StackConfig, on_tpu: bool) -> str:
    """The cache disk's type where the data-reading pods run: a TPU host, or the CPU pool."""
    if on_tpu:
        return TPU_DISK_TYPES[config.tpu.shape.generation.name]
    return cpu_disk_type(config.cluster.system_pool_machine_type)


def cpu_disk_type(machine_type: str | None) -> str:
    """pd-balanced on a series that takes Persistent Disk (PD_SERIES), else hyperdisk-balanced (N4, C4, ...)."""
    if not machine_type:
        return CPU_DISK_TYPE
    series = machine_type.split("-", 1)[0].lower()
    return CPU_DISK_TYPE if series in PD_SERIES else "hyperdisk-balanced"


def storage_class_name(kind: str, run: str | None = None) -> str:
    """Cluster-scoped: a run on a shared cluster has its own (named from its run stack), so destroying one run
    never deletes the class another run's pods still claim disks of."""
    return f"{run or 'tpu-multislice'}-fuse-cache-{kind}"


def storage_class(kind: str, labels: dict[str, str], run: str | None = None) -> dict:
    """The StorageClass of the cache disks: bound where the pod lands (its zone), deleted with its claim."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": storage_class_name(kind, run), "labels": dict(labels)},
        "provisioner": PD_CSI_PROVISIONER,
        "parameters": {"type": kind, **(HYPERDISK_BASELINE if kind.startswith("hyperdisk") else {})},
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }


def cache_volume(config: StackConfig, on_tpu: bool, labels: dict[str, str]) -> dict:
    """The pod's `gke-gcsfuse-cache` volume: its own disk of dataCacheGiB, created and deleted with the pod."""
    class_name = storage_class_name(disk_type(config, on_tpu), config.stack.run)
    return {"name": CACHE_VOLUME, "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": dict(labels)},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class_name,
                 "resources": {"requests": {"storage": f"{config.workload.run.data_cache_gib}Gi"}}},
    }}}


def pod_security_context() -> dict:
    """What the pod needs for the sidecar to write its cache volume."""
    return {"fsGroup": CACHE_FS_GROUP, "fsGroupChangePolicy": "OnRootMismatch"}


def bucket_cache_mib(config: StackConfig, buckets: int) -> int:
    """Each data mount's fileCacheCapacity in MiB: an equal share of the disk less FS_HEADROOM, so the caches of
    all buckets together fit the disk."""
    return math.floor(config.workload.run.data_cache_gib * 1024 * (1 - FS_HEADROOM) / max(buckets, 1))

