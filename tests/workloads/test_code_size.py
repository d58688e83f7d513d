"""Every ConfigMap a committed stack ships stays far below what the API server accepts for one object.

Kubernetes refuses a ConfigMap whose data exceeds 1 MiB (k8s.io/kubernetes pkg/apis/core/validation/validation.go
`ValidateConfigMap`: "must have at most 1048576 bytes", core.MaxSecretSize; docs: "The data stored in a
ConfigMap cannot exceed 1 MiB", https://kubernetes.io/docs/concepts/configuration/configmap/), and etcd refuses a
request above 1.5 MiB (--max-request-bytes). The code ConfigMap once held 783 KB with the worker lock alone at
439 KB: a larger lock would have been refused when the stack was created. Half the limit leaves room for the code
and the lock to grow.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import STACKS_WITH_A_RUN, committed_stack_run

CONFIG_MAP_LIMIT_BYTES = 1024 * 1024
MARGIN = 0.5


def config_map_bytes(obj: dict) -> int:
    """What ValidateConfigMap counts: the data and binaryData bytes (keys included, as it adds len(key))."""
    data = sum(len(k) + len(v.encode()) for k, v in (obj.get("data") or {}).items())
    return data + sum(len(k) + len(v) for k, v in (obj.get("binaryData") or {}).items())


@pytest.mark.parametrize("stack", STACKS_WITH_A_RUN)
def test_every_config_map_has_a_wide_margin_below_the_object_limit(stack):
    config_maps = [r for r in committed_stack_run(stack).resources
                   if r.type == "kubernetes:core/v1:ConfigMap"]
    assert config_maps, f"{stack}: no ConfigMap registered (is the code still shipped?)"
    for resource in config_maps:
        size = config_map_bytes(resource.inputs)
        whole = len(json.dumps(resource.inputs).encode())
        assert size <= MARGIN * CONFIG_MAP_LIMIT_BYTES, (
            f"{stack}: ConfigMap {resource.name} holds {size} bytes, over {MARGIN:.0%} of the 1 MiB limit")
        assert whole <= MARGIN * CONFIG_MAP_LIMIT_BYTES, (stack, resource.name, whole)
