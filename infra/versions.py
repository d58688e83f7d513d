"""GKE version strings: parse, compare, and the minimums our features need.

A GKE version looks like 1.34.1-gke.1829001. A user may give a prefix such as "1.34": GKE then picks
the newest patch of that minor, so a prefix satisfies a minimum when its given components are >= the
minimum's same components.
"""
from __future__ import annotations

import re

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+)(?:-gke\.(\d+))?)?$")

# Minimums, each with where it comes from.
RAY_OPERATOR_ADDON = "1.30.0-gke.1747000"        # GKE Ray operator add-on (docs/platform-notes.md §3)
MULTISLICE_STANDARD = "1.27.4-gke.900"          # GKE "Deploy TPU Multislice" availability
MULTISLICE_AUTOPILOT = "1.29.2-gke.1521000"     # same page, Autopilot
DRANET_STANDARD = "1.34.1-gke.1829001"          # managed DRANET, GKE Standard (docs/platform-notes.md §4)
DRANET_AUTOPILOT = "1.35.2-gke.1842000"         # managed DRANET, Autopilot (docs/platform-notes.md §4)
# Flex-start for TPUs: "use GKE version 1.33.0-gke.1712000 or later" (GKE "About flex-start provisioning mode",
# https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model).
FLEX_START_TPU = "1.33.0-gke.1712000"
# The data mounts' Cloud Storage FUSE features (workloads/common.py data_volumes), from GKE's "Optimize Cloud Storage
# FUSE CSI driver for GKE performance" (https://cloud.google.com/kubernetes-engine/docs/how-to/
# cloud-storage-fuse-csi-driver-perf): the gcsfuseMetadataPrefetchOnMount volume attribute, 1.32.1-gke.1357001
# or later (the newest of the features every data mount uses: file cache, parallel downloads, custom cache
# volume); and hostNetworkPodKSA, for pods on the host network, 1.33.3-gke.1226000 or later (GKE "Cloud Storage
# FUSE for host network Pods").
GCSFUSE_METADATA_PREFETCH = "1.32.1-gke.1357001"
GCSFUSE_HOST_NETWORK_KSA = "1.33.3-gke.1226000"
# A Spot node pool's kubelet shutdown budget raised to 120 s: "the cluster's control plane must run GKE version
# 1.35.0-gke.1171000 or later" (GKE "About Spot VMs", https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms).
SPOT_SHUTDOWN_BUDGET = "1.35.0-gke.1171000"


def parse(version: str) -> tuple[int, ...]:
    match = _VERSION.match(version)
    if not match:
        raise ValueError(version)
    return tuple(int(part) for part in match.groups() if part is not None)


def is_valid(version: str) -> bool:
    return bool(_VERSION.match(version))


def satisfies(version: str, minimum: str) -> bool:
    given = parse(version)
    return given >= parse(minimum)[: len(given)]


def highest(versions: list[str]) -> str:
    return max(versions, key=parse)
