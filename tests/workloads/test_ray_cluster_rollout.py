"""How RayCluster changes reach the pods, and what of the head is reachable (KubeRay v1.7.0 CRD in ../shared)."""
from __future__ import annotations

import copy

import pytest

from infra.config import build
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.ray import manifests as ray_manifests
from workloads.ray.component import ray_objects

BUNDLE = load_bundle()


def cluster_of(raw: dict) -> dict:
    return ray_objects(build(raw), BUNDLE)["ray-cluster"]


def schema_findings(cluster: dict, prefix: str) -> list:
    """CRD findings under `prefix` (the cluster alone: cross-object findings about its namespace, service
    account and claim template belong to the whole-stack validation in test_ray.py)."""
    report = validate_objects([cluster], default_schemas_dir())
    assert not report.cr_check_skipped
    return [f for f in report.errors if f.field_path.startswith(prefix)]


def test_pod_template_changes_recreate_the_pods():
    """KubeRay only recreates RayCluster pods on a spec change with `spec.upgradeStrategy.type: Recreate`; the
    default (None) leaves the old pods running with the old image and env (ray-project/kuberay v1.7.0,
    ray-operator/controllers/ray/raycluster_controller.go shouldRecreatePodsForUpgrade; the field is in
    ray-operator/config/crd/bases/ray.io_rayclusters.yaml @v1.7.0, added in v1.6.0 by #4185)."""
    cluster = cluster_of(load_stack_config("prod", REPO))
    assert cluster["spec"]["upgradeStrategy"] == {"type": "Recreate"}
    assert schema_findings(cluster, "spec.upgradeStrategy") == []
    broken = copy.deepcopy(cluster)
    broken["spec"]["upgradeStrategy"]["type"] = "Sometimes"
    assert schema_findings(broken, "spec.upgradeStrategy") != []      # the CRD does check the field


def test_an_unchanged_stack_gives_the_same_cluster_and_a_changed_image_another():
    """Recreate compares a hash of the spec (kuberay v1.7.0 utils.GenerateHashWithoutReplicasAndWorkersToDelete):
    the manifest must be a pure function of the config, so an unchanged `pulumi up` diffs nothing and recreates
    nothing, while a new image changes the spec KubeRay hashes."""
    raw = load_stack_config("prod", REPO)
    assert cluster_of(raw) == cluster_of(copy.deepcopy(raw))
    changed = cluster_of({**raw, "rayImage": "rayproject/ray:2.60.0-py312-cu128"})
    assert changed["spec"] != cluster_of(raw)["spec"]


def test_head_service_is_cluster_internal_and_token_auth_is_on():
    """Ray's job API runs arbitrary code: the head Service KubeRay creates is ClusterIP (KubeRay v1.7.0 CRD
    headGroupSpec.serviceType), and the dashboard/job API need Ray's token (authOptions, KubeRay >= 1.5.1)."""
    for stack in ("prod", "dev"):
        cluster = cluster_of(load_stack_config(stack, REPO))
        spec = cluster["spec"]
        assert spec["headGroupSpec"]["serviceType"] == "ClusterIP"
        assert schema_findings(cluster, "spec.headGroupSpec.serviceType") == []
        assert spec["authOptions"] == {"mode": "token"}


def test_the_dashboard_load_balancer_is_refused_without_token_auth(monkeypatch):
    raw = {**MINIMAL, "dashboardExposure": "internal-lb", "dashboardSourceRanges": ["10.10.0.0/16"]}
    objects = ray_objects(build(raw), BUNDLE)
    assert objects["ray-cluster"]["spec"]["authOptions"]["mode"] == "token" and "dashboard-ilb" in objects
    original = ray_manifests.ray_cluster

    def without_auth(*args, **kwargs):
        cluster = original(*args, **kwargs)
        del cluster["spec"]["authOptions"]
        return cluster

    monkeypatch.setattr(ray_manifests, "ray_cluster", without_auth)
    with pytest.raises(ValueError, match="token auth"):
        ray_objects(build(raw), BUNDLE)
