"""Config build, step 2: workloadBackend=pathways. Elastic settings, the TPUs Pathways runs on, images of one
release, and a system pool that can hold the Pathways head; one line per mistake, as rules.py."""
from __future__ import annotations

import re
from typing import Any, Mapping

from core.maxtext_facts import PATHWAYS_MIN_MAXTEXT, release_tuple
from core.pathways import PATHWAYS_TPU_VERSIONS, head_requests
from core.tpu_catalog import SliceShape
from infra import naming
from infra.config.model import ClusterMode
from infra.config.parse import problem
from infra.config.rules import system_pool_machine_type
from infra.config.schema import NAMESPACE

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
