"""Step 2 of config build: rules that relate two or more keys. Each appends one line per mistake to
`problems`, naming the key the user set; values refused in step 1 arrive as None and are skipped."""
from __future__ import annotations

import dataclasses
import functools
import ipaddress
import math
import re
import textwrap
from pathlib import Path
from typing import Any, Mapping

from core.errors import PlanError
from core.maxtext_facts import PATHWAYS_MIN_MAXTEXT, release_tuple
from core.pathways import PATHWAYS_TPU_VERSIONS, head_requests
from core.planner import Alternative, Plan, PlanRequest, advise, plan, with_maxtext_keys
from core.pod_sizing import TpuPodSize, tpu_pod_size
from core.presets import PRESETS
from core.tpu_catalog import CATALOG, CatalogError, SliceShape, slice_shape
from core.worker_lock import LOCK_PATH, PYTHON, load_pins
from infra import naming, versions
from infra.config import tpu_zones
from infra.config.fuse_floors import fuse_floors
from infra.config.model import Capacity, ClusterMode, Problem
from infra.config.parse import problem
from infra.config.shape_changes import ShapeChange, elastic_turned_fixed
from infra.config.schema import (DEFAULT_CHECKPOINT_PERIOD, DEFAULT_SYSTEM_POOL_MACHINE_TYPE, KEYS, KEYS_BY_NAME,
                                 NAMESPACE, PATHWAYS_SYSTEM_POOL_MACHINE_TYPE, show)

# GKE flex-start provisioning: "TPU v3 and v4 are not supported"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model).
FLEX_START_UNSUPPORTED = ("v4",)
# TPU machine families with managed DRANET (cluster-toolkit modules/compute/gke-node-pool
# `is_dranet_supported_machine`: prefixes a3-, a4-, a4x-, ct6e-, tpu7x-).
DRANET_MACHINE_PREFIXES = ("ct6e-", "tpu7x-")


def _quoted(value: Any) -> str:
    """A value as refusals quote it: strings and lists in Python form ('x', ['a']), true/false, numbers."""
    if isinstance(value, tuple):
        return repr(list(value))
    return repr(value) if isinstance(value, str) else show(value)


def _setting(key: str, value: Any, raw: Mapping[str, Any]) -> str:
    """KEY=VALUE as a refusal quotes it, marked when the value is the default rather than the user's."""
    text = f"{NAMESPACE}:{key}={_quoted(value)}"
    return text if key in raw else f"the default {text}"


def check_applies(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> None:
    """A key the user set that does nothing in the chosen backend or mode (schema Key.applies_to) is refused with
    the reason, never silently ignored. Values that ask for nothing (false, empty) pass; so do values refused in
    step 1, and conditions whose own value was refused."""
    for key in KEYS:
        if key.name not in raw or not key.applies_to:
            continue
        value = v[key.name]
        if value is None or value is False or value == "" or value == ():
            continue
        for condition in key.applies_to:
            actual = v[condition.when]
            if actual is None:
                break
            if actual not in condition.values:
                # The key, its value and the fix first (what fits a terminal's first line), then why.
                problems.append(f"{NAMESPACE}:{key.name}={_quoted(value)}: unset it; it does nothing with "
                                f"{_setting(condition.when, actual, raw)}: it is read only with "
                                f"{condition.describe()} ({condition.reason})")
                break


def check_location(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> str | None:
    """The region: derived from the zone, or the user's, which must contain the zone; and it must exist
    (tpu_zones.GCP_REGIONS) unless tpuZoneCheck is false."""
    zone, region = v["zone"], v["region"]
    if zone is None:
        return None
    zone_region = naming.region_of(zone)
    if region is not None and zone_region != region:
        problems.append(f"{NAMESPACE}:zone={zone!r} is not in {NAMESPACE}:region={region!r}; use a zone of "
                        f"{region} or set region to {zone_region}")
        return None
    if v["tpuZoneCheck"] and not tpu_zones.region_exists(zone_region):
        key, value = ("region", region) if "region" in raw else ("zone", zone)
        problems.append(problem(key, value, f"{zone_region} is not a GCP region (Compute Engine regions and zones, "
                                "as listed in infra/config/tpu_zones.py); if it is newer than that list, set "
                                "tpuZoneCheck=false"))
        return None
    return zone_region


def check_tpu_zone(v: dict[str, Any], raw: Mapping[str, Any], region: str | None, problems: list[str]) -> None:
    """The zone must offer the TPU generation (Cloud TPU "TPU regions and zones", tpu_zones.TPU_ZONES). With
    tpuZoneCheck=false the table is not consulted, and that setting is refused where the table already agrees."""
    zone, generation, enabled = v["zone"], v["tpuGeneration"], v["tpuZoneCheck"]
    if zone is None or generation is None or enabled is None or region is None:
        return
    zones = tpu_zones.zones_offering(generation)
    if not enabled:
        if zone in zones:
            problems.append(f"{NAMESPACE}:tpuZoneCheck=false is not needed: zone {zone!r} offers tpuGeneration="
                            f"{generation!r} in the table of infra/config/tpu_zones.py; unset tpuZoneCheck so the "
                            "zone stays checked")
        return
    if tpu_zones.single_tenant_only(generation, zone):
        problems.append(f"{NAMESPACE}:zone={zone!r} has {_setting('tpuGeneration', generation, raw)} only as "
                        f"single-tenant capacity, not for a general project's node pools; the Cloud TPU zone table "
                        f"(infra/config/tpu_zones.py) lists it in {', '.join(zones)}; if you hold single-tenant "
                        f"capacity in {zone}, set tpuZoneCheck=false")
        return
    if zone not in zones:
        problems.append(f"{NAMESPACE}:zone={zone!r} does not offer {_setting('tpuGeneration', generation, raw)}; "
                        f"the Cloud TPU zone table (infra/config/tpu_zones.py) lists it in {', '.join(zones)}; if "
                        f"{zone} is newer than that table, set tpuZoneCheck=false")


def check_tpu(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> SliceShape | None:
    shape = None
    machine_set = "tpuMachineType" in raw and v["tpuMachineType"] is not None
    if v["tpuGeneration"] is not None and v["tpuTopology"] is not None:
        try:
            shape = slice_shape(v["tpuGeneration"], v["tpuTopology"], v["tpuMachineType"])
        except CatalogError as error:
            allowed = ", ".join(error.allowed)
            if error.key == "tpuTopology" and "tpuTopology" not in raw and machine_set:
                # The user chose the machine, not the topology: the machine is what conflicts.
                multi = CATALOG[v["tpuGeneration"]].multi_host_machine.name
                problems.append(f"{NAMESPACE}:tpuMachineType={v['tpuMachineType']!r} does not serve "
                                f"{_setting('tpuTopology', v['tpuTopology'], raw)}: it serves {allowed}; set "
                                f"tpuTopology to one of those, or unset tpuMachineType (multi-host slices of "
                                f"{v['tpuGeneration']} use {multi})")
            elif error.key == "tpuTopology" and machine_set:
                # Both set: the pair is what is refused, so the line names both keys the user chose.
                # (what the machine serves on a second line, so each fits 100 columns)
                problems.append(f"{NAMESPACE}:tpuTopology={v['tpuTopology']!r} not on "
                                f"tpuMachineType={v['tpuMachineType']!r}\n    {v['tpuGeneration']} "
                                f"{v['tpuMachineType']} serves {allowed}; or unset tpuMachineType")
            else:
                problems.append(f"{NAMESPACE}:{error.key}={error.value!r} is not valid for "
                                f"tpuGeneration={v['tpuGeneration']!r}; allowed: {allowed}")
    slices = v["slices"]
    if shape is not None and slices is not None and slices > 1 and not shape.multi_host:
        multi_host = ", ".join(shape.generation.multi_host_topologies)
        why = "GKE multislice supports multi-host node pools only"
        if "slices" in raw:
            problems.append(f"{NAMESPACE}:slices={slices} needs multi-host slices, but tpuTopology="
                            f"{shape.topology!r} on {shape.machine.name} is single-host ({why}); use a multi-host "
                            f"topology: {multi_host}")
        else:
            problems.append(f"{NAMESPACE}:tpuTopology={shape.topology!r} on {shape.machine.name} is single-host, "
                            f"but the default slices={slices} needs multi-host slices ({why}); set slices=1 or use a "
                            f"multi-host topology: {multi_host}")
        return None   # reported: rules that need the slice shape (the planner among them) add nothing
    capacity = v["capacity"]
    if capacity == Capacity.FLEX_START.value and shape is not None and shape.generation.name in FLEX_START_UNSUPPORTED:
        # GKE "About flex-start provisioning mode": "TPU v3 and v4 are not supported."
        problems.append(f"{NAMESPACE}:capacity='flex-start' is not offered for tpuGeneration="
                        f"{shape.generation.name!r} (GKE flex-start does not support TPU v3 and v4); use on-demand, "
                        "spot or reservation, or a newer generation")
    if capacity == Capacity.RESERVATION.value and v["reservationName"] == "":
        problems.append(f"{NAMESPACE}:capacity='reservation' needs {NAMESPACE}:reservationName (the reservation to "
                        "consume)")
    return shape


def warm_slices(v: dict[str, Any]) -> int:
    """The user's warmSlices, or the default: every slice on a reservation (its capacity is paid for whether
    nodes run or not), none otherwise (idle TPU pools scale to zero)."""
    if v["warmSlices"] is not None:
        return v["warmSlices"]
    return v["slices"] or 0 if v["capacity"] == Capacity.RESERVATION.value else 0


def check_warm_slices(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> None:
    """Warm pools hold whole slices: at most `slices` of them, and none on flex-start, whose capacity is
    granted per request for at most 7 days and cannot be held idle (GKE "About flex-start provisioning mode",
    https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start-vms)."""
    warm = v["warmSlices"]
    if "warmSlices" not in raw or warm is None or warm == 0:
        return
    if v["capacity"] == Capacity.FLEX_START.value:
        problems.append(f"{NAMESPACE}:warmSlices={warm} conflicts with {_setting('capacity', 'flex-start', raw)}: "
                        "flex-start capacity is obtained per request and cannot be kept warm; use warmSlices=0, "
                        "or capacity on-demand, spot or reservation")
    elif v["slices"] is not None and warm > v["slices"]:
        problems.append(f"{NAMESPACE}:warmSlices={warm} is more than {_setting('slices', v['slices'], raw)}: "
                        f"each warm pool holds one whole slice; use 0..{v['slices']}")


def check_networks(v: dict[str, Any], problems: list[str]) -> dict[str, ipaddress.IPv4Network]:
    """Every range well formed (with an explicit prefix), private and distinct; returns the ranges that are."""
    ranges: list[tuple[str, Any]] = [(key, v[key]) for key in ("nodeCidr", "podCidr", "serviceCidr")]
    if v["dcn"] and v["dcnSubnets"] is not None:
        subnets = v["dcnSubnets"]
        if not subnets:
            problems.append(problem("dcnSubnets", list(subnets), "at least one range when dcn is true"))
        ranges += [(f"dcnSubnets[{i}]", cidr) for i, cidr in enumerate(subnets)]
    parsed: list[tuple[str, ipaddress.IPv4Network]] = []
    for key, cidr in ranges:
        if cidr is None:
            continue
        if "/" not in cidr:
            # ipaddress reads "10.0.0.0" as 10.0.0.0/32: one address, never what a subnet range means.
            problems.append(problem(key, cidr, "a CIDR range with an explicit prefix length, e.g. 10.50.0.0/16 "
                                    "(without one it is a single address, /32)"))
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
    return dict(parsed)


# GKE "Configure maximum Pods per node" (formerly "Optimizing IP address allocation",
# https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr): Standard clusters default to 110 Pods
# per node, and GKE gives each node a /24 of the Pod range for it, so the Pod range limits the node count.
POD_RANGE_PER_NODE = 256
# VPC "Subnets" (https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet): four addresses of
# every primary IPv4 range are reserved (network, default gateway, second-to-last, broadcast).
SUBNET_RESERVED = 4


def _prefix_for(addresses: int) -> int:
    return 32 - math.ceil(math.log2(addresses))


def check_range_sizes(v: dict[str, Any], raw: Mapping[str, Any], shape: SliceShape | None,
                      networks: Mapping[str, ipaddress.IPv4Network], problems: list[str]) -> None:
    """nodeCidr and podCidr must hold every node the stack creates: the system pool plus slices x hosts (Standard
    mode; Autopilot sizes nodes itself)."""
    if v["clusterMode"] != ClusterMode.STANDARD.value or shape is None or None in (v["slices"], v["systemPoolNodes"]):
        return
    system, slices = v["systemPoolNodes"], v["slices"]
    nodes = system + slices * shape.hosts
    count = f"{nodes} nodes ({system} system + {slices} slices x {shape.hosts} hosts)"
    # Blame the count the user set when the range is the default.
    count_key = next((key for key in ("slices", "tpuTopology", "tpuMachineType", "systemPoolNodes") if key in raw),
                     "slices")
    for key, capacity, unit, need in (
            ("nodeCidr", lambda n: n.num_addresses - SUBNET_RESERVED, "node addresses, GCP reserving 4 per subnet",
             _prefix_for(nodes + SUBNET_RESERVED)),
            ("podCidr", lambda n: n.num_addresses // POD_RANGE_PER_NODE,
             "nodes' Pod ranges, a /24 each for GKE's default of 110 Pods per node",
             _prefix_for(nodes * POD_RANGE_PER_NODE))):
        network = networks.get(key)
        if network is None or capacity(network) >= nodes:
            continue
        if key in raw:
            problems.append(f"{NAMESPACE}:{key}={str(network)!r} holds {capacity(network)} {unit}, but the stack "
                            f"creates {count}; use a /{need} or larger")
        else:
            problems.append(f"{_setting(count_key, v[count_key], raw)} makes {count}, but the default {key} "
                            f"{network} holds {capacity(network)} {unit}; set {key} to a /{need} or larger")


def check_dranet_machine(v: dict[str, Any], shape: SliceShape | None, problems: list[str]) -> None:
    """Managed DRANET only exists on some machine families; elsewhere the claim could never be satisfied."""
    if v["dranet"] and v["dcn"] and shape is not None and not shape.machine.name.startswith(DRANET_MACHINE_PREFIXES):
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
    needs.update(fuse_floors(v))
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
    """Node-pool keys on Autopilot are refused by check_applies; Autopilot also needs a release channel (GKE
    "About release channels", https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels:
    Autopilot clusters are always enrolled in a release channel)."""
    if v["clusterMode"] == ClusterMode.AUTOPILOT.value and v["releaseChannel"] == "UNSPECIFIED":
        problems.append(f"{NAMESPACE}:releaseChannel='UNSPECIFIED' conflicts with "
                        f"{_setting('clusterMode', 'autopilot', raw)}: Autopilot clusters are always enrolled in a "
                        "release channel; use RAPID, REGULAR, STABLE or EXTENDED, or clusterMode=standard")


def check_authorized_networks(v: dict[str, Any], problems: list[str]) -> None:
    """Each range a CIDR with an explicit prefix, and none that opens the endpoint to every address (CIS GKE
    Benchmark "Ensure Control Plane Authorized Networks is Enabled")."""
    for index, cidr in enumerate(v["controlPlaneAuthorizedNetworks"] or ()):
        key = f"controlPlaneAuthorizedNetworks[{index}]"
        try:
            if "/" not in cidr:
                raise ValueError(cidr)
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            problems.append(problem(key, cidr, "a CIDR range with an explicit prefix length, e.g. 203.0.113.0/24"))
            continue
        if network.prefixlen == 0:
            problems.append(problem(key, cidr, "a range narrower than every address (leave the list empty to use "
                                    "the DNS endpoint with IAM from anywhere)"))


def check_storage(v: dict[str, Any], raw: Mapping[str, Any], region: str | None,
                  problems: list[str]) -> tuple[str, str]:
    bucket = v["bucketName"]
    # Derived only from a project and cluster name that passed step 1 (a refused one is already reported).
    if bucket is None and "bucketName" not in raw and v["project"] is not None and v["clusterName"] is not None:
        # A 30-character project and a 40-character cluster name exceed the bucket name limit (63): shortened with a
        # stable hash, so every name config accepts derives a valid bucket (names that fit are unchanged).
        bucket = naming.fit(f"{v['project']}-{v['clusterName']}", naming.BUCKET_MAX - len("-ckpt")) + "-ckpt"
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
    version = v["maxtextVersion"]
    if backend in ("rayjob", "jobset") and version is not None and version != pins["maxtext"]:
        problems.append(problem("maxtextVersion", version, f"{pins['maxtext']}, the MaxText of the workers' locked "
                                f"environment ({LOCK_PATH}; change it there with scripts/lock_worker_env.sh)"))
    images = {"rayjob": "rayImage", "jobset": "jobsetImage"}
    key = images.get(backend)
    # With the built image (workerEnvironment=image) the runtime images are not used: a user's is refused as
    # doing nothing (check_applies), once.
    image = v[key] if key and v["workerEnvironment"] == "runtime" else None
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


def checkpoint_period(v: dict[str, Any]) -> int | None:
    """The user's checkpointPeriod, or the default yielding to a shorter run: min(50, trainSteps)."""
    if v["checkpointPeriod"] is not None:
        return v["checkpointPeriod"]
    return min(DEFAULT_CHECKPOINT_PERIOD, v["trainSteps"]) if v["trainSteps"] is not None else None


def system_pool_machine_type(v: dict[str, Any]) -> str:
    """The user's systemPoolMachineType, or the default that fits the backend's head (schema description)."""
    if v["systemPoolMachineType"] is not None:
        return v["systemPoolMachineType"]
    return PATHWAYS_SYSTEM_POOL_MACHINE_TYPE if v["workloadBackend"] == "pathways" else DEFAULT_SYSTEM_POOL_MACHINE_TYPE


def check_workload(v: dict[str, Any], problems: list[str]) -> None:
    if v["trainSteps"] and v["checkpointPeriod"] and v["checkpointPeriod"] > v["trainSteps"]:
        problems.append(f"{NAMESPACE}:checkpointPeriod={v['checkpointPeriod']} is larger than "
                        f"{NAMESPACE}:trainSteps={v['trainSteps']}: only step 0 would be saved, so a restart would "
                        "rewind to the beginning; use a period of at most trainSteps")
    if v["workloadBackend"] == "rayjob" and v["dashboardExposure"] == "internal-lb":
        ranges = v["dashboardSourceRanges"]
        if ranges is not None and not ranges:
            problems.append(f"{NAMESPACE}:dashboardExposure='internal-lb' needs {NAMESPACE}:dashboardSourceRanges "
                            "(the Ray job API runs arbitrary code: name who may reach it)")
        for index, cidr in enumerate(ranges or ()):
            try:
                if "/" not in cidr:
                    raise ValueError(cidr)
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                problems.append(problem(f"dashboardSourceRanges[{index}]", cidr, "a CIDR range with an explicit "
                                        "prefix length, e.g. 10.0.0.0/8"))


# What the planner's verdict depends on, in the order a refusal blames them.
_PLAN_KEYS = ("perDeviceBatchSize", "model", "elasticMinSlices", "slices", "tpuTopology", "tpuGeneration",
              "tpuMachineType")


def plan_workload(v: dict[str, Any], raw: Mapping[str, Any], shape: SliceShape | None,
                  problems: list[str], maxtext_settings: Mapping[str, str] | None = None,
                  changes: list[ShapeChange] | None = None) -> Plan | None:
    """Run the planner on the config: unknown models, batches that do not divide and models that do not fit
    in HBM are refused here, before anything is registered. maxtextSettings that change memory are taken in
    (core/planner.py with_maxtext_keys: estimated, or named in the plan as not estimated). A Spot run made
    elastic here that comes out fixed is added to `changes` (shape_changes.py: the user did not ask for it)."""
    if shape is None or v["slices"] is None:
        return None
    model = v["model"]
    if model not in PRESETS or PRESETS[model].cpu_only:
        allowed = ", ".join(name for name, p in PRESETS.items() if not p.cpu_only)
        problems.append(problem("model", model, f"allowed: {allowed}"))
        return None
    batch = float(v["perDeviceBatchSize"]) if v["perDeviceBatchSize"] is not None else None
    # elasticMinSlices only means something on the Ray backend (elsewhere check_applies refuses it). An elastic
    # Pathways run trains on as few as slices - pathwaysElasticSlices (every shape it takes is planned).
    slices = v["slices"]
    min_slices = v["elasticMinSlices"] if v["workloadBackend"] == "rayjob" else None
    lost = v.get("pathwaysElasticSlices") if v["workloadBackend"] == "pathways" else None
    if lost and slices is not None and 0 < lost < slices:
        min_slices = slices - lost
    if min_slices is not None and not 1 <= min_slices <= slices:
        problems.append(problem("elasticMinSlices", min_slices, f"whole slices from 1 to slices={slices}"))
        return None
    # None: memoryCheck was not a boolean (refused on its own); a batch that did not parse is refused on its own too.
    memory_check = v["memoryCheck"] is not False
    if not memory_check and "perDeviceBatchSize" not in raw:
        # Without a batch the planner would keep its own largest candidate over the limit: not a step any
        # compile checked.
        problems.append(f"{NAMESPACE}:memoryCheck=false keeps the exact step a compile fitted: set "
                        f"{NAMESPACE}:perDeviceBatchSize too (the batch that compile used)")
        return None
    # A run with an eval split (evalDatasetPath) also runs MaxText's eval step, which is planned too.
    request = PlanRequest(model=model, generation=shape.generation.name, topology=shape.topology, slices=slices,
                          min_slices=min_slices, per_device_batch_size=batch, memory_check=memory_check,
                          evaluates=bool(v.get("evalDatasetPath")))
    if maxtext_settings:
        try:
            request = with_maxtext_keys(request, maxtext_settings)[0]
        except PlanError as error:
            problems.append(f"{NAMESPACE}:maxtextSettings is refused by the planner: {error}")
            return None
    def decided(chosen: Plan) -> Plan:
        change = elastic_turned_fixed(v, raw, request, chosen)
        if change is not None and changes is not None:
            changes.append(change)
        return chosen

    if min_slices is None and v["capacity"] == Capacity.SPOT.value:
        # Spot: keep training on as few slices as the model fits on while preempted slices come back.
        # The fewest that fit by the estimate (memoryCheck=false would keep the first); none: a fixed-size run.
        fewer: PlanError | None = None
        for candidate in range(1, slices + 1):
            try:
                chosen = plan(dataclasses.replace(request, min_slices=candidate, memory_check=True))
            except PlanError as error:
                fewer = error
                continue
            if fewer is not None:
                # Say why the run cannot shrink further (dev at batch 12 does not fit on one slice).
                below = (f"elastic: keeps at least {candidate} slices while Spot slices are reclaimed: on "
                         f"{candidate - 1} the step does not fit ({str(fewer).split(': ', 1)[0]}); a smaller "
                         f"perDeviceBatchSize lets it shrink further")
                chosen = dataclasses.replace(chosen, notes=chosen.notes + (below,))
            return decided(chosen)
    try:
        return decided(plan(request))
    except PlanError as error:
        keys = f"model={model!r} on {shape.pod_type} x {slices} slices"
        elastic_key = (f"pathwaysElasticSlices={lost}" if v["workloadBackend"] == "pathways"
                       else f"elasticMinSlices={min_slices}")
        if min_slices is not None:
            keys += f", {elastic_key}"
        # Name the key the user set that the planner could not place: the batch first, then the model, then the
        # shape; the model (default or not) when the user set none of them.
        blamed = next((key for key in _PLAN_KEYS if key in raw), "model")
        value = shape.topology if blamed == "tpuTopology" else v[blamed]
        options = nearest_configs(request, on_ray=v["workloadBackend"] == "rayjob")
        nearest = ", or ".join(options)
        where = f"{model} on {slices} x {shape.pod_type}" + (
            f", {elastic_key}" if min_slices is not None else "")
        problems.append(Problem(hbm_refusal(_setting(blamed, value, raw), where, nearest, str(error)), blamed, value,
                                options or None))
        return None


def check_xla_verdicts(v: dict[str, Any], workload_plan: Plan | None, problems: list[str],
                       compiled=None) -> Plan | None:
    """XLA decides where the program's compiler has a verdict on the run's steps (infra/config/compile_check.py
    CompileOutcome `compiled`: kept under the step's complete key in compile-verdicts.json, or compiled by this
    build): a step XLA refused at any slice count the run takes is refused here, before anything registers,
    naming the batch, what failed and the nearest batch XLA compiled. A step XLA did not decide is named once in
    the plan's notes (a warning where the Pulumi program shows it) with why: a compile that ran out of time (kept
    as undecided) or no compiler here; compileCheck=always refuses it. `compiled` None: this build had no
    compiler (the offline plan compiles after it, preview/cli.py) and says nothing of XLA."""
    from core import compile_verdicts
    from core.advice import next_smaller_batch

    if workload_plan is None or v["compileCheck"] == "off" or compiled is None:
        return workload_plan
    undecided = [count for count, kept in sorted(compiled.verdicts.items()) if kept.undecided]
    not_decided = compiled.not_decided
    if not_decided is None and undecided:
        seconds = compiled.verdicts[undecided[0]].undecided_after_s
        retried = "" if set(undecided) <= set(compiled.compiled_now) else " (kept; not compiled again"
        not_decided = (f"undecided after {seconds:.0f} s, the compile ran out of time{retried}"
                       + (f": {compile_verdicts.RETRY_ENV}=1 compiles it again)" if retried else ""))
    if not_decided is not None and v["compileCheck"] == "always":
        problems.append("\n".join(textwrap.wrap(
            f"{NAMESPACE}:compileCheck=always needs XLA's verdict on every step and got none: {not_decided}; "
            "or set compileCheck=auto (a warning instead) or off", 98, subsequent_indent=_INDENT)))
        return None
    for count, kept in compiled.verdicts.items():
        if kept.compiled or kept.undecided:
            continue
        nearest = compiled.nearest.get(count)
        batch = f"{workload_plan.per_device_batch_size:g}"
        lines = [f"{NAMESPACE}:perDeviceBatchSize={batch} is refused by XLA on {count} x "
                 f"{workload_plan.shape.pod_type}: {kept.what_failed()}"]
        if nearest:
            lines.append(f"nearest that compiled: {NAMESPACE}:perDeviceBatchSize={nearest:g} (kept: no compile)")
        else:
            # None compiled yet: the largest smaller batch the planner lays out, which the next preview compiles.
            retry = next_smaller_batch(workload_plan)
            lines.append(f"nearest to try: {NAMESPACE}:perDeviceBatchSize={retry:g} (not compiled yet: choosing it "
                         "means a compile)" if retry
                         else f"nearest to try: a smaller {NAMESPACE}:perDeviceBatchSize (none lays out)")
        lines.append(f"(XLA's verdict, libtpu {kept.libtpu}, MaxText {kept.maxtext}, kept in "
                     f"{compile_verdicts.COMPILE_VERDICTS} on {kept.date})")
        # 98: ConfigError lays each problem out two columns in (within 100 as pulumi up prints it).
        problems.append("\n".join(textwrap.wrap(lines[0], 98, subsequent_indent=_INDENT + "  ") + [
            piece for line in lines[1:] for piece in textwrap.wrap(
                line, 98, initial_indent=_INDENT, subsequent_indent=_INDENT + "  ")]))
        return None
    notes = []
    if workload_plan.evaluates:
        # maxtext 0.2.5 trainers/pre_train/train_compile.py main compiles train.train_step only
        # (maxtext_utils.get_functional_train_with_signature); no key selects eval_step, which the workers compile
        # at start (trainers/pre_train/train.py jit_train_and_eval_step).
        notes.append("memory: the eval step is estimated, not compiled: MaxText's train_compile compiles the "
                     "train step only")
    if compiled.file_note:
        notes.append(f"memory: {compiled.file_note}")
    if compiled.not_kept:
        notes.append(f"memory: XLA's verdict was not kept ({compiled.not_kept}): the next preview compiles it again")
    if not_decided is not None:
        counts = ", ".join(map(str, undecided)) if undecided and compiled.not_decided is None else "the run's"
        notes.append(f"memory: XLA did not decide {counts} slice(s): {not_decided}")
    elif compiled.verdicts:
        decided = next(iter(compiled.verdicts.values()))
        notes.append(f"memory: XLA compiled the run's step at {', '.join(map(str, sorted(compiled.verdicts)))} "
                     f"slice(s) (libtpu {decided.libtpu}, MaxText {decided.maxtext}, jax {decided.jax or '?'})")
        notes.append(_front_end_assumption(decided))
        # The notes follow the compile that ran: the estimate's "compile it first" advice is answered.
        kept_notes = tuple(_answered(note) for note in workload_plan.notes)
        workload_plan = dataclasses.replace(workload_plan, notes=tuple(note for note in kept_notes if note))
    return dataclasses.replace(workload_plan, notes=workload_plan.notes + tuple(notes)) if notes else workload_plan


def _front_end_assumption(verdict) -> str:
    """What the verdict assumes of the workers' XLA: the jax that traced the step here is not the workers' (their
    jax needs Python >= 3.12, worker_env/requirements.lock), and the libtpu is theirs only when fetched
    (aot/workers_libtpu.py)."""
    pins = load_pins(REPO_ROOT)
    libtpu = (f"the workers' libtpu {verdict.libtpu}" if verdict.libtpu == pins["libtpu"] else
              f"libtpu {verdict.libtpu}, not the workers' {pins['libtpu']} (python -m aot.workers_libtpu --fetch)")
    return (f"assumption: XLA's verdict came from jax {verdict.jax or '?'}'s front end here (the workers run jax "
            f"{pins['jax']}) with {libtpu}: the same step is assumed to compile the same")


def _answered(note: str) -> str | None:
    """A plan note once XLA compiled every step of the run: the estimate's near-limit warning (which asks for the
    compile, core/memory.py COMPILE_FIRST) goes; the shape note's request to compile says it was compiled."""
    from core.memory import COMPILE_FIRST

    if note.startswith("memory") and COMPILE_FIRST in note:
        return None
    return note.replace("; compile before you pay", "; XLA compiled it")


# Continuation lines of a multi-line refusal: indented under the first, wrapped so each fits 100 columns.
_INDENT = "    "


def hbm_refusal(setting: str, where: str, nearest: str, why: str) -> str:
    """A refusal over HBM laid out for a terminal: the first line says what is wrong, the second the nearest
    configuration that fits, then the planner's reasoning wrapped on the lines after."""
    lines = [f"{setting} is over HBM: {where}"]
    if nearest:
        lines += textwrap.wrap(f"nearest that fits: {nearest}", 100, initial_indent=_INDENT,
                               subsequent_indent=_INDENT + "  ", break_on_hyphens=False)
    # A command to copy stays whole, on a line of its own.
    why, marker, command = why.partition(_COMPILE_COMMAND)
    lines += textwrap.wrap(f"why: {why.strip()}", 100, initial_indent=_INDENT, subsequent_indent=_INDENT + "  ",
                           break_on_hyphens=False, break_long_words=False)
    if marker:
        # The command alone on its line (what to copy); what follows it is prose, wrapped below.
        command, opening, rest = command.partition(" (")
        lines.append(_INDENT + "  " + marker + command)
        if opening:
            lines += textwrap.wrap("(" + rest, 100, initial_indent=_INDENT + "  ", subsequent_indent=_INDENT + "  ",
                                   break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


_COMPILE_COMMAND = "python -m preview.compile"


# The planner's changes a stack's config can express, and the key that expresses each (core/planner.py
# _CHANGE_ORDER; the mesh, remat and weight dtype of a stack are the planner's and the preset's, not config keys).
_CONFIG_CHANGES = ("batch", "min_slices", "slices")


def _config_keys(alt: Alternative, on_ray: bool) -> str | None:
    """The config keys to set for a planner alternative, or None when config cannot express it."""
    if not set(alt.kinds) <= set(_CONFIG_CHANGES) or ("min_slices" in alt.kinds and not on_ray):
        return None
    sets = []
    if "batch" in alt.kinds:
        batch = alt.plan.per_device_batch_size
        sets.append(f"{NAMESPACE}:perDeviceBatchSize={int(batch) if batch == int(batch) else batch}")
    if "slices" in alt.kinds:
        sets.append(f"{NAMESPACE}:slices={alt.plan.slices}")
    if "min_slices" in alt.kinds:
        sets.append(f"{NAMESPACE}:elasticMinSlices={alt.plan.min_slices}")
    extra = f" (+{alt.extra_chips} chips)" if alt.extra_chips else ""
    return " and ".join(sets) + extra


def nearest_config(request: PlanRequest, on_ray: bool, limit: int = 2) -> str:
    """The nearest configurations that fit, as the config keys to set, nearest first ("" when none can)."""
    return ", or ".join(nearest_configs(request, on_ray, limit))


def nearest_configs(request: PlanRequest, on_ray: bool, limit: int = 2) -> list[str]:
    """nearest_config's options one by one (a refusal's `allowed` in the plan's --json)."""
    options = [keys for alt in advise(request, limit=8).alternatives
               if (keys := _config_keys(alt, on_ray)) is not None]
    return options[:limit]


def check_pod_size(v: dict[str, Any], raw: Mapping[str, Any], workload_plan: Plan | None,
                   problems: list[str]) -> TpuPodSize | None:
    """What each TPU pod requests and may use (core/pod_sizing.py; Ray pods also hold Ray's own processes and
    object store); the host memory a planned run needs on each TPU VM must fit what a pod can have."""
    if workload_plan is None:
        return None
    try:
        return tpu_pod_size(workload_plan, ray=v["workloadBackend"] == "rayjob")
    except PlanError as error:
        blamed = next((key for key in _PLAN_KEYS if key in raw), "model")
        value = workload_plan.shape.topology if blamed == "tpuTopology" else v[blamed]
        problems.append(f"{_setting(blamed, value, raw)} is refused for {workload_plan.model.name} on "
                        f"{workload_plan.shape.pod_type}: {error}")
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


def capacity_wait_seconds(v: dict[str, Any], raw: Mapping[str, Any]) -> int | None:
    """capacityWaitSeconds, or rayPreRunningDeadlineSeconds (its older name) when only that is set."""
    if "capacityWaitSeconds" not in raw and v["rayPreRunningDeadlineSeconds"] is not None:
        return v["rayPreRunningDeadlineSeconds"]
    return v["capacityWaitSeconds"]


def check_capacity_wait(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> None:
    """One bound for every wait: the older key may stand in for the new one, never contradict it."""
    new, old = v["capacityWaitSeconds"], v["rayPreRunningDeadlineSeconds"]
    if "capacityWaitSeconds" in raw and old is not None and new is not None and new != old:
        problems.append(f"{NAMESPACE}:rayPreRunningDeadlineSeconds={old} and {NAMESPACE}:capacityWaitSeconds="
                        f"{new} differ: unset rayPreRunningDeadlineSeconds (capacityWaitSeconds bounds every wait, "
                        "the first included); allowed: the same value or unset")


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


def _pathways_jax(image: str) -> str | None:
    """The JAX release a Pathways image tag names: jax-0.10.2, or 20261001-jax_0.10.2 (digest ignored)."""
    match = re.search(r"(?:^|-)jax[-_](\d+\.\d+\.\d+)$", naming.image_tag(image))
    return match.group(1) if match else None


def check_pathways(v: dict[str, Any], raw: Mapping[str, Any], shape: SliceShape | None,
                   problems: list[str]) -> None:
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
    if shape is not None and shape.machine.name not in PATHWAYS_TPU_VERSIONS:
        supported = sorted(PATHWAYS_TPU_VERSIONS)
        problems.append(f"{NAMESPACE}:tpuGeneration={shape.generation.name!r} on {shape.machine.name} is not "
                        f"supported by Pathways on GKE (no Pathways instance type); allowed machine types: "
                        f"{', '.join(supported)}")
    if v["clusterMode"] == ClusterMode.AUTOPILOT.value:
        problems.append(f"{NAMESPACE}:clusterMode='autopilot' conflicts with {NAMESPACE}:workloadBackend='pathways': "
                        "the Pathways pods use hostNetwork and the head needs a large CPU node (xpk runs Pathways "
                        "on Standard clusters with a CPU pool); use clusterMode=standard")
    if v["dranet"] and v["dcn"]:
        problems.append(f"{NAMESPACE}:dranet=true conflicts with {NAMESPACE}:workloadBackend='pathways': Pathways "
                        "workers run with hostNetwork and already see every NIC of the TPU VM; set dranet=false")
    server, proxy, trainer = v["pathwaysServerImage"], v["pathwaysProxyImage"], v["pathwaysTrainerImage"]
    server_jax, proxy_jax = _pathways_jax(server or ""), _pathways_jax(proxy or "")
    if server_jax and proxy_jax and server_jax != proxy_jax:
        # Blame the image the user set (the proxy when both are).
        mine, other = ("pathwaysProxyImage", "pathwaysServerImage") if "pathwaysProxyImage" in raw or \
            "pathwaysServerImage" not in raw else ("pathwaysServerImage", "pathwaysProxyImage")
        jax = {"pathwaysServerImage": server_jax, "pathwaysProxyImage": proxy_jax}
        problems.append(f"{NAMESPACE}:{mine}={v[mine]!r}: its tag (JAX {jax[mine]}) differs from {NAMESPACE}:"
                        f"{other} tag (JAX {jax[other]}{'' if other in raw else ', the default'}): the proxy and the "
                        "servers must be one Pathways release")
    trainer_version = release_tuple(naming.image_tag(trainer or ""))
    if is_elastic and trainer_version is not None and trainer_version < PATHWAYS_MIN_MAXTEXT:
        problems.append(problem("pathwaysTrainerImage", trainer, "MaxText 0.2.4 or later for "
                                "elastic training (elastic_enabled, elastic_max_retries)"))
    machine = system_pool_machine_type(v) if "systemPoolMachineType" not in raw else (v["systemPoolMachineType"] or "")
    capacity = _machine_capacity(machine)
    cpu, memory_gib = head_requests()
    if v["clusterMode"] != ClusterMode.AUTOPILOT.value and capacity is not None and (
            capacity[0] <= cpu or capacity[1] <= memory_gib):
        problems.append(f"{NAMESPACE}:systemPoolMachineType={machine!r} ({capacity[0]} vCPU, {capacity[1]} GiB) "
                        f"cannot hold the Pathways head ({cpu} vCPU, {memory_gib:.0f} GiB requested, plus system "
                        "pods); use a larger machine, e.g. n2-standard-64 as in the Pathways on GKE guide")
