"""Stack config: raw Pulumi config in, one validated, typed, frozen StackConfig out.

Every check happens here, before any resource is registered. All problems are collected and raised
together as one ConfigError whose lines each name the key, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import ipaddress
import json
from dataclasses import dataclass
from typing import Any, Mapping

from infra import naming, versions
from infra.config_schema import DERIVED, KEYS, KEYS_BY_NAME, NAMESPACE, REQUIRED, Key
from infra.tpu_catalog import CatalogError, SliceShape, slice_shape
from trainer.errors import PlanError
from trainer.maxtext_runtime import MIN_MAXTEXT
from trainer.planner import Plan, PlanRequest, plan
from trainer.presets import PRESETS


class ConfigError(ValueError):
    """Bad stack config; the message lists every problem, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack config:\n  " + "\n  ".join(problems))


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


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    mode: ClusterMode
    gke_version: str | None
    release_channel: str
    # What the cluster is created with: the user's version, or the highest minimum our features need.
    min_master_version: str
    deletion_protection: bool
    system_pool_machine_type: str
    system_pool_nodes: int

    @property
    def autopilot(self) -> bool:
        return self.mode is ClusterMode.AUTOPILOT


@dataclass(frozen=True)
class TpuSettings:
    shape: SliceShape
    slices: int
    capacity: Capacity
    reservation_name: str

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
class WorkloadSettings:
    backend: str
    plan: Plan                 # the trainer planner's verdict: mesh, batch, remat, memory per chip
    train_steps: int
    checkpoint_period: int
    max_failures: int
    maxtext_version: str
    ray_image: str
    ray_cluster_name: str
    ray_job_name: str
    dashboard_exposure: str
    dashboard_source_ranges: tuple[str, ...]

    @property
    def model(self) -> str:
        return self.plan.model.name

    @property
    def elastic(self) -> bool:
        return self.plan.elastic


@dataclass(frozen=True)
class JobSetSettings:
    """workloadBackend=jobset (JobSet + Kueue) and the smoke job of either backend."""
    image: str
    name_prefix: str
    max_restarts: int
    tpu_quota: int             # ClusterQueue nominal quota of google.com/tpu chips
    smoke_test: bool


@dataclass(frozen=True)
class PathwaysSettings:
    """workloadBackend=pathways: one Pathways JobSet whose head runs MaxText with elastic_retry."""
    job_name: str
    elastic_slices: int        # 0 = not elastic
    max_slice_restarts: int
    elastic_max_retries: int
    elastic_timeout_seconds: int
    profiling: bool
    server_image: str
    proxy_image: str
    trainer_image: str

    @property
    def elastic(self) -> bool:
        return self.elastic_slices > 0


@dataclass(frozen=True)
class StackConfig:
    gcp: GcpSettings
    cluster: ClusterSettings
    tpu: TpuSettings
    network: NetworkSettings
    storage: StorageSettings
    kubernetes: KubernetesSettings
    workload: WorkloadSettings
    jobset: JobSetSettings
    pathways: PathwaysSettings | None = None   # set when workloadBackend=pathways

    @property
    def names(self) -> naming.Names:
        return naming.Names(self.cluster.name)

    @property
    def pods_use_host_network(self) -> bool:
        """Whether the training pods run on the host network: Pathways always (its sidecars talk over host
        ports), JobSet when DCN NICs are not handed over by DRANET (xpk's multislice pods). Such pods do not
        get the Workload Identity metadata server (GKE: "Pods that use the host network" are a Workload
        Identity Federation limitation), so they reach the bucket as the node service account."""
        backend = self.workload.backend
        return backend == "pathways" or (backend == "jobset" and not self.network.dranet)


# ---------------------------------------------------------------------------------------------------
# Step 1: raw strings → typed values (types, choices, unknown keys, required keys)


def _parse_value(key: Key, raw: Any) -> Any:
    """Pulumi hands config values over as strings (arrays as JSON text)."""
    if key.type == "string":
        return str(raw)
    if key.type == "integer":
        if isinstance(raw, bool):
            raise ValueError
        return int(str(raw).strip())
    if key.type == "boolean":
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ValueError
        return text == "true"
    if key.type == "array":
        value = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError
        return tuple(value)
    raise AssertionError(key.type)


_TYPE_WORDS = {"integer": "an integer", "boolean": "true or false", "array": "a list of strings", "string": "a string"}


def parse_values(raw: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Typed values for every key (defaults filled in; DERIVED left as None)."""
    values: dict[str, Any] = {}
    for name in raw:
        if name not in KEYS_BY_NAME:
            close = difflib.get_close_matches(name, KEYS_BY_NAME, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(KEYS_BY_NAME))}"
            problems.append(f"{NAMESPACE}:{name} is not a config key of this stack{hint}")
    for key in KEYS:
        if key.name not in raw:
            if key.default is REQUIRED:
                problems.append(f"{NAMESPACE}:{key.name} is required: {key.description}")
            values[key.name] = None if key.default is REQUIRED else key.default
            continue
        try:
            value = _parse_value(key, raw[key.name])
        except (ValueError, TypeError):
            problems.append(f"{NAMESPACE}:{key.name}={raw[key.name]!r} must be {_TYPE_WORDS[key.type]}")
            values[key.name] = None
            continue
        if key.choices and value not in key.choices:
            problems.append(f"{NAMESPACE}:{key.name}={value!r} is not allowed; allowed: {', '.join(key.choices)}")
            value = None
        values[key.name] = value
    return values


# ---------------------------------------------------------------------------------------------------
# Step 2: typed values → StackConfig (cross-key rules)


def _problem(key: str, value: Any, allowed: str) -> str:
    return f"{NAMESPACE}:{key}={value!r} is not valid; {allowed}"


def _check_names(v: dict[str, Any], problems: list[str]) -> None:
    if v["project"] is not None and not naming.PROJECT_ID.match(v["project"]):
        problems.append(_problem("project", v["project"], "a project ID is 6-30 lowercase letters, digits or '-', "
                                 "starting with a letter"))
    if not naming.CLUSTER_NAME.match(v["clusterName"] or ""):
        problems.append(_problem("clusterName", v["clusterName"], "1-40 lowercase letters, digits or '-', starting "
                                 "with a letter and not ending with '-'"))
    if not naming.DNS1123_LABEL.match(v["namespace"] or ""):
        problems.append(_problem("namespace", v["namespace"], "a Kubernetes namespace is a DNS-1123 label: 1-63 "
                                 "lowercase letters, digits or '-'"))
    if not naming.DNS1123_SUBDOMAIN.match(v["serviceAccount"] or ""):
        problems.append(_problem("serviceAccount", v["serviceAccount"], "a Kubernetes service account name is a "
                                 "DNS-1123 subdomain"))


def _check_location(v: dict[str, Any], problems: list[str]) -> str | None:
    zone, region = v["zone"], v["region"]
    if zone is None:
        return None
    if not naming.ZONE.match(zone):
        problems.append(_problem("zone", zone, "a zone looks like us-east5-b"))
        return None
    if region is not None:
        if not naming.REGION.match(region):
            problems.append(_problem("region", region, "a region looks like us-east5"))
            return None
        if naming.region_of(zone) != region:
            problems.append(f"{NAMESPACE}:zone={zone!r} is not in {NAMESPACE}:region={region!r}; use a zone of "
                            f"{region} or set region to {naming.region_of(zone)}")
            return None
    return naming.region_of(zone)


def _check_tpu(v: dict[str, Any], problems: list[str]) -> SliceShape | None:
    shape = None
    if v["tpuGeneration"] is not None:
        try:
            shape = slice_shape(v["tpuGeneration"], v["tpuTopology"], v["tpuMachineType"])
        except CatalogError as error:
            allowed = ", ".join(error.allowed)
            problems.append(f"{NAMESPACE}:{error.key}={error.value!r} is not valid for "
                            f"tpuGeneration={v['tpuGeneration']!r}; allowed: {allowed}")
    slices = v["slices"]
    if slices is not None and slices < 1:
        problems.append(_problem("slices", slices, "at least 1"))
    if shape is not None and slices is not None and slices > 1 and not shape.multi_host:
        problems.append(f"{NAMESPACE}:slices={slices} needs multi-host slices, but tpuTopology={shape.topology!r} on "
                        f"{shape.machine.name} is single-host (GKE multislice supports multi-host node pools only); "
                        f"use a multi-host topology: {', '.join(shape.generation.multi_host_topologies)}")
    capacity = v["capacity"]
    if capacity == Capacity.RESERVATION.value and not v["reservationName"]:
        problems.append(f"{NAMESPACE}:capacity='reservation' needs {NAMESPACE}:reservationName (the reservation to "
                        "consume)")
    if capacity not in (None, Capacity.RESERVATION.value) and v["reservationName"]:
        problems.append(f"{NAMESPACE}:reservationName={v['reservationName']!r} conflicts with "
                        f"{NAMESPACE}:capacity={capacity!r}; set capacity to 'reservation' or unset reservationName")
    return shape


def _check_networks(v: dict[str, Any], problems: list[str]) -> None:
    ranges: list[tuple[str, Any]] = []
    for key in ("nodeCidr", "podCidr", "serviceCidr"):
        ranges.append((key, v[key]))
    if v["dcn"]:
        subnets = v["dcnSubnets"] or ()
        if not subnets:
            problems.append(_problem("dcnSubnets", list(subnets), "at least one range when dcn is true"))
        ranges += [(f"dcnSubnets[{i}]", cidr) for i, cidr in enumerate(subnets)]
        mtu = v["dcnMtu"]
        if mtu is not None and not 1300 <= mtu <= 8896:
            problems.append(_problem("dcnMtu", mtu, "a VPC MTU is 1300-8896"))
    parsed: list[tuple[str, ipaddress.IPv4Network]] = []
    for key, cidr in ranges:
        if cidr is None:
            continue
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            problems.append(_problem(key, cidr, "an IPv4 range in CIDR form with no host bits, e.g. 10.50.0.0/16"))
            continue
        if not network.is_private:
            problems.append(_problem(key, cidr, "use a private (RFC 1918) range"))
            continue
        for other_key, other in parsed:
            if network.overlaps(other):
                problems.append(f"{NAMESPACE}:{key}={cidr!r} overlaps {NAMESPACE}:{other_key}={str(other)!r}; "
                                "every range must be distinct")
        parsed.append((key, network))
    if v["dranet"] and not v["dcn"]:
        problems.append(f"{NAMESPACE}:dranet=true needs {NAMESPACE}:dcn=true (DRANET hands out the DCN NICs)")


def _required_versions(v: dict[str, Any], shape: SliceShape | None) -> dict[str, str]:
    """Why each minimum GKE version applies → the version."""
    autopilot = v["clusterMode"] == ClusterMode.AUTOPILOT.value
    needs = {"the Ray operator add-on": versions.RAY_OPERATOR_ADDON}
    if shape is not None:
        needs[f"tpuGeneration={shape.generation.name}"] = shape.generation.min_gke_version
    if (v["slices"] or 0) > 1:
        needs["multislice"] = versions.MULTISLICE_AUTOPILOT if autopilot else versions.MULTISLICE_STANDARD
    if v["dranet"]:
        needs["dranet=true"] = versions.DRANET_AUTOPILOT if autopilot else versions.DRANET_STANDARD
    return needs


def _check_version(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> str:
    needs = _required_versions(v, shape)
    requested = v["gkeVersion"]
    if requested is None:
        return versions.highest(list(needs.values()))
    if not versions.is_valid(requested):
        problems.append(_problem("gkeVersion", requested, "a GKE version looks like 1.34 or 1.34.1-gke.1829001"))
        return requested
    for reason, minimum in needs.items():
        if not versions.satisfies(requested, minimum):
            problems.append(f"{NAMESPACE}:gkeVersion={requested!r} is below {minimum}, the minimum for {reason}")
    return requested


def _check_autopilot(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> None:
    if v["clusterMode"] != ClusterMode.AUTOPILOT.value:
        return
    why = "Autopilot creates and configures nodes itself"
    for key in ("systemPoolMachineType", "systemPoolNodes", "tpuMachineType"):
        if key in raw:
            problems.append(f"{NAMESPACE}:{key} conflicts with {NAMESPACE}:clusterMode='autopilot' ({why}); "
                            "unset it or use clusterMode=standard")
    if v["dcn"]:
        problems.append(f"{NAMESPACE}:dcn=true conflicts with {NAMESPACE}:clusterMode='autopilot' ({why} and cannot "
                        "attach extra node networks to TPU VMs); use clusterMode=standard or dcn=false")


def _check_storage(v: dict[str, Any], region: str | None, problems: list[str]) -> tuple[str, str]:
    bucket = v["bucketName"]
    if bucket is None:
        bucket = f"{v['project'] or 'project'}-{v['clusterName']}-ckpt"
        reason = naming.bucket_problem(bucket)
        if reason:
            problems.append(f"{NAMESPACE}:bucketName is unset and the derived name {bucket!r} is not valid ({reason}); "
                            "set bucketName")
    else:
        reason = naming.bucket_problem(bucket)
        if reason:
            problems.append(_problem("bucketName", bucket, reason))
    days = v["softDeleteDays"]
    if days is not None and not (days == 0 or 7 <= days <= 90):
        problems.append(_problem("softDeleteDays", days, "0 (off) or 7-90 days"))
    return bucket, v["bucketLocation"] or (region or "")


RAYJOB_NAME_MAX = 47
RAYCLUSTER_NAME_MAX = 53
JOB_HASH_SUFFIX = 9     # "-" + 8 hex characters


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) and len(parts) == 3 else None


def _plan_workload(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> Plan | None:
    """Run the trainer's planner on the config: unknown models, batches that do not divide and models that
    do not fit in HBM are refused here, before anything is registered."""
    if shape is None or v["slices"] is None or v["slices"] < 1:
        return None
    model = v["model"]
    if model not in PRESETS or PRESETS[model].cpu_only:
        allowed = ", ".join(name for name, p in PRESETS.items() if not p.cpu_only)
        problems.append(_problem("model", model, f"allowed: {allowed}"))
        return None
    batch = None
    if v["perDeviceBatchSize"] is not None:
        try:
            batch = float(v["perDeviceBatchSize"])
            if batch <= 0:
                raise ValueError
        except ValueError:
            problems.append(_problem("perDeviceBatchSize", v["perDeviceBatchSize"], "a positive number"))
            return None
    slices, min_slices = v["slices"], v["elasticMinSlices"]
    if min_slices is not None and not 1 <= min_slices <= slices:
        problems.append(_problem("elasticMinSlices", min_slices, f"whole slices from 1 to slices={slices}"))
        return None
    request = PlanRequest(model=model, generation=shape.generation.name, topology=shape.topology, slices=slices,
                          min_slices=min_slices, per_device_batch_size=batch)
    if min_slices is None and v["capacity"] == Capacity.SPOT.value:
        # Spot: keep training on as few slices as the model fits on while preempted slices come back.
        for candidate in range(1, slices + 1):
            try:
                return plan(dataclasses.replace(request, min_slices=candidate))
            except PlanError:
                continue
    try:
        return plan(request)
    except PlanError as error:
        keys = f"model={model!r}, {shape.pod_type} x {slices} slices"
        if min_slices is not None:
            keys += f", elasticMinSlices={min_slices}"
        problems.append(f"{NAMESPACE}: {keys} is refused by the planner: {error}")
        return None


def _check_pinned_image(key: str, image: str, problems: list[str]) -> str:
    """Images must be pinned: a release tag or a digest, never latest/nightly. Returns the tag."""
    tag = naming.image_tag(image)
    if "@sha256:" not in image and (not tag or tag == "latest" or "nightly" in tag):
        problems.append(_problem(key, image, "a pinned tag or digest (not latest or nightly), e.g. "
                                 f"{KEYS_BY_NAME[key].default}"))
    return tag


def _check_dns1035(key: str, name: str, limit: int, problems: list[str]) -> None:
    if not naming.DNS1035_LABEL.match(name) or len(name) > limit:
        problems.append(_problem(key, name, f"a DNS-1035 label of at most {limit} characters (lowercase letters, "
                                 "digits, '-', starting with a letter)"))


def _check_workload(v: dict[str, Any], problems: list[str]) -> None:
    for key in ("trainSteps", "checkpointPeriod"):
        if v[key] is not None and v[key] < 1:
            problems.append(_problem(key, v[key], "at least 1"))
    if v["trainSteps"] and v["checkpointPeriod"] and v["checkpointPeriod"] > v["trainSteps"]:
        problems.append(f"{NAMESPACE}:checkpointPeriod={v['checkpointPeriod']} is larger than "
                        f"{NAMESPACE}:trainSteps={v['trainSteps']}: only step 0 would be saved, so a restart would "
                        "rewind to the beginning; use a period of at most trainSteps")
    if v["maxFailures"] is not None and v["maxFailures"] < -1:
        problems.append(_problem("maxFailures", v["maxFailures"], "-1 (retry forever) or at least 0"))
    version = _version_tuple(v["maxtextVersion"] or "")
    if version is None or version < MIN_MAXTEXT:
        problems.append(_problem("maxtextVersion", v["maxtextVersion"], "a release X.Y.Z of at least 0.2.2 (older "
                                 "releases silently train the wrong model)"))
    _check_pinned_image("rayImage", v["rayImage"] or "", problems)
    for key, limit in (("rayClusterName", RAYCLUSTER_NAME_MAX), ("rayJobName", RAYJOB_NAME_MAX - JOB_HASH_SUFFIX)):
        _check_dns1035(key, v[key] or "", limit, problems)
    if v["dashboardExposure"] == "internal-lb":
        ranges = v["dashboardSourceRanges"] or ()
        if not ranges:
            problems.append(f"{NAMESPACE}:dashboardExposure='internal-lb' needs {NAMESPACE}:dashboardSourceRanges "
                            "(the Ray job API runs arbitrary code: name who may reach it)")
        for index, cidr in enumerate(ranges):
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                problems.append(_problem(f"dashboardSourceRanges[{index}]", cidr, "a CIDR range, e.g. 10.0.0.0/8"))


JOBSET_PREFIX_MAX = 24   # leaves room for "-smoke-" + hash and the pod hostnames (<=63) JobSet derives


def _check_jobset(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> None:
    """JobSet + Kueue settings; the quota rule applies only when the jobset backend will queue workloads."""
    if v["maxRestarts"] is not None and v["maxRestarts"] < 0:
        problems.append(_problem("maxRestarts", v["maxRestarts"], "0 or more (JobSet failurePolicy.maxRestarts)"))
    _check_dns1035("jobsetName", v["jobsetName"] or "", JOBSET_PREFIX_MAX, problems)
    _check_pinned_image("jobsetImage", v["jobsetImage"] or "", problems)
    quota = v["kueueTpuQuota"]
    if v["workloadBackend"] != "jobset" or shape is None or v["slices"] is None or quota is None:
        return
    needed = v["slices"] * shape.chips
    if quota < needed:
        problems.append(f"{NAMESPACE}:kueueTpuQuota={quota} cannot admit the workload: it requests slices x chips "
                        f"= {v['slices']} x {shape.chips} = {needed} google.com/tpu at once; allowed: at least "
                        f"{needed} (or unset)")


PATHWAYS_NAME_MAX = 28        # MaxText's elastic-training guide: Pathways workload names of at most 28 characters
PATHWAYS_MIN_MAXTEXT = (0, 2, 4)   # the release that brought elastic_enabled / elastic_max_retries (same guide)
# GiB per vCPU of a Compute Engine machine class, for the rough "does the head fit" check (Compute Engine
# general-purpose machine family tables; n1-standard has 3.75, rounded down to 3 here to stay conservative).
_GIB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}


def _machine_capacity(machine_type: str) -> tuple[int, int] | None:
    """(vCPUs, GiB) from a predefined machine type name like n2-standard-64; None when the name is not one."""
    parts = machine_type.split("-")
    if len(parts) != 3 or parts[1] not in _GIB_PER_VCPU or not parts[2].isdigit():
        return None
    vcpus = int(parts[2])
    per_vcpu = 3 if (parts[0], parts[1]) == ("n1", "standard") else _GIB_PER_VCPU[parts[1]]
    return vcpus, vcpus * per_vcpu


def _check_pathways(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> PathwaysSettings | None:
    """workloadBackend=pathways: elastic settings, supported TPUs, pinned images, where the head runs."""
    if v["workloadBackend"] != "pathways":
        return None
    # Local import: the Pathways instance-type table and head sizes live beside the manifests that use them.
    from workloads.pathways_manifests import PATHWAYS_TPU_VERSIONS, head_requests

    _check_dns1035("pathwaysJobName", v["pathwaysJobName"] or "", PATHWAYS_NAME_MAX, problems)
    slices, elastic = v["slices"], v["pathwaysElasticSlices"]
    if elastic is not None and elastic < 0:
        problems.append(_problem("pathwaysElasticSlices", elastic, "0 (not elastic) or more"))
    elif elastic is not None and slices is not None and slices >= 1 and elastic >= slices:
        problems.append(f"{NAMESPACE}:pathwaysElasticSlices={elastic} is not below {NAMESPACE}:slices={slices}: the "
                        f"run must keep at least one slice; allowed: 0 to {slices - 1}")
    is_elastic = bool(elastic and elastic > 0)
    retries, restarts = v["pathwaysElasticMaxRetries"], v["pathwaysMaxSliceRestarts"]
    if retries is not None and retries < 0:
        problems.append(_problem("pathwaysElasticMaxRetries", retries, "0 or more (1 or more when elastic)"))
    elif retries == 0 and is_elastic:
        # pathwaysutils' elastic_retry raises "max_retries must be positive" and training would never start.
        problems.append(_problem("pathwaysElasticMaxRetries", retries, "at least 1 when pathwaysElasticSlices > 0 "
                                 "(pathwaysutils refuses max_retries=0)"))
    if restarts is not None and restarts < 0:
        problems.append(_problem("pathwaysMaxSliceRestarts", restarts, "0 or more"))
    elif restarts == 0 and is_elastic:
        problems.append(_problem("pathwaysMaxSliceRestarts", restarts, "at least 1 when pathwaysElasticSlices > 0 "
                                 "(a lost slice must be allowed to restart to come back)"))
    timeout = v["pathwaysElasticTimeoutSeconds"]
    if timeout is not None and timeout < 1:
        problems.append(_problem("pathwaysElasticTimeoutSeconds", timeout, "at least 1 second"))
    if v["pathwaysProfiling"] and is_elastic:
        problems.append(f"{NAMESPACE}:pathwaysProfiling=true conflicts with {NAMESPACE}:pathwaysElasticSlices="
                        f"{elastic}: MaxText does not support an elastic event during a profile; profile a separate "
                        "run with pathwaysElasticSlices=0")
    if v["elasticMinSlices"] is not None:
        problems.append(f"{NAMESPACE}:elasticMinSlices conflicts with {NAMESPACE}:workloadBackend='pathways': "
                        "Pathways restores the last checkpoint on the full mesh instead of continuing on fewer "
                        "slices; unset it and set pathwaysElasticSlices")
    if shape is not None and shape.machine.name not in PATHWAYS_TPU_VERSIONS:
        supported = sorted(PATHWAYS_TPU_VERSIONS)
        problems.append(f"{NAMESPACE}:tpuGeneration={shape.generation.name!r} on {shape.machine.name} is not "
                        f"supported by Pathways on GKE (no Pathways instance type); allowed machine types: "
                        f"{', '.join(supported)}")
    if v["clusterMode"] == ClusterMode.AUTOPILOT.value:
        problems.append(f"{NAMESPACE}:clusterMode='autopilot' conflicts with {NAMESPACE}:workloadBackend='pathways': "
                        "the Pathways pods use hostNetwork and the head needs a large CPU node (xpk runs Pathways "
                        "on Standard clusters with a CPU pool); use clusterMode=standard")
    if v["dranet"]:
        problems.append(f"{NAMESPACE}:dranet=true conflicts with {NAMESPACE}:workloadBackend='pathways': Pathways "
                        "workers run with hostNetwork and already see every NIC of the TPU VM; set dranet=false")
    tags = {key: _check_pinned_image(key, v[key] or "", problems)
            for key in ("pathwaysServerImage", "pathwaysProxyImage", "pathwaysTrainerImage")}
    server_tag, proxy_tag = tags["pathwaysServerImage"], tags["pathwaysProxyImage"]
    if server_tag.startswith("jax-") and proxy_tag.startswith("jax-") and server_tag != proxy_tag:
        problems.append(f"{NAMESPACE}:pathwaysProxyImage tag {proxy_tag!r} differs from {NAMESPACE}:"
                        f"pathwaysServerImage tag {server_tag!r}: the proxy and the servers must be one Pathways "
                        "release")
    trainer_version = _version_tuple(tags["pathwaysTrainerImage"])
    if is_elastic and trainer_version is not None and trainer_version < PATHWAYS_MIN_MAXTEXT:
        problems.append(_problem("pathwaysTrainerImage", v["pathwaysTrainerImage"], "MaxText 0.2.4 or later for "
                                 "elastic training (elastic_enabled, elastic_max_retries)"))
    machine = v["systemPoolMachineType"] or ""
    capacity = _machine_capacity(machine)
    cpu, memory_gib = head_requests()
    if v["clusterMode"] != ClusterMode.AUTOPILOT.value and capacity is not None and (
            capacity[0] <= cpu or capacity[1] <= memory_gib):
        problems.append(f"{NAMESPACE}:systemPoolMachineType={machine!r} ({capacity[0]} vCPU, {capacity[1]} GiB) "
                        f"cannot hold the Pathways head ({cpu} vCPU, {memory_gib:.0f} GiB requested, plus system "
                        "pods); use a larger machine, e.g. n2-standard-64 as in the Pathways on GKE guide")
    if problems:
        return None
    return PathwaysSettings(
        job_name=v["pathwaysJobName"], elastic_slices=elastic, max_slice_restarts=restarts, elastic_max_retries=retries,
        elastic_timeout_seconds=timeout, profiling=v["pathwaysProfiling"], server_image=v["pathwaysServerImage"],
        proxy_image=v["pathwaysProxyImage"], trainer_image=v["pathwaysTrainerImage"])


def build(raw: Mapping[str, Any]) -> StackConfig:
    """Validate raw config (key without namespace → value as Pulumi stores it) into a StackConfig."""
    problems: list[str] = []
    v = parse_values(raw, problems)
    _check_names(v, problems)
    region = _check_location(v, problems)
    shape = _check_tpu(v, problems)
    _check_networks(v, problems)
    min_version = _check_version(v, shape, problems)
    _check_autopilot(v, raw, problems)
    bucket, bucket_location = _check_storage(v, region, problems)
    if v["systemPoolNodes"] is not None and v["systemPoolNodes"] < 1:
        problems.append(_problem("systemPoolNodes", v["systemPoolNodes"], "at least 1 (the Ray head runs there)"))
    _check_workload(v, problems)
    _check_jobset(v, shape, problems)
    pathways = _check_pathways(v, shape, problems)
    workload_plan = _plan_workload(v, shape, problems)
    if problems:
        raise ConfigError(problems)
    assert shape is not None and region is not None and workload_plan is not None
    spot = v["capacity"] == Capacity.SPOT.value
    return StackConfig(
        gcp=GcpSettings(project=v["project"], region=region, zone=v["zone"]),
        cluster=ClusterSettings(
            name=v["clusterName"], mode=ClusterMode(v["clusterMode"]), gke_version=v["gkeVersion"],
            release_channel=v["releaseChannel"], min_master_version=min_version,
            deletion_protection=v["deletionProtection"], system_pool_machine_type=v["systemPoolMachineType"],
            system_pool_nodes=v["systemPoolNodes"]),
        tpu=TpuSettings(shape=shape, slices=v["slices"], capacity=Capacity(v["capacity"]),
                        reservation_name=v["reservationName"]),
        network=NetworkSettings(
            node_cidr=v["nodeCidr"], pod_cidr=v["podCidr"], service_cidr=v["serviceCidr"], dcn=v["dcn"],
            dcn_mtu=v["dcnMtu"], dcn_subnets=tuple(v["dcnSubnets"]) if v["dcn"] else (), dranet=v["dranet"]),
        storage=StorageSettings(bucket_name=bucket, location=bucket_location,
                                keep_on_destroy=v["keepCheckpointsOnDestroy"], soft_delete_days=v["softDeleteDays"]),
        kubernetes=KubernetesSettings(namespace=v["namespace"], service_account=v["serviceAccount"]),
        workload=WorkloadSettings(
            backend=v["workloadBackend"], plan=workload_plan, train_steps=v["trainSteps"],
            checkpoint_period=v["checkpointPeriod"],
            max_failures=v["maxFailures"] if v["maxFailures"] is not None else (-1 if spot else 3),
            maxtext_version=v["maxtextVersion"], ray_image=v["rayImage"], ray_cluster_name=v["rayClusterName"],
            ray_job_name=v["rayJobName"], dashboard_exposure=v["dashboardExposure"],
            dashboard_source_ranges=tuple(v["dashboardSourceRanges"])),
        jobset=JobSetSettings(
            image=v["jobsetImage"], name_prefix=v["jobsetName"], max_restarts=v["maxRestarts"],
            tpu_quota=v["kueueTpuQuota"] if v["kueueTpuQuota"] is not None else v["slices"] * shape.chips,
            smoke_test=v["smokeTest"]),
        pathways=pathways,
    )


def raw_from_pulumi() -> dict[str, Any]:
    """This project's config as the Pulumi engine passed it (namespace stripped). Other namespaces
    (gcp:, kubernetes:) belong to providers and are left alone."""
    from pulumi.runtime import config as runtime_config

    merged = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix):]: value for key, value in merged.items() if key.startswith(prefix)}
