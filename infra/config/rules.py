"""Step 2 of config build: rules that relate two or more keys. Each appends one line per mistake to
`problems`, naming the key the user set; values refused in step 1 arrive as None and are skipped.

This module holds the cluster's rules (keys that do nothing where they are set, location, TPU shape and
capacity, warm pools, networks and their sizes, DRANET, GKE version floors, Autopilot, the control plane's
authorized networks, storage, the system pool). The run's rules live beside it: plan_rules.py (the planner's
and XLA's verdict on the run's step, the TPU pod's size), run_rules.py (checkpoints, the dashboard, the Kueue
quota, the capacity wait), worker_env_rules.py (the workers' locked environment), pathways_rules.py and
data_rules.py."""
from __future__ import annotations

import ipaddress
import math
from typing import Any, Mapping

from core.tpu_catalog import CATALOG, CatalogError, SliceShape, slice_shape
from infra import naming, versions
from infra.config import tpu_zones
from infra.config.fuse_floors import fuse_floors
from infra.config.model import Capacity, ClusterMode
from infra.config.parse import problem, quoted_setting, quoted_value
from infra.config.schema import (DEFAULT_SYSTEM_POOL_MACHINE_TYPE, KEYS, NAMESPACE, PATHWAYS_SYSTEM_POOL_MACHINE_TYPE)

# GKE flex-start provisioning: "TPU v3 and v4 are not supported"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model).
FLEX_START_UNSUPPORTED = ("v4",)
# TPU machine families with managed DRANET (cluster-toolkit modules/compute/gke-node-pool
# `is_dranet_supported_machine`: prefixes a3-, a4-, a4x-, ct6e-, tpu7x-).
DRANET_MACHINE_PREFIXES = ("ct6e-", "tpu7x-")

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
                problems.append(f"{NAMESPACE}:{key.name}={quoted_value(value)}: unset it; it does nothing with "
                                f"{quoted_setting(condition.when, actual, raw)}: it is read only with "
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
        problems.append(f"{NAMESPACE}:zone={zone!r} has {quoted_setting('tpuGeneration', generation, raw)} only as "
                        f"single-tenant capacity, not for a general project's node pools; the Cloud TPU zone table "
                        f"(infra/config/tpu_zones.py) lists it in {', '.join(zones)}; if you hold single-tenant "
                        f"capacity in {zone}, set tpuZoneCheck=false")
        return
    if zone not in zones:
        problems.append(f"{NAMESPACE}:zone={zone!r} does not offer "
                        f"{quoted_setting('tpuGeneration', generation, raw)}; "
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
                                f"{quoted_setting('tpuTopology', v['tpuTopology'], raw)}: it serves {allowed}; set "
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
        problems.append(f"{NAMESPACE}:warmSlices={warm} conflicts with "
                        f"{quoted_setting('capacity', 'flex-start', raw)}: "
                        "flex-start capacity is obtained per request and cannot be kept warm; use warmSlices=0, "
                        "or capacity on-demand, spot or reservation")
    elif v["slices"] is not None and warm > v["slices"]:
        problems.append(f"{NAMESPACE}:warmSlices={warm} is more than {quoted_setting('slices', v['slices'], raw)}: "
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
            problems.append(f"{quoted_setting(count_key, v[count_key], raw)} makes {count}, but the default {key} "
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
                        f"{quoted_setting('clusterMode', 'autopilot', raw)}: Autopilot clusters are always enrolled "
                        "in a release channel; use RAPID, REGULAR, STABLE or EXTENDED, or clusterMode=standard")


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


def system_pool_machine_type(v: dict[str, Any]) -> str:
    """The user's systemPoolMachineType, or the default that fits the backend's head (schema description)."""
    if v["systemPoolMachineType"] is not None:
        return v["systemPoolMachineType"]
    return PATHWAYS_SYSTEM_POOL_MACHINE_TYPE if v["workloadBackend"] == "pathways" else DEFAULT_SYSTEM_POOL_MACHINE_TYPE
