"""Shared helpers for this stack's ComponentResources."""
from __future__ import annotations

import pulumi

TYPE_PREFIX = "tpu-multislice"


def component_type(module: str, name: str) -> str:
    """Type token tpu-multislice:<module>:<Type> (Pulumi component naming guideline)."""
    return f"{TYPE_PREFIX}:{module}:{name}"


def child_options(parent: pulumi.Resource, **kwargs) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, **kwargs)
