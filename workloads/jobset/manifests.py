"""Pure builders of the JobSet backend's objects (plain dicts, camelCase, no Pulumi import).

JobSet v0.12.0 (jobset.x-k8s.io/v1alpha2) and Kueue v0.19.2 (kueue.x-k8s.io/v1beta2), the CRDs in
../shared/schemas. Shape rules (docs/platform-notes.md §4): one child Job per slice, `replicas` = slices, `parallelism` =
`completions` = hosts per slice, `google.com/tpu` per pod = chips per VM.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from core import exit_codes
from core.maxtext_args import PRE_TRAIN_MODULE
from core.tpu_catalog import ACCELERATOR_SELECTOR, TOPOLOGY_SELECTOR, TPU_RESOURCE, SliceShape, chips_in
from core.tpu_env import MEGASCALE_PORT, tpu_worker_env
from core.pod_sizing import TpuPodSize
from core.slice_wait import DISTRIBUTED_INIT_TIMEOUT_S
from workloads.common import (CODE_MOUNT, TPU_METRICS_PORT, code_mount, labels, run_labels, tpu_node_selector,
                              tpu_pod_resources_memory_bounded)
from workloads import failure_policy, pid_one
from workloads.kueue_config import DRANET_QUOTA_RESOURCE

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# JobSet's exclusive placement: every child Job (= slice) gets a node pool of its own (1 job : 1 pool), so a
# slice's hosts never straddle two pools (their ICI links only exist inside one pool).
EXCLUSIVE_TOPOLOGY = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
# JobSet labels/annotates every pod with the index of its child Job: that index is the slice id.
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
# ... and with the JobSet's restart attempt (its status.restarts) and uid (JobSet v0.12.0 pkg/constants/constants.go
# RestartsKey, api/jobset/v1alpha2/jobset_types.go JobSetUIDKey; jobset_controller.go labelAndAnnotateObject).
RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_UID_KEY = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "slice"
DRANET_CLAIM = "dcn-nics"
# The training JobSets' WorkloadPriorityClass (name, value, description); cluster-scoped, so a shared cluster's
# stack owns it for every run (workloads/shared_queue.py).
TRAINING_PRIORITY = ("tpu-training", 100, "Multislice MaxText training (JobSet backend).")
# libtpu's TPU runtime port (also what xpk opens on TPU workload containers).
TPU_RUNTIME_PORT = 8471


@dataclass(frozen=True)
class JobSetSpec:
    """Everything the JobSet objects depend on, as plain values."""

    namespace: str
    service_account: str
    run_name: str                              # the run's label value on the JobSet and its pods (common.RUN_LABEL)
    image: str
    shape: SliceShape
    pod_size: TpuPodSize                       # each TPU pod's requests and limits (core/pod_sizing.py)
    model: str                                 # core/presets.py name: selects the recipe's libtpu flags
    slices: int
    local_queue: str
    cluster_queue: str
    flavor: str
    tpu_quota: int
    dranet_claim_template: str | None          # ResourceClaimTemplate name when DRANET is on
    dcn_nics: int                              # DCN NICs a pod gets (DRANET claim, or the node's on hostNetwork)
    tpu_node_selector_extra: dict[str, str]    # Autopilot capacity selectors
    # What a pod gets between SIGTERM and SIGKILL: sized to a checkpoint save at a preemption notice
    # (core/preemption.py); None leaves Kubernetes' default.
    termination_grace_s: int | None = None
    # N attempts in a row without a newer checkpoint end the run (core/run_bounds.attempts_without_progress,
    # trainer/jobset_attempts.py); None: not counted.
    attempts_without_progress: int | None = None


# ---- quotas: what the pods of one workload request ------------------------------------------------------

def workload_requests(shape: SliceShape, pod_size: TpuPodSize, slices: int, claimed_nics: int = 0) -> dict[str, int]:
    """What Kueue must admit at once for one JobSet: all pods of all slices (cpu in cores, memory in GiB, and
    the DRANET NICs their claims ask for, which Kueue charges to DRANET_QUOTA_RESOURCE). Kueue admits on
    requests, so the limits (the node's ceiling) need no quota."""
    pods = slices * shape.hosts
    requests = {
        TPU_RESOURCE: pods * shape.chips_per_host,
        "cpu": pods * pod_size.cpu_request,
        "memory": pods * pod_size.memory_request_gib,
    }
    if claimed_nics:
        requests[DRANET_QUOTA_RESOURCE] = pods * claimed_nics
    return requests


def claimed_nics(spec: JobSetSpec) -> int:
    """NICs each pod's DRANET claim asks for (0 without DRANET: host-network NICs are not claimed)."""
    return spec.dcn_nics if spec.dranet_claim_template else 0


# ---- Kueue ----------------------------------------------------------------------------------------------

def resource_flavor(name: str, shape: SliceShape) -> dict:
    """The TPU slice flavor: Kueue adds these node labels to admitted pods, so they land on the right pools."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": labels()},
        "spec": {"nodeLabels": {ACCELERATOR_SELECTOR: shape.generation.accelerator_label,
                                TOPOLOGY_SELECTOR: shape.topology}},
    }


def cluster_queue(spec: JobSetSpec) -> dict:
    """Quota for everything the pods request (the seed's queue covered only TPUs, so nothing that also asks
    for cpu/memory could ever be admitted). TPU quota defaults to exactly one workload: the training JobSet
    (which runs the smoke test in its own pods first), never two JobSets fighting over hosts."""
    needs = workload_requests(spec.shape, spec.pod_size, spec.slices, claimed_nics(spec))
    # cpu, memory and claimed NICs scale with the TPU quota (the same pods bring them), rounded up to whole
    # workloads.
    workloads = -(-spec.tpu_quota // needs[TPU_RESOURCE])
    quotas = {TPU_RESOURCE: str(spec.tpu_quota), "cpu": str(needs["cpu"] * workloads),
              "memory": f"{needs['memory'] * workloads}Gi"}
    if DRANET_QUOTA_RESOURCE in needs:
        # Kueue charges each pod's claim to the resource the chart's deviceClassMappings names
        # (workloads/kueue_config.py); an uncovered resource would block admission.
        quotas[DRANET_QUOTA_RESOURCE] = str(needs[DRANET_QUOTA_RESOURCE] * workloads)
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": spec.cluster_queue, "labels": labels()},
        "spec": {
            # Only the training namespace may use these TPUs.
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": spec.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            # A running training job is never evicted by a later, higher-priority workload.
            "preemption": {"withinClusterQueue": "Never"},
            "resourceGroups": [{
                "coveredResources": list(quotas),
                "flavors": [{"name": spec.flavor, "resources": [
                    {"name": name, "nominalQuota": quota} for name, quota in quotas.items()]}],
            }],
        },
    }


def local_queue(spec: JobSetSpec) -> dict:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": spec.local_queue, "namespace": spec.namespace, "labels": labels()},
        "spec": {"clusterQueue": spec.cluster_queue},
    }


def workload_priority_class(name: str, value: int, description: str) -> dict:
    return {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name, "labels": labels()}, "value": value, "description": description}


# ---- JobSet ---------------------------------------------------------------------------------------------

def coordinator_host(jobset_name: str) -> str:
    """Pod 0 of child Job 0 through the JobSet's headless service (`<jobset>-<rjob>-<job>-<pod>.<subdomain>`;
    the subdomain defaults to the JobSet name). JAX uses this host for process 0 of a multislice job
    (jax._src.clusters.cloud_tpu_cluster: 'the Megascale coordinator address is set as the host with process
    id = 0'), and xpk points MEGASCALE_COORDINATOR_ADDRESS at the same pod."""
    return f"{jobset_name}-{REPLICATED_JOB}-0-0.{jobset_name}"


def multislice_env(jobset_name: str, slices: int) -> list[dict]:
    """MEGASCALE_* that libtpu and JAX read to join slices over DCN; nothing when there is one slice."""
    if slices < 2:
        return []
    return [
        {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": coordinator_host(jobset_name)},
        {"name": "MEGASCALE_NUM_SLICES", "value": str(slices)},
        {"name": "MEGASCALE_SLICE_ID",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX_KEY}']"}}},
    ]


def attempt_env(limit: int | None) -> list[dict]:
    """What host 0 needs to count attempts without progress across JobSet restarts (trainer/jobset_attempts.py):
    N, and JobSet's restart attempt, uid and slice index through the downward API. The host index within the
    slice is the Job controller's own JOB_COMPLETION_INDEX (Indexed completion mode)."""
    if limit is None:
        return []

    def from_annotation(key: str) -> dict:
        return {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}

    return [
        {"name": "TRAINER_ATTEMPTS_WITHOUT_PROGRESS", "value": str(limit)},
        {"name": "JOBSET_RESTART_ATTEMPT", "valueFrom": from_annotation(RESTART_ATTEMPT_KEY)},
        {"name": "JOBSET_UID", "valueFrom": from_annotation(JOBSET_UID_KEY)},
        {"name": "JOBSET_JOB_INDEX", "valueFrom": from_annotation(JOB_INDEX_KEY)},
    ]


def _container(spec: JobSetSpec, jobset_name: str, name: str, command: list[str], args: list[str],
               mounts: list[dict]) -> dict:
    ports = [{"name": "tpu-runtime", "containerPort": TPU_RUNTIME_PORT}, dict(TPU_METRICS_PORT)]
    if spec.slices > 1:
        ports.append({"name": "megascale", "containerPort": int(MEGASCALE_PORT)})
    container: dict = {
        "name": name,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": (tpu_worker_env(spec.model, spec.shape.generation, spec.slices, spec.dcn_nics)
                + multislice_env(jobset_name, spec.slices) + attempt_env(spec.attempts_without_progress)),
        "ports": ports,
        # No `privileged`: the device plugin exposes the chips and DRANET hands NICs over through the claim.
        # Requests: the job's host memory and CPU (core/pod_sizing.py); CPU limit: what the node can give; memory
        # limit = request, so a memory overrun is a counted OOM kill, never a free eviction restarted forever.
        "resources": tpu_pod_resources_memory_bounded(spec.pod_size),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *mounts],
    }
    if spec.dranet_claim_template:
        container["resources"]["claims"] = [{"name": DRANET_CLAIM}]
    return container


def _pod_spec(spec: JobSetSpec, container: dict, volumes: list[dict]) -> dict:
    pod: dict = {
        "serviceAccountName": spec.service_account,
        # Any pod failure fails its Job and so the JobSet, which restarts all slices together (failurePolicy):
        # a multislice JAX program cannot continue with one host gone.
        "restartPolicy": "Never",
        "nodeSelector": tpu_node_selector(spec.shape, spec.tpu_node_selector_extra),
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, *volumes],
    }
    if spec.termination_grace_s is not None:
        # MaxText saves at SIGTERM (the notice) before it exits; the kubelet kills it when this runs out.
        pod["terminationGracePeriodSeconds"] = spec.termination_grace_s
    if spec.dranet_claim_template:
        # DRANET moves the DCN NICs into the pod's own network namespace, so the pod must NOT use the host
        # network (a hostNetwork pod has no namespace of its own to receive them).
        pod["resourceClaims"] = [{"name": DRANET_CLAIM, "resourceClaimTemplateName": spec.dranet_claim_template}]
    else:
        # Without DRANET, megascale traffic must leave through the VM's own NICs (including any extra DCN
        # networks attached to the node), as in GKE's multislice JobSet examples and xpk's TPU JobSets;
        # ClusterFirstWithHostNet keeps the JobSet headless-service names resolvable.
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    return pod


def jobset(*, name: str, spec: JobSetSpec, priority_class: str, max_restarts: int, container: dict,
           volumes: list[dict] | None = None) -> dict:
    hosts = spec.shape.hosts
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            # Kueue admits the whole JobSet at once (all slices) through the LocalQueue.
            "labels": run_labels(spec.run_name, {QUEUE_LABEL: spec.local_queue, PRIORITY_LABEL: priority_class}),
            "annotations": dict(EXCLUSIVE_TOPOLOGY),
        },
        "spec": {
            # A preempted or evicted pod, or a slice that saved and left at another slice's notice (exit 143),
            # restarts every slice without counting; an exit code a retry cannot fix (core/exit_codes.py
            # NOT_RETRYABLE: settings, software, data, failed smoke test) ends the JobSet; anything else restarts
            # it, up to maxRestarts (workloads/failure_policy.py).
            "failurePolicy": {"maxRestarts": max_restarts,
                              "rules": failure_policy.jobset_rules(exit_codes=True, notice_exit=True)},
            # Stable pod hostnames through a headless service: the coordinator address depends on them.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "replicatedJobs": [{
                "name": REPLICATED_JOB,
                "replicas": spec.slices,                 # one child Job per slice = per node pool
                "template": {"spec": {
                    "parallelism": hosts,                # one pod per TPU VM of the slice
                    "completions": hosts,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "podFailurePolicy": failure_policy.pod_failure_policy(container["name"], notice_exit=True),
                    "template": {
                        "metadata": {"labels": run_labels(spec.run_name)},
                        "spec": _pod_spec(spec, container, volumes or []),
                    },
                }},
            }],
        },
    }


# ---- containers -----------------------------------------------------------------------------------------

# uv installs the lock several times faster than pip (benchmarks/startup_bench.py: 81.8 s against 474.7 s in one
# run) and the plain Python image has none, so pip installs uv first: pinned, and checked against the sha256 of the
# release's manylinux x86_64 wheel as the package index serves it (TPU VMs are x86_64).
UV_REQUIREMENT = "uv==0.13.9 --hash=sha256:d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"


def install_lock(lock_path: str, cache_dir: str | None = None) -> str:
    """Shell: install exactly the workers' locked environment shipped with the code: every file checked against
    the lock's sha256 (--require-hashes) and nothing resolved again (--no-deps), with uv into the image's Python
    (--system; the container runs as root). With `cache_dir` (a node-level volume, workloads/install_cache.py) uv
    keeps what it downloaded and unpacked, so a restarted pod on the same node downloads nothing.

    A failed install exits RUNTIME_FAILURE (retried): uv 0.13.9 exits 2 on an unreachable index or a hash
    mismatch (tried here), which would read as the trainer's CONFIG_ERROR (core/exit_codes.py) and end the JobSet
    on a transient index error; a hash mismatch is then retried up to maxRestarts too."""
    get_uv = (f"printf '%s\\n' {shlex.quote(UV_REQUIREMENT)} | python -m pip install --no-cache-dir "
              "--root-user-action=ignore --disable-pip-version-check --require-hashes -r /dev/stdin")
    cache = ["--cache-dir", cache_dir] if cache_dir else ["--no-cache"]
    install = shlex.join(["python", "-m", "uv", "pip", "install", "--system", *cache, "--no-deps",
                          "--require-hashes", "-r", f"{CODE_MOUNT}/{lock_path}"])
    return f"{get_uv} || exit {exit_codes.RUNTIME_FAILURE}\n{install} || exit {exit_codes.RUNTIME_FAILURE}"


def smoke_argv(spec: JobSetSpec) -> list[str]:
    """trainer/smoke.py on one host of the JobSet: every JAX device of every slice joined (chips x devices per
    chip x slices), and an all-reduce crosses the slices. It is the first to join the slices, so it waits for a
    late slice as long as Kueue lets the JobSet wait (core/slice_wait.py), not JAX's default 300 s."""
    return ["python", "-m", "trainer.smoke", "--distributed",
            "--expect-devices", str(spec.slices * spec.shape.devices), "--expect-slices", str(spec.slices),
            "--init-timeout", str(DISTRIBUTED_INIT_TIMEOUT_S)]


# ---- SIGTERM before MaxText starts ----
# The container runs `bash -c SCRIPT`: bash is PID 1 for the container's whole life, and the kernel drops a
# signal sent to a namespace's PID 1 from outside unless PID 1 handles it (pid_namespaces(7): "the only signals
# that can be sent to init from ancestor namespaces are those for which init has established a handler"). Without
# a trap a Spot notice or an eviction during the install or the smoke test waits out the whole grace period and
# ends in SIGKILL. With the trap, bash runs each step as a background job in its own process group (`set -m`),
# waits for it (a trapped signal interrupts `wait` at once, where a foreground child would delay the trap until
# it exits), and on TERM forwards it to that step's whole group, waits until every process of the step has
# stopped (PID 1's exit would kill them mid-cleanup) and exits PREEMPTED: nothing was trained, so a
# restart loses nothing, and the failure policy already restarts 143 without counting (failure_policy.py). The
# trainer then runs as bash's child, TERM forwarded to it (workloads/pid_one.py).
FORWARD_TERM = [
    "set -m",
    'step=""',
    (f'trap \'if [ -n "$step" ]; then kill -TERM -- "-$step" 2>/dev/null || true; wait "$step" || true; '
     f'while kill -0 -- "-$step" 2>/dev/null; do sleep 0.2; done; fi; exit {exit_codes.PREEMPTED}\' TERM'),
]


def as_step(line: str, or_exit: int | None = None) -> str:
    """Shell: `line` run as a background job that bash waits for, its exit status kept (set -e ends the script
    on a failure with that status, as in the foreground), or `or_exit` instead when given."""
    # `set +m` inside: the step's own pipelines stay in its process group, which the trap signals.
    on_failure = "" if or_exit is None else f" || exit {or_exit}"
    return f'{{ set +m; {line}\n}} &\nstep=$!; wait "$step"{on_failure}; step=""'


def pre_train_container(spec: JobSetSpec, jobset_name: str, argv: list[str], base_config_placeholder: str,
                        install: str | None, smoke: list[str] | None = None) -> dict:
    """MaxText's pre_train through the trainer's wrapper: `python -m trainer.jobset_run <base.yml of the installed
    package> key=value...` (MaxText's own argv), which runs MaxText's train and exits with core/exit_codes.py, so
    the JobSet's failure policy (workloads/failure_policy.py) can tell what a retry fixes from what it cannot:
    MaxText alone exits 1 on every error and 0 when it stops at a preemption notice.

    `argv` is core.maxtext_args.pre_train_argv(...) built with `base_config_placeholder`; base.yml is
    resolved inside the container from the installed package (docs/platform-notes.md §5), and the overrides travel
    as the container's args verbatim ("$@"), so no override is ever re-quoted.

    `smoke` (smoke_argv) runs first, in the same container on the same TPU chips, from the trainer code mounted
    at CODE_MOUNT: every pod of every slice runs it at the same time, its JAX process exits (releasing the chips)
    and only then MaxText starts; a failed check exits the container before training (`set -e`), failing the
    JobSet. A separate smoke JobSet would need Kueue to admit twice the TPUs, or would let training start while
    the smoke test failed."""
    module, base_config, *overrides = argv
    if base_config != base_config_placeholder:
        raise ValueError("argv must be built with the base-config placeholder")
    if module != PRE_TRAIN_MODULE:
        raise ValueError(f"trainer.jobset_run runs {PRE_TRAIN_MODULE}, not {module}")
    # `install` (install_lock) when the image is a plain Python one; None when it is the built worker image.
    lines = ["set -euo pipefail", *FORWARD_TERM, *([as_step(install)] if install else [])]
    if smoke:
        lines.append(as_step(f"(cd {shlex.quote(CODE_MOUNT)} && {shlex.join(smoke)})"))
    lines += [
        # MaxText not importable is an image or lock problem, which no restart fixes. A step, not `$(...)`:
        # bash runs a trap only once a foreground command substitution ends, so a TERM during this Python's
        # start-up waited for it.
        "base_config_file=$(mktemp)",
        as_step("python -c \"import importlib.resources as r; "
                "print(r.files('maxtext') / 'configs' / 'base.yml')\" > \"$base_config_file\"",
                or_exit=exit_codes.IMPORT_ERROR),
        'BASE_CONFIG=$(cat "$base_config_file")',
        # The shipped trainer code first on the path, as for the smoke test (its directory is read-only).
        f'export PYTHONPATH={shlex.quote(CODE_MOUNT)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        # No `exec`: bash stays PID 1 and forwards TERM to the trainer (workloads/pid_one.py), so a TERM during
        # the interpreter's start-up, before trainer.jobset_run's first statement, is not lost; from then on the
        # trainer's handler, then JAX's, receive it as before. Its trap replaces the steps' trap above.
        pid_one.TRAP_FIRST,
        *pid_one.supervise('python -m trainer.jobset_run "$BASE_CONFIG" "$@"'),
    ]
    mounts = [code_mount()]
    return _container(spec, jobset_name, "maxtext", ["bash", "-c", "\n".join(lines), "pre_train"],
                      list(overrides), mounts)


# ---- shape check (before anything is registered) --------------------------------------------------------

def shape_problems(obj: dict, shape: SliceShape, slices: int, quota: int) -> list[str]:
    """Mismatches between a JobSet and the slices it must fill; empty when it fits exactly."""
    name = obj["metadata"]["name"]
    problems = []
    for replicated in obj["spec"]["replicatedJobs"]:
        job = replicated["template"]["spec"]
        pod = job["template"]["spec"]
        selector = pod.get("nodeSelector", {})
        chips = sum(int(c["resources"]["limits"].get(TPU_RESOURCE, 0)) for c in pod["containers"])
        where = f"JobSet {name} replicatedJob {replicated['name']}"
        if replicated["replicas"] != slices:
            problems.append(f"{where}: replicas={replicated['replicas']} but the stack has slices={slices} node pools")
        if selector.get(TOPOLOGY_SELECTOR) != shape.topology:
            problems.append(f"{where}: node selector topology {selector.get(TOPOLOGY_SELECTOR)!r} but the slices "
                            f"are {shape.topology!r}")
        if chips != shape.chips_per_host:
            problems.append(f"{where}: {chips} {TPU_RESOURCE} per pod but a {shape.machine.name} VM has "
                            f"{shape.chips_per_host}")
        hosts = chips_in(shape.topology) // shape.chips_per_host
        for key in ("parallelism", "completions"):
            if job.get(key) != hosts:
                problems.append(f"{where}: {key}={job.get(key)} but topology {shape.topology} has {hosts} hosts "
                                f"of {shape.chips_per_host} chips")
        needed = replicated["replicas"] * job.get("parallelism", 1) * chips
        if needed > quota:
            problems.append(f"{where}: requests {needed} {TPU_RESOURCE} but the ClusterQueue quota is {quota}; "
                            "Kueue could never admit it")
    return problems
