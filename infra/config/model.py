"""The typed, validated stack config: frozen settings, one section per concern, one settings type per backend.

Components take the section they need (the network its NetworkSettings, the bucket its StorageSettings); the
workload backend's own settings are exactly one of RaySettings, JobSetSettings or PathwaysSettings.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Mapping, Union

from core.cli_errors import fit_columns
from core.planner import Plan
from core.pod_sizing import TpuPodSize
from core.preemption import ShutdownBudget
from core.tpu_catalog import SliceShape
from infra import naming, versions


class Problem(str):
    """One refusal as printed (a str, so it joins and compares as the line it is) that also keeps its parts: the
    key the user set, the value and what is allowed, for a reader that is a program (the plan's --json)."""

    key: str | None
    value: Any
    allowed: Any        # a sentence, or the list of values a key accepts

    def __new__(cls, text: str, key: str | None = None, value: Any = None, allowed: Any = None) -> "Problem":
        made = super().__new__(cls, text)
        made.key, made.value, made.allowed = key, value, allowed
        return made


# The key a refusal line names first (every line names the key the user set: docs/configuration.md).
_NAMED_KEY = re.compile(r"\btpu-multislice:([A-Za-z][A-Za-z0-9]*)")


class ConfigError(ValueError):
    """Bad stack config; the message lists every problem, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        # As `pulumi up` prints it: each problem laid out within 100 columns (core/cli_errors.fit_columns).
        super().__init__("invalid stack config:\n" + "\n".join(fit_columns("  " + p) for p in problems))

    def details(self, raw: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each problem as {key, value, message, allowed}. A Problem carries its parts; a rule between keys that
        wrote its line whole gives the key it names first, that key's value as the user set it (`raw`) and no
        separate `allowed` (its message says what is)."""
        rows = []
        for text in self.problems:
            key = getattr(text, "key", None)
            if key is None and (named := _NAMED_KEY.search(str(text).split("\n", 1)[0])):
                key = named.group(1)
            value = text.value if isinstance(text, Problem) else raw.get(key) if key else None
            rows.append({"key": key, "value": value, "message": str(text), "allowed": getattr(text, "allowed", None)})
        return rows


class ClusterMode(str, enum.Enum):
    STANDARD = "standard"
    AUTOPILOT = "autopilot"


class Capacity(str, enum.Enum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVATION = "reservation"
    FLEX_START = "flex-start"


@dataclass(frozen=True)
class GcpSettings:
    project: str
    region: str
    zone: str
    # adminBootstrap: the service accounts and the goodput reader role exist (the admin's step); the stack uses them.
    admin_bootstrap: bool = False


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    mode: ClusterMode
    gke_version: str | None      # the user's gkeVersion; None: GKE creates at the release channel's default
    release_channel: str
    # Why each minimum GKE version applies → that minimum. Floors are checked, never created with: GKE refuses
    # to create versions it no longer offers (infra/gke_versions.py checks what the location offers).
    version_floors: tuple[tuple[str, str], ...]
    deletion_protection: bool
    system_pool_machine_type: str
    system_pool_nodes: int
    # CIDRs allowed to reach the control plane's public IP endpoint; empty: no public IP endpoint, only the DNS
    # endpoint with IAM (infra/cluster.py).
    authorized_networks: tuple[str, ...] = ()

    @property
    def autopilot(self) -> bool:
        return self.mode is ClusterMode.AUTOPILOT

    @property
    def minimum_version(self) -> str:
        """The highest floor: the oldest control plane every enabled feature works on."""
        return versions.highest([floor for _, floor in self.version_floors])


@dataclass(frozen=True)
class TpuSettings:
    shape: SliceShape
    slices: int
    capacity: Capacity
    reservation_name: str
    warm_slices: int = 0        # pools that keep their hosts while idle; the others scale 0..hosts

    def pool_bounds(self, index: int) -> tuple[int, int]:
        """(min, max) nodes of slice `index`'s pool in its zone: 0..hosts, or hosts..hosts when warm."""
        hosts = self.shape.hosts
        return (hosts if index < self.warm_slices else 0), hosts

    @property
    def total_hosts(self) -> int:
        return self.slices * self.shape.hosts

    @property
    def total_chips(self) -> int:
        return self.slices * self.shape.chips


@dataclass(frozen=True)
class NetworkSettings:
    node_cidr: str
    pod_cidr: str
    service_cidr: str
    dcn: bool
    dcn_mtu: int
    dcn_subnets: tuple[str, ...]
    dranet: bool


@dataclass(frozen=True)
class StorageSettings:
    bucket_name: str
    location: str
    keep_on_destroy: bool
    soft_delete_days: int


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str
    service_account: str


@dataclass(frozen=True)
class TrainingRun:
    """What the run trains on, from which weights, with which further MaxText settings, under which name."""
    run_name: str                         # runName, or the backend's default (job name and model)
    dataset_type: str = "synthetic"
    dataset_path: str = ""                # gs:// glob (datasetType=grain)
    eval_dataset_path: str = ""           # gs:// glob; "" = no eval
    eval_interval: int = 0                # steps between evals; 0 without an eval split
    eval_steps: int = 0                   # batches per eval pass; 0: the whole split (one host only)
    load_parameters_path: str = ""        # gs:// Orbax checkpoint a new run starts from
    data_cache_gib: int = 0               # dataCacheGiB: the FUSE file cache disk of each pod that reads data
    # maxtextSettings the run passes on as they are (the planned ones are in the plan); ordered as written.
    maxtext_settings: tuple[tuple[str, str], ...] = ()

    @property
    def read_paths(self) -> tuple[str, ...]:
        """Every gs:// path the run only reads: its data and its starting weights."""
        return tuple(path for path in (self.dataset_path, self.eval_dataset_path, self.load_parameters_path)
                     if path)


@dataclass(frozen=True)
class WorkloadSettings:
    """What every backend trains: the planner's verdict and the run's length."""
    backend: str
    plan: Plan                 # the planner's verdict: mesh, batch, remat, memory per chip
    tpu_pod: TpuPodSize        # each TPU pod's requests and limits for this plan and backend (core/pod_sizing.py)
    train_steps: int
    checkpoint_period: int
    checkpoints_to_keep: int   # MaxText max_num_checkpoints_to_keep
    maxtext_version: str
    smoke_test: bool           # run the multislice smoke test before training
    worker_environment: str    # "runtime": install the lock at start; "image": run the image built from it
    shutdown: ShutdownBudget   # what the TPU pods and Spot pools get to save at a notice (infra/config/preemption.py)
    run: TrainingRun           # data, starting weights, further MaxText settings, run name
    # False: the plan is kept over XLA's HBM limit (memoryCheck: false, after a compile that fits); the Ray
    # entrypoint, which plans again, is told so.
    memory_check: bool = True
    # compileCheck: which of the run's steps are compiled before you pay (auto: each without a kept verdict).
    compile_check: str = "auto"

    @property
    def model(self) -> str:
        return self.plan.model.name

    @property
    def elastic(self) -> bool:
        return self.plan.elastic


@dataclass(frozen=True)
class WorkerImageSettings:
    """workerEnvironment=image: where the stack pushes the image it builds from worker_env/Dockerfile."""
    repository_id: str
    builder: str = "cloud-build"           # imageBuilder: cloud-build | docker
    staging_bucket: str | None = None      # cloud-build: the bucket its build contexts are uploaded to
    build_account_id: str | None = None    # cloud-build: the service account the build runs as
    build_region: str | None = None        # cloud-build: where the build runs (imageBuildRegion resolved)


@dataclass(frozen=True)
class RaySettings:
    """workloadBackend=rayjob: a RayCluster and a RayJob running the trainer entrypoint."""
    image: str
    cluster_name: str
    job_name: str
    max_failures: int
    dashboard_exposure: str
    dashboard_source_ranges: tuple[str, ...]
    # capacityWaitSeconds: the longest wait for capacity, the first (RayJob preRunningDeadlineSeconds) and every
    # later one with no worker group running (the trainer's watchdog); None: no limit.
    capacity_wait_s: int | None = None

    @property
    def pre_running_deadline_s(self) -> int | None:
        """RayJob preRunningDeadlineSeconds: the first wait for capacity, bounded like every other."""
        return self.capacity_wait_s


@dataclass(frozen=True)
class JobSetSettings:
    """workloadBackend=jobset: JobSet + Kueue."""
    image: str
    name_prefix: str
    max_restarts: int
    tpu_quota: int             # ClusterQueue nominal quota of google.com/tpu chips


@dataclass(frozen=True)
class PathwaysSettings:
    """workloadBackend=pathways: one Pathways JobSet whose head runs MaxText with elastic_retry."""
    job_name: str
    elastic_slices: int        # 0 = not elastic
    max_slice_restarts: int
    max_restarts: int          # JobSet failurePolicy.maxRestarts of the Pathways JobSet
    elastic_max_retries: int
    elastic_timeout_seconds: int
    profiling: bool
    server_image: str
    proxy_image: str
    trainer_image: str

    @property
    def elastic(self) -> bool:
        return self.elastic_slices > 0


BackendSettings = Union[RaySettings, JobSetSettings, PathwaysSettings]


class Role(str, enum.Enum):
    CLUSTER_AND_RUN = "cluster-and-run"
    CLUSTER = "cluster"
    RUN = "run"


# The node label each run's slice pools carry and its TPU pods select, so a run's pods never land on (or scale
# up) another run's pools of the same TPU shape.
RUN_POOL_LABEL = "tpu-multislice/run"


@dataclass(frozen=True)
class StackRole:
    role: Role = Role.CLUSTER_AND_RUN
    cluster_stack: str | None = None      # run: ORG/PROJECT/STACK of the cluster stack
    run: str | None = None                # run: its stack name, the stem every name of the run is made from
    tpu_quota: int | None = None          # cluster: the shared ClusterQueue's google.com/tpu quota
    run_stacks: tuple[str, ...] = ()      # cluster: runs on it (the cluster is protected while any are listed)
    # run: its cluster stack's runStacks as config build read them (None: the cluster's outputs were not read)
    cluster_run_stacks: tuple[str, ...] | None = None

    @property
    def owns_cluster(self) -> bool:
        return self.role is not Role.RUN

    @property
    def has_run(self) -> bool:
        return self.role is not Role.CLUSTER

    @property
    def reference(self) -> str | None:
        """A run stack's fully qualified name, in its cluster stack's organization and project (what the
        cluster's runStacks lists)."""
        if self.cluster_stack is None or self.run is None:
            return None
        return f"{self.cluster_stack.rsplit('/', 1)[0]}/{self.run}"

    @property
    def listed_on_cluster(self) -> bool | None:
        """Whether the cluster stack's runStacks lists this run (None: not read, or not a run)."""
        if self.cluster_run_stacks is None or self.reference is None:
            return None
        return self.reference in self.cluster_run_stacks

    @property
    def pool_labels(self) -> dict[str, str]:
        return {RUN_POOL_LABEL: self.run} if self.run else {}



@dataclass(frozen=True)
class StackConfig:
    gcp: GcpSettings
    cluster: ClusterSettings
    tpu: TpuSettings
    network: NetworkSettings
    storage: StorageSettings
    kubernetes: KubernetesSettings
    workload: WorkloadSettings
    backend: BackendSettings
    worker_image: WorkerImageSettings | None = None   # set when workerEnvironment=image
    # Changes of the run's shape the user did not ask for (shape_changes.py ShapeChange): warned at the top of the
    # plan and by `pulumi up`.
    shape_changes: tuple[Any, ...] = ()
    # Which lifecycle the stack holds (infra/config/stack_role.py): default, the cluster with its one run.
    stack: StackRole = StackRole()

    @property
    def names(self) -> naming.Names:
        # A run on a shared cluster names what it creates from its run stack, so two runs never collide.
        return naming.RunNames(self.cluster.name, self.stack.run) if self.stack.run else naming.Names(self.cluster.name)

    def _backend(self, kind: type):
        if not isinstance(self.backend, kind):
            raise TypeError(f"workloadBackend={self.workload.backend!r} has no {kind.__name__}")
        return self.backend

    @property
    def ray(self) -> RaySettings:
        return self._backend(RaySettings)

    @property
    def jobset(self) -> JobSetSettings:
        return self._backend(JobSetSettings)

    @property
    def pathways(self) -> PathwaysSettings:
        return self._backend(PathwaysSettings)

    @property
    def pods_use_host_network(self) -> bool:
        """Whether the training pods run on the host network: Pathways always (its sidecars talk over host
        ports), JobSet when DCN NICs are not handed over by DRANET (xpk's multislice pods). Such pods do not
        get the Workload Identity metadata server (GKE: "Pods that use the host network" are a Workload
        Identity Federation limitation), so they reach the bucket as the node service account."""
        backend = self.workload.backend
        return backend == "pathways" or (backend == "jobset" and not self.network.dranet)
