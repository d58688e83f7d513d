"""Step 2 of config build: rules that relate two or more keys. Each appends one line per mistake to
`problems`, naming the key the user set; values refused in step 1 arrive as None and are skipped."""
from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
from pathlib import Path
from typing import Any, Mapping

from core.errors import PlanError
from core.maxtext_facts import PATHWAYS_MIN_MAXTEXT, release_tuple
from core.pathways import PATHWAYS_TPU_VERSIONS, head_requests
from core.planner import Plan, PlanRequest, plan
from core.presets import PRESETS
from core.tpu_catalog import CatalogError, SliceShape, slice_shape
from core.worker_lock import LOCK_PATH, PYTHON, load_pins
from infra import naming, versions
from infra.config.model import Capacity, ClusterMode
from infra.config.parse import problem
from infra.config.schema import KEYS_BY_NAME, NAMESPACE

# GKE flex-start provisioning: "TPU v3 and v4 are not supported"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model).
FLEX_START_UNSUPPORTED = ("v4",)
# TPU machine families with managed DRANET (cluster-toolkit modules/compute/gke-node-pool
# `is_dranet_supported_machine`: prefixes a3-, a4-, a4x-, ct6e-, tpu7x-).
DRANET_MACHINE_PREFIXES = ("ct6e-", "tpu7x-")


def check_location(v: dict[str, Any], problems: list[str]) -> str | None:
    """The region: derived from the zone, or the user's, which must contain the zone."""
    zone, region = v["zone"], v["region"]
    if zone is None:
        return None
    if region is not None and naming.region_of(zone) != region:
        problems.append(f"{NAMESPACE}:zone={zone!r} is not in {NAMESPACE}:region={region!r}; use a zone of "
                        f"{region} or set region to {naming.region_of(zone)}")
        return None
    return naming.region_of(zone)


def check_tpu(v: dict[str, Any], problems: list[str]) -> SliceShape | None:
    shape = None
    if v["tpuGeneration"] is not None and v["tpuTopology"] is not None:
        try:
            shape = slice_shape(v["tpuGeneration"], v["tpuTopology"], v["tpuMachineType"])
        except CatalogError as error:
            allowed = ", ".join(error.allowed)
            problems.append(f"{NAMESPACE}:{error.key}={error.value!r} is not valid for "
                            f"tpuGeneration={v['tpuGeneration']!r}; allowed: {allowed}")
    slices = v["slices"]
    if shape is not None and slices is not None and slices > 1 and not shape.multi_host:
        problems.append(f"{NAMESPACE}:slices={slices} needs multi-host slices, but tpuTopology={shape.topology!r} on "
                        f"{shape.machine.name} is single-host (GKE multislice supports multi-host node pools only); "
                        f"use a multi-host topology: {', '.join(shape.generation.multi_host_topologies)}")
    capacity = v["capacity"]
    if capacity == Capacity.FLEX_START.value and shape is not None and shape.generation.name in FLEX_START_UNSUPPORTED:
        # GKE "About flex-start provisioning mode": "TPU v3 and v4 are not supported."
        problems.append(f"{NAMESPACE}:capacity='flex-start' is not offered for tpuGeneration="
                        f"{shape.generation.name!r} (GKE flex-start does not support TPU v3 and v4); use on-demand, "
                        "spot or reservation, or a newer generation")
    if capacity == Capacity.RESERVATION.value and not v["reservationName"]:
        problems.append(f"{NAMESPACE}:capacity='reservation' needs {NAMESPACE}:reservationName (the reservation to "
                        "consume)")
    if capacity not in (None, Capacity.RESERVATION.value) and v["reservationName"]:
        problems.append(f"{NAMESPACE}:reservationName={v['reservationName']!r} conflicts with "
                        f"{NAMESPACE}:capacity={capacity!r}; set capacity to 'reservation' or unset reservationName")
    return shape


def check_networks(v: dict[str, Any], problems: list[str]) -> None:
    ranges: list[tuple[str, Any]] = [(key, v[key]) for key in ("nodeCidr", "podCidr", "serviceCidr")]
    if v["dcn"]:
        subnets = v["dcnSubnets"] or ()
        if not subnets:
            problems.append(problem("dcnSubnets", list(subnets), "at least one range when dcn is true"))
        ranges += [(f"dcnSubnets[{i}]", cidr) for i, cidr in enumerate(subnets)]
    parsed: list[tuple[str, ipaddress.IPv4Network]] = []
    for key, cidr in ranges:
        if cidr is None:
            continue
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            problems.append(problem(key, cidr, "an IPv4 range in CIDR form with no host bits, e.g. 10.50.0.0/16"))
            continue
        if not network.is_private:
            problems.append(problem(key, cidr, "use a private (RFC 1918) range"))
            continue
        for other_key, other in parsed:
            if network.overlaps(other):
                problems.append(f"{NAMESPACE}:{key}={cidr!r} overlaps {NAMESPACE}:{other_key}={str(other)!r}; "
                                "every range must be distinct")
        parsed.append((key, network))
    if v["dranet"] and not v["dcn"]:
        problems.append(f"{NAMESPACE}:dranet=true needs {NAMESPACE}:dcn=true (DRANET hands out the DCN NICs)")


def check_dranet_machine(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> None:
    """Managed DRANET only exists on some machine families; elsewhere the claim could never be satisfied."""
    if v["dranet"] and shape is not None and not shape.machine.name.startswith(DRANET_MACHINE_PREFIXES):
        key = "tpuMachineType" if v["tpuMachineType"] else "tpuGeneration"
        value = shape.machine.name if v["tpuMachineType"] else shape.generation.name
        problems.append(f"{NAMESPACE}:dranet=true is not available on {NAMESPACE}:{key}={value!r} "
                        f"({shape.machine.name}): GKE managed DRANET supports the TPU machine families "
                        f"{', '.join(p.rstrip('-') for p in DRANET_MACHINE_PREFIXES)}; set dranet=false (the pods "
                        "then use the host network) or use one of those generations")


def required_versions(v: dict[str, Any], shape: SliceShape | None) -> dict[str, str]:
    """Why each minimum GKE version applies → the version."""
    autopilot = v["clusterMode"] == ClusterMode.AUTOPILOT.value
    needs = {"the Ray operator add-on": versions.RAY_OPERATOR_ADDON}
    if shape is not None:
        needs[f"tpuGeneration={shape.generation.name}"] = shape.generation.min_gke_version
    if (v["slices"] or 0) > 1:
        needs["multislice"] = versions.MULTISLICE_AUTOPILOT if autopilot else versions.MULTISLICE_STANDARD
    if v["dranet"]:
        needs["dranet=true"] = versions.DRANET_AUTOPILOT if autopilot else versions.DRANET_STANDARD
    if v["capacity"] == Capacity.FLEX_START.value:
        needs["capacity=flex-start"] = versions.FLEX_START_TPU
    return needs


def check_version(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> dict[str, str]:
    """The feature floors; a gkeVersion the user set must meet every one of them."""
    needs = required_versions(v, shape)
    requested = v["gkeVersion"]
    if requested is None:
        return needs
    if not versions.is_valid(requested):
        problems.append(problem("gkeVersion", requested, "a GKE version looks like 1.34 or 1.34.1-gke.1829001"))
        return needs
    for reason, minimum in needs.items():
        if not versions.satisfies(requested, minimum):
            problems.append(f"{NAMESPACE}:gkeVersion={requested!r} is below {minimum}, the minimum for {reason}")
    return needs


def check_autopilot(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> None:
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


def check_storage(v: dict[str, Any], raw: Mapping[str, Any], region: str | None,
                  problems: list[str]) -> tuple[str, str]:
    bucket = v["bucketName"]
    if bucket is None and "bucketName" not in raw:   # set but refused: already reported in step 1
        bucket = f"{v['project'] or 'project'}-{v['clusterName']}-ckpt"
        reason = naming.bucket_problem(bucket)
        if reason:
            problems.append(f"{NAMESPACE}:bucketName is unset and the derived name {bucket!r} is not valid ({reason}); "
                            "set bucketName")
    return bucket, v["bucketLocation"] or (region or "")


REPO_ROOT = Path(__file__).resolve().parents[2]
LOCKED_PYTHON = ".".join(map(str, PYTHON))


@functools.lru_cache(maxsize=1)
def locked_pins() -> dict[str, str]:
    return load_pins(REPO_ROOT)


def _image_python(key: str, image: str) -> str | None:
    """The Python an image's tag names: rayproject/ray:2.60.0-py312 → 3.12, python:3.12.11-slim → 3.12."""
    tag = naming.image_tag(image)
    if match := re.search(r"(?:^|-)py3(\d+)(?:-|$)", tag):
        return f"3.{match.group(1)}"
    if image.rsplit(":", 1)[0].rsplit("/", 1)[-1] == "python" and (match := re.match(r"3\.(\d+)", tag)):
        return f"3.{match.group(1)}"
    return None


def check_worker_environment(v: dict[str, Any], problems: list[str]) -> None:
    """Every backend that installs Python packages installs the one lock (worker_env/requirements.lock), made for
    CPython 3.12 (maxtext 0.2.5 and jax >= 0.11.1 need Python >= 3.12): the images must run that Python, the Ray
    image that Ray, and maxtextVersion must be the lock's."""
    pins = locked_pins()
    backend = v["workloadBackend"]
    if backend == "pathways" and v["workerEnvironment"] == "image":
        problems.append(f"{NAMESPACE}:workerEnvironment='image' conflicts with {NAMESPACE}:workloadBackend="
                        "'pathways': the Pathways head runs MaxText from pathwaysTrainerImage; unset workerEnvironment")
    version = v["maxtextVersion"]
    if backend in ("rayjob", "jobset") and version is not None and version != pins["maxtext"]:
        problems.append(problem("maxtextVersion", version, f"{pins['maxtext']}, the MaxText of the workers' locked "
                                f"environment ({LOCK_PATH}; change it there with scripts/lock_worker_env.sh)"))
    images = {"rayjob": "rayImage", "jobset": "jobsetImage"}
    key = images.get(backend)
    image = v[key] if key else None
    if image is None:
        return
    python = _image_python(key, image)
    if python is not None and python != LOCKED_PYTHON:
        problems.append(problem(key, image, f"an image with Python {LOCKED_PYTHON}, the Python the workers' "
                                f"environment is locked for (e.g. {KEYS_BY_NAME[key].default})"))
    if key == "rayImage":
        match = re.match(r"(\d+\.\d+\.\d+)", naming.image_tag(image))
        if match and match.group(1) != pins["ray"]:
            problems.append(problem(key, image, f"Ray {pins['ray']}, the Ray of the workers' locked environment "
                                    f"(e.g. {KEYS_BY_NAME[key].default})"))


def check_workload(v: dict[str, Any], problems: list[str]) -> None:
    if v["trainSteps"] and v["checkpointPeriod"] and v["checkpointPeriod"] > v["trainSteps"]:
        problems.append(f"{NAMESPACE}:checkpointPeriod={v['checkpointPeriod']} is larger than "
                        f"{NAMESPACE}:trainSteps={v['trainSteps']}: only step 0 would be saved, so a restart would "
                        "rewind to the beginning; use a period of at most trainSteps")
    if v["dashboardExposure"] == "internal-lb":
        ranges = v["dashboardSourceRanges"] or ()
        if not ranges:
            problems.append(f"{NAMESPACE}:dashboardExposure='internal-lb' needs {NAMESPACE}:dashboardSourceRanges "
                            "(the Ray job API runs arbitrary code: name who may reach it)")
        for index, cidr in enumerate(ranges):
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                problems.append(problem(f"dashboardSourceRanges[{index}]", cidr, "a CIDR range, e.g. 10.0.0.0/8"))


def plan_workload(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> Plan | None:
    """Run the planner on the config: unknown models, batches that do not divide and models that do not fit
    in HBM are refused here, before anything is registered."""
    if shape is None or v["slices"] is None:
        return None
    model = v["model"]
    if model not in PRESETS or PRESETS[model].cpu_only:
        allowed = ", ".join(name for name, p in PRESETS.items() if not p.cpu_only)
        problems.append(problem("model", model, f"allowed: {allowed}"))
        return None
    batch = float(v["perDeviceBatchSize"]) if v["perDeviceBatchSize"] is not None else None
    slices, min_slices = v["slices"], v["elasticMinSlices"]
    if min_slices is not None and not 1 <= min_slices <= slices:
        problems.append(problem("elasticMinSlices", min_slices, f"whole slices from 1 to slices={slices}"))
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


def check_jobset(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> None:
    """The Kueue quota must admit the whole workload at once."""
    quota = v["kueueTpuQuota"]
    if v["workloadBackend"] != "jobset" or shape is None or v["slices"] is None or quota is None:
        return
    needed = v["slices"] * shape.chips
    if quota < needed:
        problems.append(f"{NAMESPACE}:kueueTpuQuota={quota} cannot admit the workload: it requests slices x chips "
                        f"= {v['slices']} x {shape.chips} = {needed} google.com/tpu at once; allowed: at least "
                        f"{needed} (or unset)")


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


def check_pathways(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> None:
    """workloadBackend=pathways: elastic settings, supported TPUs, matching images, where the head runs."""
    if v["workloadBackend"] != "pathways":
        return
    slices, elastic = v["slices"], v["pathwaysElasticSlices"]
    if elastic is not None and slices is not None and elastic >= slices:
        problems.append(f"{NAMESPACE}:pathwaysElasticSlices={elastic} is not below {NAMESPACE}:slices={slices}: the "
                        f"run must keep at least one slice; allowed: 0 to {slices - 1}")
    is_elastic = bool(elastic and elastic > 0)
    retries, restarts = v["pathwaysElasticMaxRetries"], v["pathwaysMaxSliceRestarts"]
    if retries == 0 and is_elastic:
        # pathwaysutils' elastic_retry raises "max_retries must be positive" and training would never start.
        problems.append(problem("pathwaysElasticMaxRetries", retries, "at least 1 when pathwaysElasticSlices > 0 "
                                "(pathwaysutils refuses max_retries=0)"))
    if restarts == 0 and is_elastic:
        problems.append(problem("pathwaysMaxSliceRestarts", restarts, "at least 1 when pathwaysElasticSlices > 0 "
                                "(a lost slice must be allowed to restart to come back)"))
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
    server, proxy, trainer = v["pathwaysServerImage"], v["pathwaysProxyImage"], v["pathwaysTrainerImage"]
    server_tag, proxy_tag = naming.image_tag(server or ""), naming.image_tag(proxy or "")
    if server_tag.startswith("jax-") and proxy_tag.startswith("jax-") and server_tag != proxy_tag:
        problems.append(f"{NAMESPACE}:pathwaysProxyImage tag {proxy_tag!r} differs from {NAMESPACE}:"
                        f"pathwaysServerImage tag {server_tag!r}: the proxy and the servers must be one Pathways "
                        "release")
    trainer_version = release_tuple(naming.image_tag(trainer or ""))
    if is_elastic and trainer_version is not None and trainer_version < PATHWAYS_MIN_MAXTEXT:
        problems.append(problem("pathwaysTrainerImage", trainer, "MaxText 0.2.4 or later for "
                                "elastic training (elastic_enabled, elastic_max_retries)"))
    machine = v["systemPoolMachineType"] or ""
    capacity = _machine_capacity(machine)
    cpu, memory_gib = head_requests()
    if v["clusterMode"] != ClusterMode.AUTOPILOT.value and capacity is not None and (
            capacity[0] <= cpu or capacity[1] <= memory_gib):
        problems.append(f"{NAMESPACE}:systemPoolMachineType={machine!r} ({capacity[0]} vCPU, {capacity[1]} GiB) "
                        f"cannot hold the Pathways head ({cpu} vCPU, {memory_gib:.0f} GiB requested, plus system "
                        "pods); use a larger machine, e.g. n2-standard-64 as in the Pathways on GKE guide")
