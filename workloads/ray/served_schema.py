"""Does the cluster's KubeRay serve every field of our RayJob? (pure: no Pulumi import)

The GKE Ray add-on installs KubeRay's CRDs, and which KubeRay it runs is not published per GKE version. A field the
served schema does not declare is not refused: pulumi-kubernetes creates objects with field validation "Warn"
(provider/pkg/await/await.go: `FieldValidation: metav1.FieldValidationWarn` for server-side apply; a plain create
sends none, and the API server's default is Warn), so the API server drops the field and only warns. For
`authOptions` that would be a dashboard and Jobs API without authentication (Ray's Jobs API runs arbitrary code);
for `upgradeStrategy` a changed cluster that is never rolled out. So the stack reads the served RayJob CRD
(rayjobs.ray.io) and refuses to create the RayJob when its schema lacks any field the RayJob sets.

When fields appeared (ray-project/kuberay, ray-operator/config/crd/bases at the release tags): `authOptions` in
v1.5.1 (absent in v1.5.0), `upgradeStrategy` and `preRunningDeadlineSeconds` in v1.6.0 (absent in v1.5.2). Without
`preRunningDeadlineSeconds` a job waiting for Spot capacity would wait, and bill its head, without limit.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

RAYJOB_CRD = "rayjobs.ray.io"
# The KubeRay release that first serves a field we may set (checked at the release tags, see the module docstring).
FIRST_KUBERAY = {
    "spec.rayClusterSpec.authOptions": "1.5.1",
    "spec.rayClusterSpec.upgradeStrategy": "1.6.0",
    "spec.preRunningDeadlineSeconds": "1.6.0",
}


def _path(parts: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


def _get(schema: Mapping[str, Any], name: str) -> Any:
    """A schema keyword as Kubernetes spells it (additionalProperties, x-kubernetes-...) or as Pulumi's Python
    output types do (additional_properties, x_kubernetes_...)."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).replace("-", "_")
    return schema.get(name, schema.get(snake))


def _flag(schema: Mapping[str, Any], name: str) -> bool:
    return bool(_get(schema, name))


def version_schema(crd_spec: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    """The openAPIV3Schema of `version` in a CRD's spec, if that version is served."""
    for entry in crd_spec.get("versions") or []:
        if entry.get("name") == version and entry.get("served", True):
            schema = entry.get("schema") or {}
            return schema.get("openAPIV3Schema") or schema.get("open_apiv3_schema") or {}
    return None


def undeclared_fields(instance: Any, schema: Mapping[str, Any], path: tuple[str | int, ...] = ()) -> Iterator[str]:
    """Paths of the fields of `instance` that the structural schema would prune (Kubernetes docs, "Field
    pruning": unknown fields are dropped unless x-kubernetes-preserve-unknown-fields is set)."""
    if isinstance(instance, dict):
        if _flag(schema, "x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return
        properties = schema.get("properties") or {}
        extra = _get(schema, "additionalProperties")
        embedded = _flag(schema, "x-kubernetes-embedded-resource")
        for key, value in instance.items():
            if key in properties:
                yield from undeclared_fields(value, properties[key], path + (key,))
            elif isinstance(extra, Mapping):
                yield from undeclared_fields(value, extra, path + (key,))
            elif embedded and key in ("apiVersion", "kind", "metadata"):
                continue
            elif not _flag(schema, "x-kubernetes-preserve-unknown-fields"):
                yield _path(path + (key,))
    elif isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        for index, value in enumerate(instance):
            yield from undeclared_fields(value, schema["items"], path + (index,))


def unserved_problem(ray_job: Mapping[str, Any], crd_spec: Mapping[str, Any]) -> str | None:
    """Why the served RayJob CRD cannot take `ray_job` without dropping fields, or None when it can."""
    version = str(ray_job["apiVersion"]).rsplit("/", 1)[-1]
    schema = version_schema(crd_spec, version)
    if schema is None:
        return f"the cluster's KubeRay does not serve RayJob {ray_job['apiVersion']}"
    # apiVersion, kind and metadata are the API server's own; only the spec is pruned against the schema.
    properties = schema.get("properties") or {}
    spec_schema = properties.get("spec") if "spec" in properties else (
        schema if _flag(schema, "x-kubernetes-preserve-unknown-fields") else {})
    missing = sorted(set(undeclared_fields(ray_job.get("spec") or {}, spec_schema, ("spec",))))
    if not missing:
        return None
    needs = sorted({FIRST_KUBERAY[p] for p in missing if p in FIRST_KUBERAY},
                   key=lambda v: tuple(map(int, v.split("."))))
    needed = f" (KubeRay >= {needs[-1]})" if needs else ""
    return (f"the cluster's KubeRay serves a RayJob schema without {', '.join(missing)}{needed}: the API server would "
            "drop them without an error, and without authOptions the Ray dashboard and Jobs API run "
            "unauthenticated. The RayJob is not created; use a GKE version whose Ray add-on serves them "
            "(`kubectl get crd rayjobs.ray.io -o yaml` shows the served schema)")
