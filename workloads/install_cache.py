"""A node-level package cache for pods that install the workers' lock at start (workerEnvironment=runtime).

Every host installs worker_env/requirements.lock (~740 MB of wheels, ~2.7 GB installed) before its first step.
uv (Ray workers and JobSet pods) keeps what it downloaded and unpacked in its cache and installs from there when
it is warm (benchmarks/startup_bench.py measures both: the cache saves the download, not the writing). A pod's
own filesystem is lost when the container restarts or the pod is recreated
(a new job, a slice coming back on a node that stayed), so the cache lives on the node: a hostPath directory of
the stack's own, written only by its pods (TPU nodes run nothing else; the head's node is the system pool's). uv's cache is "thread-safe and append-only, and thus robust to multiple concurrent readers and
writers" (uv docs, "Caching"), and what it installs is still exactly the lock's pinned versions.

Autopilot refuses writable hostPath volumes (GKE "Autopilot security capabilities"), so there the cache is an
emptyDir: it survives container restarts only.
"""
from __future__ import annotations

from infra.config import StackConfig

# The cache volume inside the container; uv's cache (its UV_CACHE_DIR variable, or --cache-dir) below it.
CACHE_MOUNT = "/var/cache/install"
UV_CACHE_DIR = f"{CACHE_MOUNT}/uv"
VOLUME_NAME = "install-cache"
# On the node: outside the paths GKE manages, owned by the stack.
HOST_PATH = "/var/lib/tpu-multislice/install-cache"
# The user the Ray images run as (ray-project/ray docker/base-deps/Dockerfile: ARG RAY_UID=1000, RAY_GID=100).
RAY_UID, RAY_GID = 1000, 100


def cache_kind(config: StackConfig) -> str | None:
    """Where uv keeps its cache for the runtime install: "node" on Standard, "pod" on Autopilot (no writable
    hostPath there), None with the worker image (nothing is installed)."""
    if config.workload.worker_environment == "image":
        return None
    return "pod" if config.cluster.autopilot else "node"


def cache_env() -> list[dict]:
    return [{"name": "UV_CACHE_DIR", "value": UV_CACHE_DIR}]


def cache_mount() -> dict:
    return {"name": VOLUME_NAME, "mountPath": CACHE_MOUNT}


def cache_volume(on_node: bool) -> dict:
    if on_node:
        return {"name": VOLUME_NAME, "hostPath": {"path": HOST_PATH, "type": "DirectoryOrCreate"}}
    return {"name": VOLUME_NAME, "emptyDir": {}}


def cache_owner_init(image: str, uid: int = RAY_UID, gid: int = RAY_GID) -> dict:
    """Kubernetes creates a DirectoryOrCreate hostPath as root with mode 0755; the container's user must own it.
    Runs as root with CHOWN alone (every other capability dropped), on that directory only."""
    return {
        "name": "install-cache-owner",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["chown", f"{uid}:{gid}", CACHE_MOUNT],
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "volumeMounts": [cache_mount()],
    }


def add_cache(pod_spec: dict, container: dict, image: str, on_node: bool) -> None:
    """Give `container` (in `pod_spec`, running as the Ray image's user) the uv cache: the volume, its mount,
    UV_CACHE_DIR and, on the node, the init container that hands the directory to that user."""
    pod_spec.setdefault("volumes", []).append(cache_volume(on_node))
    container.setdefault("volumeMounts", []).append(cache_mount())
    container.setdefault("env", []).extend(cache_env())
    if on_node:
        pod_spec.setdefault("initContainers", []).append(cache_owner_init(image))
