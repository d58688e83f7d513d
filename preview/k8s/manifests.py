"""Kubernetes objects as plain dicts, rebuilt from what the program registered under mocks.

Pure Python (no Pulumi import). The offline plan writes these dicts as YAML for
`kubectl apply --dry-run=server` and validates them; tests of other issues build small hand-made dicts
and use the same helpers.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

# Top-level fields of a registered Kubernetes resource's inputs that are not part of the object the
# provider sends to the API server (pulumi-kubernetes resource options travel separately).
_NOT_OBJECT_FIELDS = frozenset({"__defaults", "urn", "id"})

# Core and well-known kinds that are cluster-scoped (Kubernetes API reference, "Cluster-scoped
# resources"); every other kind is treated as namespaced unless its CRD says otherwise.
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "Node", "PersistentVolume", "StorageClass", "PriorityClass", "ClusterRole",
    "ClusterRoleBinding", "CustomResourceDefinition", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "APIService", "RuntimeClass", "IngressClass", "CSIDriver", "CSINode", "VolumeAttachment",
    "DeviceClass", "ResourceSlice",
    # Kueue's cluster-scoped kinds (their CRDs say scope: Cluster).
    "ClusterQueue", "ResourceFlavor", "Cohort", "Topology", "WorkloadPriorityClass",
})

# Namespaces every cluster has, so objects may live there without the stack creating them.
BUILT_IN_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
DEFAULT_NAMESPACE = "default"

# Order in which `kubectl apply -f DIR` (lexical file order) must see kinds so references resolve.
APPLY_ORDER = ("Namespace", "CustomResourceDefinition", "ResourceFlavor", "Cohort", "ClusterQueue",
               "WorkloadPriorityClass", "ServiceAccount", "Role", "ClusterRole", "RoleBinding",
               "ClusterRoleBinding", "ConfigMap", "Secret", "ResourceClaimTemplate", "LocalQueue")


def is_kubernetes_type(type_token: str) -> bool:
    """Pulumi type tokens of whole Kubernetes objects: `kubernetes:<group>/<version>:<Kind>` (providers
    are `pulumi:providers:kubernetes`; yaml/helm/kustomize groupings and patches are not objects)."""
    if not type_token.startswith("kubernetes:"):
        return False
    _, module, kind = type_token.split(":", 2)
    # <Kind>Patch resources are partial server-side-apply patches of objects that exist already.
    return "/" in module and not module.startswith(("yaml", "helm.sh", "kustomize")) and not kind.endswith("Patch")


def integral_floats_to_ints(value: Any) -> Any:
    """Mocked inputs come back with every number as a float (docs/platform-notes.md §2); the API server would get 4,
    not 4.0, so integral floats become ints again."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: integral_floats_to_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral_floats_to_ints(item) for item in value]
    return value


def object_from_inputs(inputs: Mapping[str, Any], logical_name: str) -> dict[str, Any]:
    """The object pulumi-kubernetes would send: apiVersion, kind, metadata and every other top-level
    field (spec, data, rules ...). CustomResource inputs pass through verbatim (camelCase)."""
    obj = {key: integral_floats_to_ints(value) for key, value in inputs.items()
           if key not in _NOT_OBJECT_FIELDS and value is not None}
    metadata = dict(obj.get("metadata") or {})
    if not metadata.get("name"):
        # pulumi-kubernetes auto-names such objects (logical name plus a random suffix); the logical
        # name stands in for it so the object can still be checked and written.
        metadata["name"] = logical_name
    obj["metadata"] = metadata
    # apiVersion and kind first, then metadata, then the rest, as people write manifests.
    head = {key: obj.pop(key) for key in ("apiVersion", "kind", "metadata") if key in obj}
    return {**head, **obj}


def kind_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("kind", ""))


def api_group(obj: Mapping[str, Any]) -> str:
    """'ray.io' for 'ray.io/v1', '' for the core group 'v1'."""
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def api_version_only(obj: Mapping[str, Any]) -> str:
    return str(obj.get("apiVersion", "")).rsplit("/", 1)[-1]


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def namespace_of(obj: Mapping[str, Any], cluster_scoped: Iterable[str] = CLUSTER_SCOPED_KINDS) -> str | None:
    """The object's namespace (the provider default 'default' when unset), None when cluster-scoped."""
    if kind_of(obj) in cluster_scoped:
        return None
    return str((obj.get("metadata") or {}).get("namespace") or DEFAULT_NAMESPACE)


def object_ref(obj: Mapping[str, Any]) -> str:
    """How findings name an object: Kind/namespace/name, or Kind/name when cluster-scoped."""
    namespace = namespace_of(obj)
    return "/".join(part for part in (kind_of(obj), namespace, name_of(obj)) if part)


def apply_rank(obj: Mapping[str, Any]) -> int:
    kind = kind_of(obj)
    return APPLY_ORDER.index(kind) if kind in APPLY_ORDER else len(APPLY_ORDER)


def file_name(index: int, obj: Mapping[str, Any]) -> str:
    """A file name that sorts in apply order and says what is inside, e.g. 000-namespace-tpu-training.yaml."""
    parts = [f"{index:03d}", kind_of(obj).lower()]
    namespace = namespace_of(obj)
    if namespace:
        parts.append(namespace)
    parts.append(name_of(obj))
    return "-".join(parts) + ".yaml"
