"""Register a manifest dict through the Kubernetes provider: typed resources for core kinds, CustomResource
for CRDs. The dict passes through verbatim (camelCase), so what the tests validate is what is applied."""
from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s


class _ObjectWithTopLevelFields(pulumi.CustomResource):
    """A custom resource with top-level fields besides `spec` (e.g. Kueue's WorkloadPriorityClass has `value`
    and `description`), which pulumi-kubernetes' Python CustomResource cannot carry. The provider receives the
    inputs as the object, exactly as for CustomResource (same `kubernetes:<apiVersion>:<kind>` type token)."""

    def __init__(self, logical_name: str, obj: dict, opts: pulumi.ResourceOptions):
        super().__init__(f"kubernetes:{obj['apiVersion']}:{obj['kind']}", logical_name, dict(obj), opts)


def register(logical_name: str, obj: dict, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    api_version, kind, metadata = obj["apiVersion"], obj["kind"], obj["metadata"]
    if (api_version, kind) == ("v1", "ConfigMap"):
        return k8s.core.v1.ConfigMap(logical_name, metadata=metadata, data=obj.get("data"),
                                     immutable=obj.get("immutable"), opts=opts)
    if (api_version, kind) == ("v1", "Service"):
        return k8s.core.v1.Service(logical_name, metadata=metadata, spec=obj["spec"], opts=opts)
    if (api_version, kind) == ("resource.k8s.io/v1", "ResourceClaimTemplate"):
        return k8s.resource.v1.ResourceClaimTemplate(logical_name, metadata=metadata, spec=obj["spec"], opts=opts)
    if (api_version, kind) == ("storage.k8s.io/v1", "StorageClass"):
        return k8s.storage.v1.StorageClass(logical_name, metadata=metadata, provisioner=obj["provisioner"],
                                           parameters=obj.get("parameters"),
                                           volume_binding_mode=obj.get("volumeBindingMode"),
                                           reclaim_policy=obj.get("reclaimPolicy"), opts=opts)
    if (api_version, kind) == ("rbac.authorization.k8s.io/v1", "Role"):
        return k8s.rbac.v1.Role(logical_name, metadata=metadata, rules=obj["rules"], opts=opts)
    if (api_version, kind) == ("rbac.authorization.k8s.io/v1", "RoleBinding"):
        return k8s.rbac.v1.RoleBinding(logical_name, metadata=metadata, role_ref=obj["roleRef"],
                                       subjects=obj["subjects"], opts=opts)
    if (api_version, kind) == ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"):
        return k8s.admissionregistration.v1.ValidatingAdmissionPolicy(logical_name, metadata=metadata,
                                                                      spec=obj["spec"], opts=opts)
    if (api_version, kind) == ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"):
        return k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(logical_name, metadata=metadata,
                                                                             spec=obj["spec"], opts=opts)
    if "/" not in api_version or "." not in api_version.split("/")[0]:
        # Built-in groups (v1, apps/v1, batch/v1, ...) have typed resources with their own type tokens.
        raise ValueError(f"built-in kind {api_version} {kind} needs its typed resource here")
    if set(obj) - {"apiVersion", "kind", "metadata", "spec"}:
        return _ObjectWithTopLevelFields(logical_name, obj, opts)
    return k8s.apiextensions.CustomResource(logical_name, api_version=api_version, kind=kind, metadata=metadata,
                                            spec=obj.get("spec"), opts=opts)
