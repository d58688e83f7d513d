"""Shared helpers for this stack's ComponentResources."""
from __future__ import annotations

import pulumi

TYPE_PREFIX = "tpu-multislice"


def component_type(module: str, name: str) -> str:
    """Type token tpu-multislice:<module>:<Type> (Pulumi component naming guideline)."""
    return f"{TYPE_PREFIX}:{module}:{name}"


def deleted_with_cluster(cluster: pulumi.Resource) -> pulumi.Resource | None:
    """What a Kubernetes object is deleted with: the cluster when the stack owns it (destroy skips the object,
    which goes with the cluster), nothing when the cluster is another stack's (a run on a shared cluster,
    infra/cluster_ref.py): the run's destroy must delete its objects, since the cluster stays."""
    return None if isinstance(cluster, pulumi.StackReference) else cluster


def child_options(parent: pulumi.Resource, **kwargs) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, **kwargs)
