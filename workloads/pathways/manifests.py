"""Pure builder of the Pathways path's Kubernetes object: one JobSet (plain dicts, camelCase, no Pulumi import).

The shape is the one `xpk workload create-pathways` applies (AI-Hypercomputer/xpk,
src/xpk/templates/pathways_workload_create.yaml.j2, after xpk moved from the PathwaysJob controller to a plain
JobSet) and that google/pathways-job's controller and AI-Hypercomputer/pathways-utils' PathwaysJobSet build:

- replicated job `pathways-head` (1 pod on a CPU node): the Pathways resource manager and the IFRT proxy as
  native sidecars (init containers with restartPolicy Always) next to the user container that runs MaxText with
  JAX_PLATFORMS=proxy;
- replicated job `worker` (one Job per slice, one pod per TPU VM): the Pathways worker server on the TPU chips.
The head is the JobSet coordinator, so every pod finds it through the label jobset.sigs.k8s.io/coordinator
(`<jobset>-pathways-head-0-0.<jobset>`, resolvable because of network.enableDNSHostnames).
"""
from __future__ import annotations

from dataclasses import dataclass

from core.pathways import PATHWAYS_TPU_VERSIONS, PROXY_RESOURCES, RM_RESOURCES, TRAINER_RESOURCES
from core.pod_sizing import TpuPodSize
from core.tpu_catalog import SliceShape
from core.tpu_env import dcn_transport_flags
from workloads import failure_policy, fuse_cache
from workloads.common import (TPU_METRICS_PORT, code_mount, code_volume, run_labels, tpu_node_selector,
                              tpu_pod_resources_memory_bounded)

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
HEAD_JOB = "pathways-head"
WORKER_JOB = "worker"
TRAINER_CONTAINER = "maxtext"

# Ports of the Pathways components (google/pathways-job controller: PathwaysProxyPort, PathwaysRMPort,
# PathwaysWorkerPort; xpk's template exposes the same plus 29002/29006, 8471 (TPU runtime) and 8080 (metrics)).
PROXY_PORT = 29000
RM_PORT = 29001
WORKER_PORT = 29005

COORDINATOR_LABEL = "metadata.labels['jobset.sigs.k8s.io/coordinator']"


@dataclass(frozen=True)
class PathwaysSpec:
    """Everything the Pathways JobSet depends on, as plain values."""

    name: str                       # JobSet name (also the headless Service / DNS subdomain)
    run_name: str                   # the run's label value on the JobSet and its pods (common.RUN_LABEL)
    namespace: str
    service_account: str
    shape: SliceShape
    slices: int
    elastic_slices: int             # 0 = not elastic
    max_slice_restarts: int
    max_restarts: int
    server_image: str
    proxy_image: str
    trainer_image: str
    scratch_location: str           # gs:// directory Pathways components share
    trainer_command: tuple[str, ...]
    head_node_selector: dict[str, str]
    worker_size: TpuPodSize         # each worker pod's requests and limits (core/pod_sizing.py)
    code_config_map: str            # the trainer code (trainer.pathways_run maps MaxText's errors to exit codes)
    code_files: tuple[str, ...]
    dcn_nics: int = 0               # DCN NICs of a worker's node (hostNetwork pods see them all)
    # The run's data buckets, mounted read-only in the head, where the MaxText client loads every batch
    # (workloads/common.py data_volumes); empty for synthetic data.
    data_volumes: tuple[dict, ...] = ()
    data_mounts: tuple[dict, ...] = ()


class PathwaysSupportError(ValueError):
    """The slice's machine type has no Pathways instance type."""


def instance_type(shape: SliceShape) -> str:
    """Pathways' name for one slice, e.g. 'tpuv5e:4x4'."""
    try:
        version = PATHWAYS_TPU_VERSIONS[shape.machine.name]
    except KeyError:
        raise PathwaysSupportError(shape.machine.name) from None
    return f"{version}:{shape.topology}"


def head_address(name: str) -> str:
    """DNS name of the head pod (JobSet hostname `<jobset>-<job>-<job index>-<pod index>` in subdomain `<jobset>`)."""
    return f"{name}-{HEAD_JOB}-0-0.{name}"


def worker_backoff_limit(spec: PathwaysSpec) -> int:
    """Pod failures one slice's Job absorbs before it fails. xpk's rule: with elastic slices, max slice restarts
    per host; otherwise four per host."""
    per_host = spec.max_slice_restarts if spec.elastic_slices > 0 else 4
    return per_host * spec.shape.hosts


def _field_env(name: str, field_path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _ports(*numbers: int) -> list[dict]:
    return [{"containerPort": number, "protocol": "TCP"} for number in numbers]


def _pinned(resources: dict[str, str]) -> dict:
    # Requests equal to limits: the head's sidecars must not be squeezed by other pods on the CPU node.
    return {"requests": dict(resources), "limits": dict(resources)}


def _resource_manager(spec: PathwaysSpec) -> dict:
    return {
        "name": "pathways-rm",
        "image": spec.server_image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            f"--server_port={RM_PORT}",
            f"--gcs_scratch_location={spec.scratch_location}",
            "--node_type=resource_manager",
            f"--instance_count={spec.slices}",
            f"--instance_type={instance_type(spec.shape)}",
        ],
        "env": [
            _field_env("REPLICATED_JOB_NAME", "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"),
            _field_env("JOBSET_NAME", "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"),
            _field_env("HOST_ADDRESS", COORDINATOR_LABEL),
            # The head runs on a CPU VM: there is no TPU metadata to ask for.
            {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
        ],
        "ports": _ports(RM_PORT, RM_PORT + 1),
        "resources": _pinned(RM_RESOURCES),
        # Native sidecar: starts before MaxText, keeps running beside it and never blocks the pod's completion.
        "restartPolicy": "Always",
    }


def _proxy(spec: PathwaysSpec) -> dict:
    args = [
        f"--server_port={PROXY_PORT}",
        f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
        f"--gcs_scratch_location={spec.scratch_location}",
    ]
    if spec.elastic_slices > 0:
        # What `xpk workload create-pathways --elastic-slices N` adds: the proxy keeps the client session alive
        # while up to N slices are missing, so MaxText sees a slice-down error instead of a dead backend.
        args.append(f"--num_elastic_slices={spec.elastic_slices}")
    return {
        "name": "pathways-proxy",
        "image": spec.proxy_image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": [_field_env("PATHWAYS_HEAD", COORDINATOR_LABEL)],
        "ports": _ports(PROXY_PORT),
        "resources": _pinned(PROXY_RESOURCES),
        "restartPolicy": "Always",
    }


def _trainer(spec: PathwaysSpec) -> dict:
    container = {
        "name": TRAINER_CONTAINER,
        "image": spec.trainer_image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(spec.trainer_command),
        "env": [
            # PATHWAYS_HEAD first: JAX_BACKEND_TARGET expands it, and Kubernetes expands only earlier variables.
            _field_env("PATHWAYS_HEAD", COORDINATOR_LABEL),
            # JAX talks to the Pathways proxy instead of local TPUs (Pathways single-controller mode).
            {"name": "JAX_PLATFORMS", "value": "proxy"},
            {"name": "JAX_BACKEND_TARGET", "value": f"grpc://$(PATHWAYS_HEAD):{PROXY_PORT}"},
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
        ],
        "resources": _pinned(TRAINER_RESOURCES),
        "volumeMounts": [code_mount()],
    }
    container["volumeMounts"] += [dict(mount) for mount in spec.data_mounts]
    return container


def _head_job(spec: PathwaysSpec) -> dict:
    # One head per node: its sidecars use host ports 29000-29002 (hostNetwork).
    exclusive = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"}
    return {
        "name": HEAD_JOB,
        "replicas": 1,
        "template": {
            "metadata": {"annotations": dict(exclusive)},
            "spec": {
                # The head is not retried by its Job: MaxText recovers in-process, and a dead head is a JobSet
                # restart (failurePolicy) or the end of the run.
                "backoffLimit": 0,
                # An evicted or preempted head (a drained CPU node) restarts the JobSet without counting; an exit
                # code a retry cannot fix (trainer.pathways_run: settings, software, data) ends it.
                "podFailurePolicy": failure_policy.pod_failure_policy(TRAINER_CONTAINER),
                "completionMode": "Indexed",
                "completions": 1,
                "parallelism": 1,
                "template": {
                    # The GCS FUSE CSI driver injects its sidecar only into pods that ask (data mounted).
                    "metadata": {"labels": run_labels(spec.run_name),
                                 **({"annotations": {"gke-gcsfuse/volumes": "true"}} if spec.data_volumes else {})},
                    "spec": _host_network_pod(
                        spec, restart_policy="Never", node_selector=dict(spec.head_node_selector),
                        initContainers=[_proxy(spec), _resource_manager(spec)], containers=[_trainer(spec)],
                        volumes=[code_volume(spec.code_config_map, list(spec.code_files)),
                                 *(dict(volume) for volume in spec.data_volumes)],
                        # The FUSE sidecar writes its cache disk through the pod's fsGroup (fuse_cache.py).
                        **({"securityContext": fuse_cache.pod_security_context()} if spec.data_volumes else {})),
                },
            },
        },
    }


def _host_network_pod(spec: PathwaysSpec, restart_policy: str, node_selector: dict, **fields) -> dict:
    """Pod spec shared by the head and the workers. As xpk: the Pathways components reach each other on the
    VMs' own addresses, so every Pathways pod runs on the host network."""
    return {
        "serviceAccountName": spec.service_account,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": restart_policy,
        "nodeSelector": node_selector,
        **fields,
    }


def _worker_env(spec: PathwaysSpec) -> list[dict]:
    # Pathways-server env, derived from JobSet labels as xpk sets it. Not in core/tpu_env.py: these are read
    # by the Pathways worker server, not by a JAX process on the TPU VM (there is none on the Pathways path).
    env = [
        {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
        # xpk: "Workaround for v6e" on every generation.
        {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": "false"},
        _field_env("MEGASCALE_NUM_SLICES", "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"),
        _field_env("MEGASCALE_SLICE_ID", "metadata.labels['jobset.sigs.k8s.io/job-index']"),
        _field_env("JOBSET_NAME", "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"),
        _field_env("REPLICATED_JOB_NAME", "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"),
        _field_env("PATHWAYS_HEAD", COORDINATOR_LABEL),
        _field_env("MEGASCALE_COORDINATOR_ADDRESS", COORDINATOR_LABEL),
    ]
    transport = dcn_transport_flags(spec.slices, spec.dcn_nics)
    if transport:
        # The workers are where the TPU runtime (libtpu, and its megascale transport between slices) runs on
        # the Pathways path: the head only runs the proxy, the resource manager and the JAX client. Only the
        # transport flags are set: the recipes' XLA flags (core.tpu_env.libtpu_init_args) are for the processes
        # that compile, which on Pathways is not the worker (MaxText's benchmark runner hands them to the proxy).
        env.append({"name": "LIBTPU_INIT_ARGS", "value": " ".join(transport)})
    return env


def _worker_job(spec: PathwaysSpec) -> dict:
    shape = spec.shape
    return {
        "name": WORKER_JOB,
        # One Job per slice; exclusive placement puts each on its own node pool (= one slice).
        "replicas": spec.slices,
        "template": {
            "metadata": {"annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology":
                                         "cloud.google.com/gke-nodepool"}},
            "spec": {
                "backoffLimit": worker_backoff_limit(spec),
                "completionMode": "Indexed",
                # One pod per TPU VM of the slice.
                "completions": shape.hosts,
                "parallelism": shape.hosts,
                "template": {
                    "metadata": {"labels": run_labels(spec.run_name)},
                    # A crashed worker restarts in place and re-registers with the resource manager; that is
                    # the "slice restart" the elastic run waits for.
                    "spec": _host_network_pod(
                        spec, restart_policy="OnFailure",
                        node_selector=tpu_node_selector(shape),
                        containers=[{
                            "name": "pathways-worker",
                            "image": spec.server_image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": [
                                f"--server_port={WORKER_PORT}",
                                f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
                                f"--gcs_scratch_location={spec.scratch_location}",
                            ],
                            "env": _worker_env(spec),
                            # 8431: libtpu's runtime metrics, which the dashboard's duty-cycle and HBM charts
                            # read (workloads/common.py TPU_METRICS_PORT), as on the Ray and JobSet TPU pods.
                            "ports": [*_ports(WORKER_PORT, WORKER_PORT + 1, 8471, 8080),
                                      {**TPU_METRICS_PORT, "protocol": "TCP"}],
                            # Sized as the JobSet backend's TPU pods (the worker holds the chips, the host's
                            # offloaded activations and staged checkpoint shards): with no cpu/memory request it
                            # was BestEffort, the kubelet's first eviction candidate under memory pressure.
                            # Memory limit = request: an overrun is an OOM kill, not an eviction.
                            "resources": tpu_pod_resources_memory_bounded(spec.worker_size),
                            "volumeMounts": [{"name": "shared-tmp", "mountPath": "/tmp"}],
                        }],
                        # xpk and pathways-utils both give the worker the VM's /tmp; kept for parity (what the
                        # server keeps there is not documented publicly).
                        volumes=[{"name": "shared-tmp", "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}]),
                },
            },
        },
    }


def pathways_jobset(spec: PathwaysSpec) -> dict:
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": run_labels(spec.run_name)},
        "spec": {
            "coordinator": {"replicatedJob": HEAD_JOB, "jobIndex": 0, "podIndex": 0},
            # Stable DNS names for the pods; workers must resolve the head before it reports Ready.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": spec.max_restarts, "restartStrategy": "Recreate",
                              "rules": failure_policy.jobset_rules(exit_codes=True,
                                                                   target_replicated_jobs=[HEAD_JOB])},
            # Head (resource manager) first, then the workers that register with it.
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            # Workers serve until told otherwise: the run is done when MaxText in the head finishes.
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]},
            "replicatedJobs": [_head_job(spec), _worker_job(spec)],
        },
    }
