"""Where raw config comes from during `pulumi up`: the engine's config for this project's namespace."""
from __future__ import annotations

from typing import Any

from infra.config.schema import NAMESPACE


def raw_from_pulumi() -> dict[str, Any]:
    """This project's config as the Pulumi engine passed it (namespace stripped). Other namespaces
    (gcp:, kubernetes:) belong to providers and are left alone."""
    from pulumi.runtime import config as runtime_config

    merged = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix):]: value for key, value in merged.items() if key.startswith(prefix)}
