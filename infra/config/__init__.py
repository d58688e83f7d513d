"""Stack config as a package: schema (keys, defaults, per-key checks), parse, cross-key rules, build, docs.

Import direction: core ← infra.config; nothing here imports Pulumi except `source` (at call time).
"""
from infra.config.build import build
from infra.config.model import (Capacity, ClusterMode, ClusterSettings, ConfigError, GcpSettings, JobSetSettings,
                                KubernetesSettings, NetworkSettings, PathwaysSettings, RaySettings, StackConfig,
                                StorageSettings, TpuSettings, TrainingRun, WorkloadSettings)
from infra.config.parse import parse_values
from infra.config.schema import DERIVED, KEYS, KEYS_BY_NAME, NAMESPACE, REQUIRED, Key
from infra.config.source import raw_from_pulumi

__all__ = [
    "build", "raw_from_pulumi", "parse_values", "ConfigError", "StackConfig", "Capacity", "ClusterMode",
    "ClusterSettings", "GcpSettings", "JobSetSettings", "KubernetesSettings", "NetworkSettings", "PathwaysSettings",
    "RaySettings", "StorageSettings", "TpuSettings", "TrainingRun", "WorkloadSettings", "DERIVED", "KEYS", "KEYS_BY_NAME",
    "NAMESPACE", "REQUIRED", "Key",
]
