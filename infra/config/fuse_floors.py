"""The GKE version floors of the run's data mounts (Cloud Storage FUSE CSI volume attributes): a focused rule, read
by rules.required_versions beside the other floors, so a cluster too old for them is refused before anything is
created instead of the pods failing to mount."""
from __future__ import annotations

from typing import Any

from infra import versions


def fuse_floors(v: dict[str, Any]) -> dict[str, str]:
    """Why each FUSE floor applies -> the version; empty when the run mounts no data (datasetType=synthetic)."""
    if v.get("datasetType") != "grain" or not (v.get("datasetPath") or v.get("evalDatasetPath")):
        return {}
    needs = {"the data mounts (gcsfuseMetadataPrefetchOnMount)": versions.GCSFUSE_METADATA_PREFETCH}
    backend = v.get("workloadBackend")
    if backend == "pathways" or (backend == "jobset" and not v.get("dranet")):
        needs["the data mounts of host-network pods (hostNetworkPodKSA)"] = versions.GCSFUSE_HOST_NETWORK_KSA
    return needs
