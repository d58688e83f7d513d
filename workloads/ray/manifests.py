"""Pure builders of the Ray path's Kubernetes objects (plain dicts, camelCase, no Pulumi import).

RayJob (with the RayCluster it owns) follows KubeRay v1.7.0 (ray.io/v1); ResourceClaimTemplate is
resource.k8s.io/v1.

The RayJob creates its own RayCluster (rayClusterSpec) and deletes it when the job ends
(shutdownAfterJobFinishes), so the TPU worker pods live exactly as long as the job and the slice pools, which
scale from zero, go back to zero after it (docs/backends.md "Slices follow the job" says why not the Ray
autoscaler on a long-lived cluster).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import yaml

from core.ray_cluster import RAYCLUSTER_API, TPU_WORKER_GROUP
from core.tpu_catalog import SliceShape
from core.tpu_env import tpu_worker_env
from workloads import fuse_cache, install_cache
from core.pod_sizing import TpuPodSize
from workloads.common import (CODE_MOUNT, CONFIGMAP_VOLUME_INTERNALS, TPU_METRICS_PORT, code_mount, code_volume,
                              labels, run_labels, tpu_node_selector, tpu_pod_resources)

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
DASHBOARD_PORT = 8265
GCS_PORT = 6379
CLIENT_PORT = 10001
METRICS_PORT = 8080
# The GKE TPU device plugin serves per-chip metrics (TensorCore and HBM use, duty cycle) on each TPU node at
# port 2112. Ray's dashboard agent on a TPU worker reads them from $TPU_DEVICE_PLUGIN_ADDR ("{HOST_IP}:2112",
# ray/dashboard/modules/reporter/reporter_agent.py in Ray 2.60); without it the dashboard shows no TPU charts.
# The KubeRay TPU webhook sets both variables only when a pod does not (kuberay-tpu-webhook `mutatePod`), and
# which webhook the GKE Ray add-on runs is not published, so the worker pods set them themselves.
TPU_DEVICE_PLUGIN_METRICS_PORT = 2112
CHECKPOINT_MOUNT = "/data/checkpoints"
# KubeRay names a job's cluster `<RayJob name>-<5 random characters>` (kuberay v1.7.0 utils.GenerateRayClusterName):
# the stack's own label on every pod of it is what its Service, load balancer and log queries select.
RAY_CLUSTER_LABEL = "tpu-multislice/ray-cluster"
# Seconds KubeRay keeps the job's cluster after the job ends (ttlSecondsAfterFinished). Its TPU pods hold every
# slice meanwhile, so none: the driver's log stays in the submitter pod and Cloud Logging.
CLUSTER_TTL_AFTER_FINISHED_S = 0
# KubeRay's own retries (why these values: workloads/ray/deadline.py): the submitter pod once, the job never.
SUBMITTER_BACKOFF_LIMIT = 1
JOB_BACKOFF_LIMIT = 0
# Seed head sizing: 8 CPU, 16 GiB (the tutorial's head group).
HEAD_CPU = "8"
HEAD_MEMORY = "16Gi"

# ---- how `ray start` runs in the head and worker containers ----
# Without a command of ours KubeRay v1.7.0 runs `/bin/bash -c -- "ulimit -n ...; ray start ... --block"`
# (common/pod.go BuildPod, utils.GetContainerCommand): `ray start` gets the kubelet's SIGTERM (and drains the
# node for a save at a preemption notice) only because bash happens to exec the last simple command of a `-c`
# string. With the annotation KubeRay keeps the container's own command and still puts its generated
# `ray start ...` in $KUBERAY_GEN_RAY_START_CMD (setContainerEnvVars; sample
# ray-operator/config/samples/ray-cluster.overwrite-command.yaml), so the exec is spelled out here.
# The generated command quotes for a shell (`--resources='{"TPU":4}'` on a TPU worker,
# addWellKnownAcceleratorResources), which is why it goes through `eval`: the sample's bare
# `$KUBERAY_GEN_RAY_START_CMD` would hand `ray start` the quotes themselves. The ulimit is KubeRay's own, with
# its override variable (RAY_START_ULIMIT_OPEN_FILES).
OVERWRITE_COMMAND_ANNOTATION = "ray.io/overwrite-container-cmd"
RAY_START_COMMAND = ["/bin/bash", "-c", "--"]
RAY_START_ARGS = ['ulimit -n "${RAY_START_ULIMIT_OPEN_FILES:-65536}"; eval "exec $KUBERAY_GEN_RAY_START_CMD"']

# ---- the submitter ----
# The submitter pod runs trainer/submitter.py from the mounted code instead of KubeRay's default
# `ray job submit --no-wait; ray job logs --follow`, whose log stream ending (a dropped WebSocket) ends the
# RayJob and deletes a healthy cluster (trainer/submitter.py says what KubeRay does with the submitter).
SUBMITTER_MODULE = "trainer.submitter"
SUBMITTER_CONTAINER = "ray-job-submitter"   # KubeRay's name for it (utils.SubmitterContainerName)
# What the submitter reads (trainer/kuberay_watch.py): the variables it is given and KubeRay's label on its pod
# template that names the RayJob (kuberay v1.7.0 utils/constant.go RayOriginatedFromCRNameLabelKey, set in
# rayjob_controller.go getSubmitterTemplate). Literal here: workloads does not import trainer.
RAYJOB_NAME_ENV = "RAYJOB_NAME"
RAYJOB_NAMESPACE_ENV = "RAYJOB_NAMESPACE"
RAYJOB_NAME_LABEL = "ray.io/originated-from-cr-name"


def pin_ray_start(group: dict) -> dict:
    """Make `ray start` the main process of the group's Ray container (its first) by an explicit exec (see
    RAY_START_ARGS); returns the group."""
    template = group["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[OVERWRITE_COMMAND_ANNOTATION] = "true"
    container = template["spec"]["containers"][0]
    container["command"] = list(RAY_START_COMMAND)
    container["args"] = list(RAY_START_ARGS)
    return group


def submitter_command(entrypoint: str, runtime_env: dict) -> list[str]:
    """The submitter container's command: the job's entrypoint and runtime env as the RayJob spec has them.
    KubeRay gives a container with a command of its own only environment variables: the head's job API
    (RAY_DASHBOARD_ADDRESS), the submission id (RAY_JOB_SUBMISSION_ID), PYTHONUNBUFFERED=1 and, with token auth,
    RAY_AUTH_MODE and RAY_AUTH_TOKEN (kuberay v1.7.0 rayjob_controller.go getSubmitterTemplate, common/pod.go);
    not the entrypoint or the runtime env, hence these arguments."""
    return ["python", "-m", SUBMITTER_MODULE, "--entrypoint", entrypoint,
            "--runtime-env-json", json.dumps(runtime_env, sort_keys=True)]


@dataclass(frozen=True)
class RaySpec:
    """Everything the Ray manifests depend on, as plain values."""

    namespace: str
    service_account: str
    cluster_name: str           # the job cluster's label value (RAY_CLUSTER_LABEL); KubeRay names the cluster
    run_name: str               # the run's label value on the RayJob and every pod (common.RUN_LABEL)
    image: str
    shape: SliceShape
    pod_size: TpuPodSize        # each TPU worker pod's requests, limits and Ray object store (core/pod_sizing.py)
    model: str                  # core/presets.py name: selects the recipe's libtpu flags
    slices: int
    min_slices: int             # == slices when not elastic
    bucket: str
    dranet_claim_template: str | None   # ResourceClaimTemplate name when DRANET is on
    dcn_nics: int               # DCN NICs a worker pod gets (through the DRANET claim); 0 without
    system_pool_selector: dict[str, str] | None   # head nodeSelector (Standard); None on Autopilot
    tpu_node_selector_extra: dict[str, str]       # e.g. Autopilot spot / reservation selectors
    # TPU workers' time between SIGTERM and SIGKILL, sized to a checkpoint save at a preemption notice
    # (core/preemption.py); None leaves Kubernetes' default.
    termination_grace_s: int | None = None
    # RayJob activeDeadlineSeconds (workloads/ray/deadline.py); None: no deadline.
    active_deadline_s: int | None = None
    # RayJob preRunningDeadlineSeconds (workloads/ray/deadline.py): how long it may wait for its cluster; None: no limit.
    pre_running_deadline_s: int | None = None
    # Where the pods that install the lock at start keep uv's cache (workloads/install_cache.py): "node" (a
    # hostPath that outlives pods), "pod" (an emptyDir: container restarts only; Autopilot), None (nothing
    # installed: the worker image).
    install_cache: str | None = None
    # The run's data buckets, mounted read-only in every TPU worker, where MaxText's Grain pipeline reads
    # (workloads/common.py data_volumes); empty for synthetic data.
    data_volumes: tuple[dict, ...] = ()
    data_mounts: tuple[dict, ...] = ()


def _head_group(spec: RaySpec) -> dict:
    pod_spec: dict = {
        "serviceAccountName": spec.service_account,
        "containers": [{
            "name": "ray-head",
            "image": spec.image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [
                {"name": "gcs-server", "containerPort": GCS_PORT},
                {"name": "dashboard", "containerPort": DASHBOARD_PORT},
                {"name": "client", "containerPort": CLIENT_PORT},
                {"name": "metrics", "containerPort": METRICS_PORT},
            ],
            "resources": {"requests": {"cpu": HEAD_CPU, "memory": HEAD_MEMORY},
                          "limits": {"cpu": HEAD_CPU, "memory": HEAD_MEMORY}},
            "volumeMounts": [
                {"name": "dshm", "mountPath": "/dev/shm"},
                {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT},
            ],
        }],
        "volumes": [
            # Ray's object store lives in /dev/shm; the container default (64 MiB) is far too small.
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            # The bucket through GCS FUSE, for browsing checkpoints and TensorBoard logs from the head.
            {"name": "checkpoints", "csi": {"driver": GCSFUSE_DRIVER,
                                            "volumeAttributes": {"bucketName": spec.bucket,
                                                                 "mountOptions": "implicit-dirs"}}},
        ],
    }
    if spec.system_pool_selector:
        pod_spec["nodeSelector"] = dict(spec.system_pool_selector)
    if spec.install_cache:
        # The driver runs the job's runtime env on the head too: it installs the lock there as well.
        install_cache.add_cache(pod_spec, pod_spec["containers"][0], spec.image, spec.install_cache == "node")
    return {
        "rayStartParams": {"dashboard-host": "0.0.0.0"},
        # The head Service (dashboard, job API, GCS, client) stays inside the cluster: Ray's job API runs
        # arbitrary code. ClusterIP is KubeRay's default; it is spelled out so that no default can change it.
        # The opt-in internal load balancer (dashboard_load_balancer) is a separate Service.
        "serviceType": "ClusterIP",
        "template": {
            # The GCS FUSE CSI driver injects its sidecar only into pods that ask for it.
            "metadata": {"labels": run_labels(spec.run_name, {RAY_CLUSTER_LABEL: spec.cluster_name}),
                         "annotations": {"gke-gcsfuse/volumes": "true"}},
            "spec": pod_spec,
        },
    }


def device_plugin_env() -> list[dict]:
    """Where Ray's dashboard agent finds the node's TPU device plugin metrics (the node's own IP)."""
    return [
        {"name": "TPU_DEVICE_PLUGIN_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "TPU_DEVICE_PLUGIN_ADDR", "value": f"$(TPU_DEVICE_PLUGIN_HOST_IP):{TPU_DEVICE_PLUGIN_METRICS_PORT}"},
    ]


# Seconds the raylet's teardown gets between the end of its drain and the kubelet's SIGKILL.
RAY_TEARDOWN_S = 3


def ray_drain_timeout_s(termination_grace_s: int) -> int:
    """How long `ray start` drains after SIGTERM: the pod's grace period less the raylet's teardown."""
    return max(1, termination_grace_s - RAY_TEARDOWN_S)


def _tpu_worker_group(spec: RaySpec) -> dict:
    shape = spec.shape
    container: dict = {
        "name": "ray-worker",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        # No `privileged`: GKE's TPU samples mark it "required for GKE versions earlier than 1.28 to access
        # TPUs"; this stack needs >= 1.30 (Ray add-on), the google.com/tpu device plugin exposes the chips and
        # DRANET hands NICs over through the claim, so the container runs unprivileged.
        # Requests: the job's host memory and CPU; limits: the node's ceiling, which KubeRay advertises to Ray.
        "resources": tpu_pod_resources(spec.pod_size),
        "env": tpu_worker_env(spec.model, shape.generation, spec.slices, spec.dcn_nics) + device_plugin_env(),
        "ports": [dict(TPU_METRICS_PORT)],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *(dict(m) for m in spec.data_mounts)],
    }
    pod_spec: dict = {
        "serviceAccountName": spec.service_account,
        "nodeSelector": tpu_node_selector(shape, spec.tpu_node_selector_extra),
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, *(dict(v) for v in spec.data_volumes)],
    }
    if spec.data_volumes:
        # The FUSE sidecar writes its cache disk through the pod's fsGroup (workloads/fuse_cache.py).
        pod_spec["securityContext"] = fuse_cache.pod_security_context()
    if spec.termination_grace_s is not None:
        pod_spec["terminationGracePeriodSeconds"] = spec.termination_grace_s
        # `ray start --block` drains the node for RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S after SIGTERM (30 s by
        # default), then kills the node's processes whatever the pod's grace period: the save at the notice would
        # be cut there. It is also the deadline Ray Train's preemption notice carries. Just under the pod's grace,
        # so the raylet tears down before the kubelet's SIGKILL.
        container["env"].append({"name": "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S",
                                 "value": str(ray_drain_timeout_s(spec.termination_grace_s))})
    if spec.install_cache:
        install_cache.add_cache(pod_spec, container, spec.image, spec.install_cache == "node")
    if spec.dranet_claim_template:
        pod_spec["resourceClaims"] = [{"name": "dcn-nics", "resourceClaimTemplateName": spec.dranet_claim_template}]
        container["resources"]["claims"] = [{"name": "dcn-nics"}]
    return {
        "groupName": TPU_WORKER_GROUP,
        # One replica is one slice: KubeRay creates numOfHosts pods per replica, one per TPU VM. The cluster starts
        # with the fewest slices the run may train on: KubeRay submits the job only when every pod of `replicas`
        # slices is Running and Ready (core/ray_cluster.py), so an elastic run starts as soon as its minimum has
        # capacity; its driver then raises `replicas` to maxReplicas (trainer/grow.py, allowed by grow_role).
        "replicas": spec.min_slices,
        "minReplicas": spec.min_slices,
        "maxReplicas": spec.slices,
        "numOfHosts": shape.hosts,
        # Planned, not Ray's default of 30 % of the memory limit: the object store lives in /dev/shm, in the
        # same memory as the activations the remat policy offloads to the host.
        "rayStartParams": {"object-store-memory": str(spec.pod_size.object_store_gib * 1024**3)},
        "template": {"metadata": {"labels": run_labels(spec.run_name, {RAY_CLUSTER_LABEL: spec.cluster_name}),
                                  # The GCS FUSE CSI driver injects its sidecar only into pods that ask.
                                  **({"annotations": {"gke-gcsfuse/volumes": "true"}} if spec.data_volumes else {})},
                     "spec": pod_spec},
    }


def ray_cluster_spec(spec: RaySpec, ray_version: str) -> dict:
    """The RayCluster the job creates (RayJob spec.rayClusterSpec). Without the Ray autoscaler: KubeRay keeps
    `replicas` slices of pods (the minimum at first, all of them once an elastic run's driver asked), so a slice
    lost to a preemption is asked for again at once (its pods are recreated and wait for GKE to bring the pool
    back), and Ray Train's elastic resize sees it join."""
    return {
        "rayVersion": ray_version,
        # Ray >= 2.52 can require a token for the dashboard and job API; KubeRay creates and wires it.
        # The field exists from KubeRay 1.5.1 (docs/assumptions.md).
        "authOptions": {"mode": "token"},
        # No upgradeStrategy: a job's cluster is never upgraded in place; any change to it changes the RayJob's
        # name (its hash covers this spec), which replaces the job and its cluster.
        "headGroupSpec": pin_ray_start(_head_group(spec)),
        "workerGroupSpecs": [pin_ray_start(_tpu_worker_group(spec))],
    }


def ray_job(*, name: str, spec: RaySpec, cluster_spec: dict, entrypoint: list[str], runtime_env: dict,
            code_config_map_name: str, code_files: list[str]) -> dict:
    """RayJob that creates its RayCluster from `cluster_spec` and deletes it when the job ends, code shipped from
    the ConfigMap.

    The submitter pod mounts the ConfigMap at CODE_MOUNT and trainer/submitter.py, run from there, uploads that
    directory as the job's working_dir (as `ray job submit` does), so the driver and every worker run this
    repository's trainer/ as committed; then it watches the job's status, not its log stream, until it ends.
    """
    # The mount's AtomicWriter internals are left out of the upload: one copy of the code, not three.
    job_runtime_env = {**runtime_env, "working_dir": CODE_MOUNT, "excludes": list(CONFIGMAP_VOLUME_INTERNALS)}
    job_entrypoint = shlex.join(entrypoint)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": run_labels(spec.run_name)},
        "spec": {
            # What the job runs, shown by `kubectl get rayjob`; the submitter is given the same two values.
            "entrypoint": job_entrypoint,
            "rayClusterSpec": cluster_spec,
            # The cluster (head and every TPU worker pod) goes when the job succeeds or fails; the slice pools
            # then have nothing to run and GKE removes their nodes.
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": CLUSTER_TTL_AFTER_FINISHED_S,
            # Retries only for what a retry fixes (workloads/ray/deadline.py): the submitter pod once; the job
            # never (Ray Train recovers inside it); a deadline only where it cannot end a healthy run.
            "submitterConfig": {"backoffLimit": SUBMITTER_BACKOFF_LIMIT},
            "backoffLimit": JOB_BACKOFF_LIMIT,
            **({"activeDeadlineSeconds": spec.active_deadline_s} if spec.active_deadline_s is not None else {}),
            # A job still waiting for its cluster after this long fails, and its cluster (and every pod that did
            # come up) is deleted: waiting for capacity is bounded (workloads/ray/deadline.py).
            **({"preRunningDeadlineSeconds": spec.pre_running_deadline_s}
               if spec.pre_running_deadline_s is not None else {}),
            "runtimeEnvYAML": yaml.safe_dump(job_runtime_env, sort_keys=True),
            "submissionMode": "K8sJobMode",
            "submitterPodTemplate": {
                "metadata": {"labels": run_labels(spec.run_name)},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": spec.service_account,
                    "containers": [{
                        "name": SUBMITTER_CONTAINER,
                        "image": spec.image,
                        "imagePullPolicy": "IfNotPresent",
                        # A command of our own: KubeRay keeps it (rayjob_controller.go configureSubmitterContainer
                        # builds its default only for a container without one) and adds RAY_DASHBOARD_ADDRESS,
                        # RAY_JOB_SUBMISSION_ID, PYTHONUNBUFFERED and, with token auth, RAY_AUTH_MODE and
                        # RAY_AUTH_TOKEN (submitter_command).
                        "command": submitter_command(job_entrypoint, job_runtime_env),
                        "workingDir": CODE_MOUNT,
                        # The code mount is read-only: no bytecode cache to write. The RayJob's name and namespace
                        # let the submitter ask KubeRay's objects whether the cluster is gone
                        # (trainer/kuberay_watch.py): the name from the label KubeRay puts on this template.
                        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                {"name": RAYJOB_NAME_ENV, "valueFrom": {"fieldRef": {
                                    "fieldPath": f"metadata.labels['{RAYJOB_NAME_LABEL}']"}}},
                                {"name": RAYJOB_NAMESPACE_ENV, "valueFrom": {"fieldRef": {
                                    "fieldPath": "metadata.namespace"}}}],
                        # KubeRay's own default submitter size.
                        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}},
                        "volumeMounts": [code_mount()],
                    }],
                    "volumes": [code_volume(code_config_map_name, code_files)],
                },
            },
        },
    }


def head_service_name(cluster_name: str) -> str:
    """The stack's own Service for the job cluster's head (a stable name; KubeRay's own is
    `<RayJob>-<random>-head-svc`)."""
    return f"{cluster_name}-head-svc"


def _head_selector(spec: RaySpec) -> dict[str, str]:
    return {RAY_CLUSTER_LABEL: spec.cluster_name, "ray.io/node-type": "head"}


def head_service(spec: RaySpec) -> dict:
    """ClusterIP Service in front of the running job's head: dashboard and job API (Ray token required)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": head_service_name(spec.cluster_name), "namespace": spec.namespace, "labels": labels()},
        "spec": {
            "type": "ClusterIP",
            "selector": _head_selector(spec),
            "ports": [{"name": "dashboard", "port": DASHBOARD_PORT, "targetPort": DASHBOARD_PORT,
                       "protocol": "TCP"}],
        },
    }


def dashboard_load_balancer(spec: RaySpec, source_ranges: list[str]) -> dict:
    """Opt-in internal passthrough load balancer for the dashboard / job API, limited to `source_ranges`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{spec.cluster_name}-dashboard-ilb",
            "namespace": spec.namespace,
            "labels": labels(),
            "annotations": {"networking.gke.io/load-balancer-type": "Internal"},
        },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerSourceRanges": list(source_ranges),
            "selector": _head_selector(spec),
            "ports": [{"name": "dashboard", "port": DASHBOARD_PORT, "targetPort": DASHBOARD_PORT,
                       "protocol": "TCP"}],
        },
    }


def grows(spec: RaySpec) -> bool:
    """Whether the run starts on fewer slices than it may use, so its driver raises the TPU group later."""
    return spec.min_slices < spec.slices


def grow_role_name(spec: RaySpec) -> str:
    return f"{spec.cluster_name}-grow-slices"


def grow_role(spec: RaySpec) -> dict:
    """What the driver of an elastic run needs to ask for its other slices (trainer/grow.py): `patch` on the
    namespace's RayClusters and nothing else. Not `get`, `list` or `delete`, nor pods. KubeRay names the job's
    cluster with a random suffix, so the Role cannot name it (resourceNames); the namespace holds only this stack's
    job clusters. It is less than KubeRay's own autoscaler Role, which also patches pods (kuberay v1.7.0
    common/rbac.go BuildRole)."""
    group = RAYCLUSTER_API.split("/")[0]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": grow_role_name(spec), "namespace": spec.namespace, "labels": labels()},
        "rules": [{"apiGroups": [group], "resources": ["rayclusters"], "verbs": ["patch"]}],
    }


def grow_role_binding(spec: RaySpec) -> dict:
    """The Role, for the service account the job's pods run as (the driver runs on the head)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": grow_role_name(spec), "namespace": spec.namespace, "labels": labels()},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": grow_role_name(spec)},
        "subjects": [{"kind": "ServiceAccount", "name": spec.service_account, "namespace": spec.namespace}],
    }


def submitter_role_name(spec: RaySpec) -> str:
    return f"{spec.cluster_name}-submitter-read"


def submitter_role(spec: RaySpec, job_name: str) -> dict:
    """What the submitter reads to decide whether its cluster is gone (trainer/kuberay_watch.py): `get` on its
    own RayJob (by name) and on RayClusters. Not `list` or `watch`, nothing it could change. The RayCluster's
    name has KubeRay's random suffix (utils.GenerateRayClusterName), so that rule cannot name it; the namespace
    holds only this stack's job clusters."""
    group = RAYCLUSTER_API.split("/")[0]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": submitter_role_name(spec), "namespace": spec.namespace, "labels": labels()},
        "rules": [{"apiGroups": [group], "resources": ["rayjobs"], "resourceNames": [job_name], "verbs": ["get"]},
                  {"apiGroups": [group], "resources": ["rayclusters"], "verbs": ["get"]}],
    }


def submitter_role_binding(spec: RaySpec) -> dict:
    """The Role, for the service account the submitter pod runs as (the job's)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": submitter_role_name(spec), "namespace": spec.namespace, "labels": labels()},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": submitter_role_name(spec)},
        "subjects": [{"kind": "ServiceAccount", "name": spec.service_account, "namespace": spec.namespace}],
    }


# What the driver's service account may change in its RayCluster (grow_policy): the TPU group's `replicas`, nothing
# else. Compared key by key, so a field this project does not set, or one a later KubeRay adds, is frozen too:
# a worker group's resources (`ray start --resources`), labels, suspend and scaleStrategy, the spec's suspend,
# the head, and the object's metadata. What the API server itself changes on every update is left free.
_SERVER_SET_METADATA = ("resourceVersion", "generation", "managedFields")


def _same_except(new: str, old: str, free: tuple[str, ...]) -> str:
    """CEL: the maps `new` and `old` have the same keys with equal values, apart from the keys in `free`."""
    if not free:
        return f"{new} == {old}"
    skip = " || ".join(f"k == '{key}'" for key in free)
    return f"{new}.all(k, {skip} || (k in {old} && {new}[k] == {old}[k])) && {old}.all(k, {skip} || k in {new})"


_SAME_REPLICAS = "(('replicas' in g) == ('replicas' in o) && (!('replicas' in g) || g.replicas == o.replicas))"

GROW_POLICY_RULES = (
    (_same_except("object", "oldObject", ("metadata", "spec", "status")) + " && "
     + _same_except("object.metadata", "oldObject.metadata", _SERVER_SET_METADATA),
     "the job's service account may not change the RayCluster's metadata"),
    (_same_except("object.spec", "oldObject.spec", ("workerGroupSpecs",)),
     "the job's service account may not change the head, the Ray version, suspend, autoscaling or authentication"),
    # Same number of groups, and each group as it was (one new group of each old group's name), apart from the
    # TPU group's replicas.
    ("size(object.spec.workerGroupSpecs) == size(oldObject.spec.workerGroupSpecs) && "
     "oldObject.spec.workerGroupSpecs.all(o, object.spec.workerGroupSpecs.exists_one(g, "
     f"g.groupName == o.groupName && {_same_except('g', 'o', ('replicas',))} && "
     f"(g.groupName == '{TPU_WORKER_GROUP}' || {_SAME_REPLICAS})))",
     f"the job's service account may change only the {TPU_WORKER_GROUP} worker group's replicas"),
)


def grow_policy_name(spec: RaySpec) -> str:
    # Cluster-scoped: the namespace keeps two stacks' policies apart.
    return f"tpu-multislice-{spec.namespace}-{grow_role_name(spec)}"


def grow_policy(spec: RaySpec) -> dict:
    """What grow_role cannot say: RBAC grants `patch` on a whole RayCluster, and a changed pod template would be
    used for the pods KubeRay creates next (with the service account's identity). This admission policy lets that
    service account change only `replicas` (Kubernetes "Validating Admission Policy", GA in 1.30: CEL over
    `object` and `oldObject`, matched by a matchCondition on request.userInfo). KubeRay's own updates are made by
    its operator's account and are not matched."""
    account = f"system:serviceaccount:{spec.namespace}:{spec.service_account}"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": grow_policy_name(spec), "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [RAYCLUSTER_API.split("/")[0]],
                                                    "apiVersions": ["*"], "operations": ["UPDATE"],
                                                    "resources": ["rayclusters"]}]},
            "matchConditions": [{"name": "by-the-job-service-account",
                                 "expression": f"request.userInfo.username == '{account}'"}],
            "validations": [{"expression": rule, "message": message} for rule, message in GROW_POLICY_RULES],
        },
    }


def grow_policy_binding(spec: RaySpec) -> dict:
    """The policy, denying, in the stack's namespace."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": grow_policy_name(spec), "labels": labels()},
        "spec": {"policyName": grow_policy_name(spec), "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {
                     "matchLabels": {"kubernetes.io/metadata.name": spec.namespace}}}},
    }
