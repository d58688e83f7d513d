"""Pathways facts the stack config and the Pathways manifests share (pure, no imports)."""
from __future__ import annotations

# Pathways names a TPU slice "<tpu version>:<topology>" (its --instance_type). The version is keyed by GKE
# machine type in google/pathways-job (internal/controller/pathwaysjob_controller.go, MachineTypeToTPUVersionMap);
# xpk and pathways-utils carry the same table. Machine types missing here (the 1-chip v5e/v6e VMs, TPU7x, whose
# mapping appears only in newer xpk releases and is not verified here) are refused by the stack config.
PATHWAYS_TPU_VERSIONS: dict[str, str] = {
    "ct4p-hightpu-4t": "tpuv4",
    "ct5lp-hightpu-4t": "tpuv5e",
    "ct5lp-hightpu-8t": "tpuv5e1t",
    "ct5p-hightpu-4t": "tpuv5",
    "ct6e-standard-4t": "tpuv6e",
    "ct6e-standard-8t": "tpuv6e1t",
}

# Sizes of the head's containers as xpk gives them (AI-Hypercomputer/xpk @367c8382, v1.13.0+1), as limits, which
# Kubernetes also takes as the requests: src/xpk/templates/pathways_workload_create.yaml.j2 gives pathways-proxy
# cpu 16 / memory 100G and pathways-rm cpu 8 / memory 32G; src/xpk/core/docker_resources.py
# get_main_container_resources gives the user's (MaxText) container of a Pathways workload cpu 24 / memory 100G
# ("Resources requirements for Pathways workload containers are known"). During an elastic recovery the restored
# checkpoint streams through the proxy, hence its 100 GB. In all 48 vCPU and 232 GB: xpk picks the head's machine
# among types with at least 49 vCPUs and 233 GiB (src/xpk/core/pathways.py get_pathways_machine_types), e.g. the
# n2-standard-64 of the Pathways stack.
PROXY_RESOURCES = {"cpu": "16", "memory": "100G"}
RM_RESOURCES = {"cpu": "8", "memory": "32G"}
TRAINER_RESOURCES = {"cpu": "24", "memory": "100G"}

_GIB_PER_UNIT = {"Gi": 1.0, "G": 1e9 / 2**30}


def head_requests() -> tuple[int, float]:
    """(vCPUs, GiB) the head pod requests: the stack config checks them against the CPU pool's machine type."""
    parts = (PROXY_RESOURCES, RM_RESOURCES, TRAINER_RESOURCES)
    cpu = sum(int(part["cpu"]) for part in parts)
    memory = 0.0
    for part in parts:
        quantity = part["memory"]
        unit = "Gi" if quantity.endswith("Gi") else "G"
        memory += float(quantity[:-len(unit)]) * _GIB_PER_UNIT[unit]
    return cpu, memory


