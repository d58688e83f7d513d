"""Schemas of custom resources (KubeRay, JobSet, Kueue ...) from CRD files, as JSON Schema validators.

A CRD's `openAPIV3Schema` is close to JSON Schema draft 4, with Kubernetes extensions that the API
server applies and jsonschema does not know. The conversion below makes jsonschema judge like the
API server for the parts that matter offline:
- unknown fields: the server prunes or (with `kubectl apply`, field validation Strict) rejects fields
  a structural schema does not declare, unless `x-kubernetes-preserve-unknown-fields` is set
  (Kubernetes docs, "Field pruning" and "Field validation"); so declared objects become closed;
- `nullable: true` (OpenAPI 3.0) becomes a union with null;
- embedded resources (`x-kubernetes-embedded-resource`) always allow apiVersion, kind and metadata.
CEL rules (`x-kubernetes-validations`) are evaluated apart, on the defaulted object (preview/k8s/cel_rules.py).

Files are found by API group (controller-gen names them `<group>_<plural>.yaml`) and parsed lazily,
only for the kinds the stack uses. The KubeRay CRDs are about 1 MB each and take ~0.5 s each to parse
as YAML, so the parsed documents are cached as JSON (10x faster to read) under the user's cache
directory, keyed by the file's SHA-256; a cache that cannot be written is simply not used.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses the big CRDs ~10x faster


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpu-multislice" / "crd-json"


def load_crd_documents(path: Path) -> list[Any]:
    """The YAML documents of a CRD file, through the JSON cache when possible."""
    data = path.read_bytes()
    cached = _cache_dir() / f"{hashlib.sha256(data).hexdigest()}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    documents = [d for d in yaml.load_all(data, Loader=_YAML_LOADER) if d]
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(documents))
        partial.replace(cached)   # atomic: concurrent runs never read a half-written cache file
    except (OSError, TypeError, ValueError):
        pass
    return documents


@dataclass(frozen=True, eq=False)
class CrdVersion:
    group: str
    kind: str
    version: str
    served: bool
    namespaced: bool
    open_api: dict
    source: Path

    @functools.cached_property
    def schema(self) -> dict:
        return _object_schema(self.open_api)

    @functools.cached_property
    def cel_rule_count(self) -> int:
        return _count_cel_rules(self.open_api)

    @functools.cached_property
    def validator(self) -> jsonschema.protocols.Validator:
        return jsonschema.Draft4Validator(self.schema)

    def defaulted(self, obj: Mapping[str, Any]) -> Any:
        return with_defaults(obj, self.schema)


def _closed(schema: Any) -> Any:
    """A copy of `schema` with the API server's unknown-field and nullable behaviour made explicit."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _closed(value) for key, value in schema.items()}
    if result.get("nullable") is True and isinstance(result.get("type"), str):
        result["type"] = [result["type"], "null"]
    properties = result.get("properties")
    if result.get("x-kubernetes-embedded-resource"):
        properties = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                      "metadata": {"type": "object"}, **(properties or {})}
        result["properties"] = properties
    if (properties is not None and "additionalProperties" not in result
            and not result.get("x-kubernetes-preserve-unknown-fields")):
        result["additionalProperties"] = False
    return result


def with_defaults(instance: Any, schema: Mapping[str, Any]) -> Any:
    """A copy of `instance` with the schema's `default`s filled in where a field is missing, as the API
    server does before it validates (Kubernetes docs, "Defaulting"): e.g. KubeRay's minReplicas and
    maxReplicas are required but defaulted, so omitting them is fine."""
    if isinstance(instance, dict):
        result = dict(instance)
        properties = schema.get("properties") or {}
        for key, sub_schema in properties.items():
            if key not in result and isinstance(sub_schema, dict) and "default" in sub_schema:
                result[key] = copy.deepcopy(sub_schema["default"])
            if key in result and isinstance(sub_schema, dict):
                result[key] = with_defaults(result[key], sub_schema)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in result.keys() - properties.keys():
                result[key] = with_defaults(result[key], extra)
        return result
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(item, schema["items"]) for item in instance]
    return instance


def _count_cel_rules(schema: Any) -> int:
    if isinstance(schema, list):
        return sum(_count_cel_rules(item) for item in schema)
    if not isinstance(schema, dict):
        return 0
    own = len(schema.get("x-kubernetes-validations") or [])
    return own + sum(_count_cel_rules(value) for value in schema.values())


def _object_schema(open_api: dict) -> dict:
    """The top-level object: apiVersion/kind/metadata are checked by the server itself, so the
    schema's own metadata is left open (names and labels are checked by the rules module)."""
    schema = _closed(open_api)   # _closed builds new dicts all the way down; the input stays untouched
    schema["properties"] = {**schema.get("properties", {}), "metadata": {"type": "object"}}
    return schema


class CrdLibrary:
    """Every CRD under a directory (searched recursively), loaded by API group on first use."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._by_group: dict[str, list[Path]] = {}
        for path in sorted(directory.rglob("*.yaml")):
            group = path.name.split("_", 1)[0]
            if "_" in path.name:
                self._by_group.setdefault(group, []).append(path)

    @property
    def groups(self) -> list[str]:
        return sorted(self._by_group)

    def has_group(self, group: str) -> bool:
        return group in self._by_group

    @functools.lru_cache(maxsize=None)
    def _load_file(self, path: Path) -> tuple[CrdVersion, ...]:
        loaded: list[CrdVersion] = []
        for document in load_crd_documents(path):
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec.get("versions", []):
                open_api = (version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}
                loaded.append(CrdVersion(
                    group=spec["group"], kind=spec["names"]["kind"], version=version["name"],
                    served=bool(version.get("served", True)), namespaced=spec.get("scope") != "Cluster",
                    open_api=open_api, source=path))
        return tuple(loaded)

    def versions_of(self, group: str, kind: str) -> list[CrdVersion]:
        """Tries the file named after the kind's usual plural first (rayclusters for RayCluster), so a
        RayCluster does not pay for parsing the RayJob and RayService CRDs too."""
        usual = f"{group}_{kind.lower()}s.yaml"
        for path in sorted(self._by_group.get(group, []), key=lambda p: p.name != usual):
            found = [v for v in self._load_file(path) if v.kind == kind]
            if found:
                return found
        return []

    def lookup(self, obj: Mapping[str, Any]) -> CrdVersion | None:
        api_version = str(obj.get("apiVersion", ""))
        if "/" not in api_version:
            return None
        group, version = api_version.rsplit("/", 1)
        return next((v for v in self.versions_of(group, str(obj.get("kind"))) if v.version == version), None)
