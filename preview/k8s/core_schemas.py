"""Schemas of built-in Kubernetes kinds, from the `kubernetes-validate` package's bundled JSON schemas.

Why not `kubernetes_validate.validate()` itself: it stops at the first error, and the plan must list
every error of an object. So this module picks the package's bundled strict schema for the cluster's
Kubernetes minor version and hands a validator to the caller, who iterates all errors.
Strict schemas set additionalProperties: false, so a misspelt field is an error, as it is for
`kubectl apply` (server-side field validation defaults to Strict since Kubernetes 1.27).
"""
from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any, Mapping

import jsonschema
from referencing import Registry, Resource

_PACKAGE = "kubernetes_validate"
_SCHEMA_ROOT = "kubernetes-json-schema"
_DIRECTORY = re.compile(r"^v(\d+)\.(\d+)\.\d+-local-strict$")


def _root():
    return resources.files(_PACKAGE).joinpath(_SCHEMA_ROOT)


@functools.lru_cache(maxsize=1)
def bundled_versions() -> tuple[tuple[int, int], ...]:
    """Kubernetes minor versions whose strict schemas the installed package ships, oldest first."""
    found = []
    for entry in _root().iterdir():
        match = _DIRECTORY.match(entry.name)
        if match:
            found.append((int(match.group(1)), int(match.group(2))))
    return tuple(sorted(found))


def schema_version_for(cluster_version: str | None) -> tuple[str, str | None]:
    """('1.34', note) — the newest bundled minor not newer than the cluster's minor version.

    The cluster is created at its minimum version or later, so objects must be valid there."""
    versions = bundled_versions()
    newest = versions[-1]
    if not cluster_version:
        return f"{newest[0]}.{newest[1]}", "cluster version unknown: newest bundled Kubernetes schemas used"
    major, minor = (int(part) for part in cluster_version.split(".")[:2])
    eligible = [v for v in versions if v <= (major, minor)]
    if not eligible:
        oldest = versions[0]
        return (f"{oldest[0]}.{oldest[1]}",
                f"cluster version {cluster_version} is older than every bundled schema; {oldest[0]}.{oldest[1]} used")
    chosen = eligible[-1]
    return f"{chosen[0]}.{chosen[1]}", None


def _schema_file_stem(kind: str, api_version: str) -> str:
    """The package's file layout: '<kind>-<group's first label>-<version>', core group without a
    prefix: Namespace v1 → namespace-v1, ResourceClaimTemplate resource.k8s.io/v1 →
    resourceclaimtemplate-resource-v1."""
    if "/" in api_version:
        group, version = api_version.rsplit("/", 1)
        return f"{kind.lower()}-{group.split('.')[0]}-{version}"
    return f"{kind.lower()}-{api_version}"


@functools.lru_cache(maxsize=4)
def _definitions(schema_version: str) -> Registry:
    directory = _root().joinpath(f"v{schema_version}.0-local-strict")
    definitions = json.loads(directory.joinpath("_definitions.json").read_text())
    return Resource.from_contents(definitions) @ Registry()


@functools.lru_cache(maxsize=256)
def _validator(schema_version: str, kind: str, api_version: str) -> jsonschema.protocols.Validator | None:
    directory = _root().joinpath(f"v{schema_version}.0-local-strict")
    path = directory.joinpath(_schema_file_stem(kind, api_version) + ".json")
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema, registry=_definitions(schema_version))


def validator_for(obj: Mapping[str, Any], schema_version: str) -> jsonschema.protocols.Validator | None:
    """A validator for a built-in kind, or None when the package has no schema for it (a custom
    resource, or a kind/apiVersion this Kubernetes version does not serve)."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None
    return _validator(schema_version, kind, api_version)


def is_built_in_group(api_version: str) -> bool:
    """Core group ('v1'), the unsuffixed groups (apps, batch ...) and *.k8s.io are served by
    Kubernetes itself. Everything else comes from a CRD, including the SIG projects' *.x-k8s.io
    groups (JobSet, Kueue)."""
    if "/" not in api_version:
        return True
    group = api_version.rsplit("/", 1)[0]
    built_in_suffixes = (".k8s.io",)
    plain_groups = {"apps", "batch", "autoscaling", "policy"}
    return group in plain_groups or (group.endswith(built_in_suffixes) and not group.endswith(".x-k8s.io"))
