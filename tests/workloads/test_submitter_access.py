"""The submitter pod may read what it decides "the cluster is gone" from, and nothing more (trainer/kuberay_watch.py).

Sources:
- kuberay v1.7.0 ray-operator/controllers/ray/rayjob_controller.go `getSubmitterTemplate`: the submitter's pod
  template gets the label `ray.io/originated-from-cr-name` = the RayJob's name (utils/constant.go
  RayOriginatedFromCRNameLabelKey), which the container reads through the downward API.
- Kubernetes "Expose Pod Information to Containers Through Environment Variables": `fieldRef.fieldPath` accepts
  `metadata.namespace` and `metadata.labels['<KEY>']`.
- Kubernetes RBAC (https://kubernetes.io/docs/reference/access-authn-authz/rbac/): a request is allowed when a rule
  of a Role bound to the subject in the request's namespace lists its API group, resource and verb, and, if the
  rule has resourceNames, the object's name.
"""
from __future__ import annotations

import pytest

from core.ray_cluster import raycluster_path
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from trainer import kuberay_watch
from workloads.bundle import load_bundle
from workloads.ray import manifests
from workloads.ray.component import ray_objects


def allowed(objects: dict, *, account: str, namespace: str, verb: str, resource: str, name: str) -> bool:
    roles = {o["metadata"]["name"]: o for o in objects.values() if o["kind"] == "Role"
             and o["metadata"]["namespace"] == namespace}
    for binding in (o for o in objects.values() if o["kind"] == "RoleBinding"):
        if binding["metadata"]["namespace"] != namespace or not any(
                s == {"kind": "ServiceAccount", "name": account, "namespace": namespace} for s in binding["subjects"]):
            continue
        role = roles.get(binding["roleRef"]["name"])
        for rule in (role or {}).get("rules", []):
            if ("ray.io" in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
                    and name in rule.get("resourceNames", [name])):
                return True
    return False


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack(request):
    return ray_objects(build(load_stack_config(request.param, REPO)), load_bundle())


def test_the_submitter_is_told_its_rayjob_by_kuberays_own_label(stack):
    pod = stack["ray-job"]["spec"]["submitterPodTemplate"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env[kuberay_watch.RAYJOB_NAME_ENV] == "metadata.labels['ray.io/originated-from-cr-name']"
    assert env[kuberay_watch.RAYJOB_NAMESPACE_ENV] == "metadata.namespace"
    # The workloads layer cannot import trainer: its literals equal the watch's.
    assert (manifests.RAYJOB_NAME_ENV, manifests.RAYJOB_NAMESPACE_ENV, manifests.RAYJOB_NAME_LABEL) == (
        kuberay_watch.RAYJOB_NAME_ENV, kuberay_watch.RAYJOB_NAMESPACE_ENV, kuberay_watch.RAYJOB_NAME_LABEL)


def test_the_submitter_may_get_its_rayjob_and_raycluster_and_nothing_else(stack):
    job = stack["ray-job"]
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    who = dict(account=job["spec"]["submitterPodTemplate"]["spec"]["serviceAccountName"], namespace=namespace)
    # The two reads trainer/kuberay_watch.py makes, at the paths it makes them.
    assert kuberay_watch.rayjob_path(namespace, name).endswith(f"/rayjobs/{name}")
    assert raycluster_path(namespace, f"{name}-x7k2p").endswith(f"/rayclusters/{name}-x7k2p")
    assert allowed(stack, **who, verb="get", resource="rayjobs", name=name)
    assert allowed(stack, **who, verb="get", resource="rayclusters", name=f"{name}-x7k2p")
    assert not allowed(stack, **who, verb="get", resource="rayjobs", name="another-stacks-job")
    for verb in ("list", "watch", "update", "delete", "create"):
        for resource in ("rayjobs", "rayclusters"):
            assert not allowed(stack, **who, verb=verb, resource=resource, name=name), (verb, resource)
    role = stack["submitter-role"]
    assert all(rule["verbs"] == ["get"] for rule in role["rules"])


def test_under_pulumi_the_submitter_role_is_bound_before_the_job():
    from tests.conftest import committed_stack_run

    by_name = {r.name: r for r in committed_stack_run("prod").resources}
    assert by_name["submitter-binding"].urn in by_name["ray-job"].dependencies
